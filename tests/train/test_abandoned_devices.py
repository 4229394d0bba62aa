"""A resize the runtime abandons leaves the group on the devices it had: the request's device list (GPUs the
scheduler may already have given back to another job) must not be where a later straggler swap starts a worker."""
from __future__ import annotations

import json

from dlsched.train.coordinator import Coordinator, Options
from dlsched.train.files import Control, write_control

from .helpers import MLP


def test_a_grow_superseded_while_its_newcomer_prepares_keeps_the_old_device_list(tmp_path):
    c = Coordinator(Options(job_dir=tmp_path, entry=MLP, workers=1))
    try:
        c._publish([], 0, None, 12, None, (0.0, 0))   # the group before the requests (no workers: none is needed)
        c.pool.devices = ["0"]
        write_control(tmp_path, 1, None, 5)   # a newer request is already waiting: the grow is abandoned
        c.resizer.resize(Control(2, None, 4, ("0", "1")))
        assert [e["reason"] for e in _events(tmp_path)] == ["superseded by a newer request (generation 5)"]
        assert c.pool.devices == ["0"], "the abandoned request's devices stayed the job's"
        c.resizer.control.generation = 5
        c.resizer.resize(Control(0, None, 5, ("1",)))   # a request that is done at once: its devices are the job's
        assert c.pool.devices == ["1"]
    finally:
        c.pool.kill(list(c.pool.procs))
        c.progress.close()


def _events(job_dir):
    return [r for r in map(json.loads, (job_dir / "progress.jsonl").read_text().splitlines())
            if r.get("event") == "resize_abandoned"]
