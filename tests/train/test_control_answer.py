"""Each step record names the control request its group was formed for (``control_generation``), not the newest one
the coordinator has read: the group before a resize trains on while the newcomers prepare, and a step of it must not
pass for one of the new group (the service frees the slots a move leaves on such a step, ``slot_holds``)."""
from __future__ import annotations

import pytest

from dlsched.train.coordinator import Coordinator, Options
from dlsched.train.files import Control, write_control

from .helpers import MLP, events, wait_for_event, wait_for_step
from .test_preemption import RESIZED_SAMPLES, gated, step_rows, terminate, wait_for_file


def _step(generation: int) -> dict:
    """A step record as a worker pushes it (the coordinator adds the rest)."""
    return {"time": 0.0, "step": 1, "epoch": 0, "generation": generation, "samples": 12, "samples_per_s": 1.0,
            "workers": 0, "batch_size": 12, "per_worker_samples_per_s": [], "table": None}


def test_a_step_is_tagged_with_the_request_its_group_answers(tmp_path):
    c = Coordinator(Options(job_dir=tmp_path, entry=MLP, workers=1))
    try:
        c._publish([], 0, None, 12, None, (0.0, 0))               # the first group: formed for no request
        c.resizer.control.generation = 3                          # request 3 read, its newcomers prepare
        c._publish([], 0, None, 12, None, (0.0, 0), answers=3)    # the group formed for it
        c._publish([], 0, None, 12, None, (0.0, 0))               # replaced after a worker loss: still 3's
        c.resizer.control.generation = 5                          # request 5 read: nothing to change for it
        c.resizer.resize(Control(0, None, 5))
        tags = []
        for generation in range(3):
            rec = _step(generation)
            c._ingest(rec)
            tags.append(rec["control_generation"])
        assert tags == [-1, 3, 5], "a step of the group before a resize is tagged with the request that group answers"
    finally:
        c.progress.close()


@pytest.mark.slow
def test_steps_of_the_group_before_a_resize_keep_its_request_while_the_newcomer_prepares(tmp_path):
    """The coordinator tagged each step with the newest request it had read: the 1-worker group's steps while the
    grow's newcomer prepared already named the grow's request."""
    proc = gated(tmp_path, 1, 1, "prepare", "--param", "throttle_s=0.2", samples=RESIZED_SAMPLES)
    try:
        wait_for_step(tmp_path, 1, proc)
        write_control(tmp_path, 2, None, 1)
        wait_for_file(tmp_path / "gate" / "waiting-1", proc)     # request 1 read: its newcomer prepares, held
        read_at = len(step_rows(tmp_path))
        wait_for_step(tmp_path, step_rows(tmp_path)[-1]["step"] + 2, proc)   # steps of the old group since
        old = step_rows(tmp_path)
        assert len(old) > read_at and all(r["workers"] == 1 and r["control_generation"] == -1 for r in old), old
        (tmp_path / "gate" / "open").touch()
        wait_for_event(tmp_path, "resized", 1, proc)
        wait_for_step(tmp_path, events(tmp_path, "resized")[0]["step"] + 1, proc)
        new = [r for r in step_rows(tmp_path) if r["generation"] == 1]
        assert new and all(r["workers"] == 2 and r["control_generation"] == 1 for r in new), new
    finally:
        terminate(proc)
