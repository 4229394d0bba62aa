"""The Ray backend's bookkeeping in a job folder (``backends.ray_job``), which job code writes too. No Ray needed."""
import os

from dlsched.backends.ray_job import RayJob, slot_file_groups
from dlsched.backends.ray_slots import Slot
from dlsched.train.launcher import IN_USE_FILE, SLOTS_FILE
from tests.waiting import blocked_on_fifo


def test_a_fifo_or_a_huge_file_in_place_of_the_ray_slot_file_names_no_groups(tmp_path):
    """The Ray backend reads a job folder's slot file (which placement groups to free) in the service: a FIFO there,
    made by job code, blocked it until a writer came; a huge one was read whole."""
    os.mkfifo(tmp_path / SLOTS_FILE)
    assert blocked_on_fifo(tmp_path / SLOTS_FILE, lambda: slot_file_groups(tmp_path)) == (False, [[]])


class Books:
    """The slot reserver's part ``collect_retired`` uses (releasing placement groups needs Ray): what it released."""

    def __init__(self):
        self.released = []

    def release(self, groups):
        self.released += groups

    def bundle(self):
        return {}


def test_a_workers_in_use_record_that_is_not_an_object_frees_the_retired_slots_without_raising(tmp_path):
    """``ray-workers.json`` (the runtime's record of the slots its workers occupy) as job code may leave it: `[]` raised
    AttributeError in every poll of the job, and the service observes every job in one pass (one exception there
    stopped every job from starting, ending or progressing)."""
    job = RayJob(1, tmp_path, 1, slots=[], runner=None, runner_node="n", retired=[Slot("s0", "n", "g0")])
    (tmp_path / IN_USE_FILE).write_text("[]")
    books = Books()
    job.collect_retired(books)
    assert books.released == ["g0"] and job.retired == []
