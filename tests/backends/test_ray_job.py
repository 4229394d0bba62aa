"""The Ray backend's bookkeeping in a job folder (``backends.ray_job``), which job code writes too. No Ray needed."""
import os

from dlsched.backends.ray_job import slot_file_groups
from dlsched.train.launcher import SLOTS_FILE
from tests.waiting import blocked_on_fifo


def test_a_fifo_or_a_huge_file_in_place_of_the_ray_slot_file_names_no_groups(tmp_path):
    """The Ray backend reads a job folder's slot file (which placement groups to free) in the service: a FIFO there,
    made by job code, blocked it until a writer came; a huge one was read whole."""
    os.mkfifo(tmp_path / SLOTS_FILE)
    assert blocked_on_fifo(tmp_path / SLOTS_FILE, lambda: slot_file_groups(tmp_path)) == (False, [[]])
