"""The local backend against a real contract-following job process (tests/backends/contract_job.py)."""
import json
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from tests.waiting import process_alive, wait_until
from dlsched.backends.base import Launch, read_progress
from dlsched.backends.local import DEFAULT_RUNTIME, LocalBackend, assign_slots, gpu_devices, gpu_env, resize_slots
from dlsched.spec import NodeSpec, load_job_spec
from dlsched.train.files import read_status

RUNTIME = [sys.executable, str(Path(__file__).with_name("contract_job.py"))]
REPO = Path(__file__).resolve().parents[2]


def spec(samples=320, epochs=1, step_s=0.02, **extra):
    params = {"samples": samples, "epochs": epochs, "step_s": step_s, **extra}
    return load_job_spec(json.dumps({"name": "t", "entry": "x.py:make_job", "gpus": 1, "max_gpus": 4,
                                     "batch_size": 32, "params": params}), fmt="json")




def records(d):
    return [r for r in read_progress(d, 0)[0] if "event" not in r]


def test_start_progress_finish(tmp_path):
    b = LocalBackend(runtime=RUNTIME)
    b.start(Launch(1, spec(), tmp_path, 2, 32))
    assert json.loads((tmp_path / "control.json").read_text()) == {"workers": 2, "batch_size": 32, "generation": 0}
    res = wait_until(lambda: (r := b.poll(1, tmp_path)).state != "running" and r)
    assert res.state == "finished"
    recs = records(tmp_path)
    assert recs[-1]["samples"] == 320 and recs[0]["workers"] == 2
    assert "--workers 2" in (tmp_path / "output.log").read_text()


def test_resize_through_control_file(tmp_path):
    b = LocalBackend(runtime=RUNTIME)
    job = Launch(1, spec(samples=4000, step_s=0.05), tmp_path, 1, 32)
    b.start(job)
    wait_until(lambda: records(tmp_path))
    b.resize(replace(job, num_gpus=3, batch_size=64, generation=1))
    wait_until(lambda: any(r["workers"] == 3 and r["batch_size"] == 64 for r in records(tmp_path)))
    b.stop(1, tmp_path)


def test_stop_kills_the_process_group_and_start_resumes_from_checkpoint(tmp_path):
    b = LocalBackend(runtime=RUNTIME, stop_grace_s=5)
    b.start(Launch(1, spec(samples=4000, step_s=0.05, ckpt_every=2), tmp_path, 1, 32))
    pid = json.loads((tmp_path / "launch.json").read_text())["pid"]
    wait_until(lambda: len(records(tmp_path)) >= 6)
    b.stop(1, tmp_path)
    assert not process_alive(pid)
    done = records(tmp_path)[-1]["samples"]
    b.start(Launch(1, spec(samples=4000, step_s=0.05, ckpt_every=2), tmp_path, 2, 32, generation=1))
    wait_until(lambda: len(records(tmp_path)) > 0 and records(tmp_path)[-1]["workers"] == 2)
    resumed = [r for r in records(tmp_path) if r["workers"] == 2][0]["samples"]
    assert 0 < resumed - 32 <= done      # continued from a checkpoint, not from zero
    b.stop(1, tmp_path)


def test_a_stop_waits_for_a_slow_step_and_its_checkpoint_instead_of_killing_it(tmp_path):
    """Steps slower than the stop's grace (the demo's ResNet-20 on a loaded machine: 25 s) were killed mid-step on a
    preemption: no checkpoint, and the job restarted from step 0. The wait covers the job's own steps now."""
    b = LocalBackend(runtime=RUNTIME, stop_grace_s=0.5)
    b.start(Launch(1, spec(samples=4000, step_s=3.0, ckpt_every=1000), tmp_path, 1, 32))
    wait_until(lambda: len(records(tmp_path)) >= 2, timeout=120)
    b.stop(1, tmp_path)   # just after a step: the next one has 3 s to go, six times the grace
    ckpt = json.loads((tmp_path / "ckpt" / "latest.json").read_text())
    assert ckpt["step"] >= 2 and ckpt["step"] == records(tmp_path)[-1]["step"]


def test_failure_is_reported_with_its_reason(tmp_path):
    b = LocalBackend(runtime=RUNTIME)
    b.start(Launch(1, spec(fail_at=64), tmp_path, 1, 32))
    res = wait_until(lambda: (r := b.poll(1, tmp_path)).state != "running" and r)
    assert res.state == "failed" and "injected failure" in res.error


# a runtime that ends at once as asked: status.json's state (none: no file), then the exit code
ENDING = ("import json, sys; from pathlib import Path; d = Path(sys.argv[sys.argv.index('--job-dir') + 1]); "
          "d.mkdir(parents=True, exist_ok=True); s, rc = {state!r}, {rc}; print('coordinator: {said}'); "
          "s and (d / 'status.json').write_text(json.dumps({{'state': s, 'error': 'boom' if s == 'failed' else None}})); "
          "sys.exit(rc)")


@pytest.mark.parametrize("state, rc, said, want, error", [
    (None, 75, "job folder held by pid 1", "gone", "coordinator fenced: another coordinator still held the job folder: "
                                                   "coordinator: job folder held by pid 1"),
    (None, 73, "no space", "gone", "coordinator stopped: its job folder's disk is full"),
    ("stopped", 143, "stopped", "gone", "coordinator ended (stopped)"),
    ("failed", 73, "failed", "failed", "boom"),
    (None, 2, "bad argument", "failed", "exit code 2: coordinator: bad argument"),
])
def test_how_a_coordinator_ended_is_read_from_its_exit_code_and_status(tmp_path, state, rc, said, want, error):
    """One reading for every backend (``backends/coordinator_exit.py``): a fenced coordinator (exit 75) was "ended
    (no status)" here, without the holder its output names."""
    b = LocalBackend(runtime=[sys.executable, "-c", ENDING.format(state=state, rc=rc, said=said)])
    b.start(Launch(1, spec(), tmp_path, 1, 32))
    res = wait_until(lambda: (r := b.poll(1, tmp_path)).state != "running" and r)
    assert (res.state, res.error, res.fenced) == (want, error, rc == 75)


def test_a_new_backend_reattaches_to_a_live_coordinator(tmp_path):
    first = LocalBackend(runtime=RUNTIME)
    first.start(Launch(1, spec(samples=640, step_s=0.05), tmp_path, 1, 32))
    first.shutdown()                      # the service "dies": the coordinator keeps running
    second = LocalBackend(runtime=RUNTIME)
    assert second.attach(1, tmp_path)
    assert second.poll(1, tmp_path).state == "running"
    res = wait_until(lambda: (r := second.poll(1, tmp_path)).state != "running" and r)
    assert res.state == "finished"
    assert not LocalBackend(runtime=RUNTIME).attach(1, tmp_path)   # it is gone now
    assert LocalBackend(runtime=RUNTIME).poll(1, tmp_path).state == "finished"


def test_partial_and_malformed_progress_lines(tmp_path):
    (tmp_path / "progress.jsonl").write_bytes(b'{"step": 1, "time": 1}\nnot json\n{"step": 2, "time": 2')
    recs, off = read_progress(tmp_path, 0)
    assert recs[0] == {"step": 1, "time": 1} and recs[1]["event"] == "malformed_progress" and len(recs) == 2
    with open(tmp_path / "progress.jsonl", "ab") as f:
        f.write(b"}\n")
    more, off2 = read_progress(tmp_path, off)
    assert more == [{"step": 2, "time": 2}] and off2 > off


def test_gpu_slots_map_to_their_own_cuda_devices():
    nodes = [NodeSpec(name="cpu", gpus=4), NodeSpec(name="a", gpus=2, gpu_type="h100"),
             NodeSpec(name="b", gpus=2, gpu_type="h100")]
    devices = gpu_devices(nodes, cuda_count=4)
    assert devices == {"a": [0, 1], "b": [2, 3]}
    assert gpu_devices(nodes, cuda_count=3) == {"a": [0, 1]}      # b's devices do not exist: plain slots
    assert gpu_devices(nodes, cuda_count=0) == {}
    first = assign_slots({"a": 1, "b": 2}, {})
    assert first == {"a": [0], "b": [0, 1]}
    second = assign_slots({"a": 1, "cpu": 2}, {"a": {0}, "b": {0, 1}})
    assert second == {"a": [1], "cpu": [0, 1]}
    assert gpu_env(first, devices) == {"CUDA_VISIBLE_DEVICES": "0,2,3"}
    assert gpu_env(second, devices) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert gpu_env({"cpu": [0, 1]}, devices) == {"CUDA_VISIBLE_DEVICES": ""}   # slots only: keep off the GPUs
    assert gpu_env({"cpu": [0, 1]}, {}) == {}                                  # no real GPUs declared: untouched


def test_started_jobs_get_disjoint_gpus_and_release_them(tmp_path):
    b = LocalBackend(runtime=RUNTIME, nodes=[NodeSpec(name="g", gpus=4, gpu_type="h100")], cuda_count=lambda: 4)
    visible = {}
    for job in (1, 2):
        b.start(Launch(job, spec(samples=4000, step_s=0.05), tmp_path / str(job), 2, 32, placement={"g": 2}))
        pid = json.loads((tmp_path / str(job) / "launch.json").read_text())["pid"]
        visible[job] = psutil.Process(pid).environ()["CUDA_VISIBLE_DEVICES"]
    assert visible == {1: "0,1", 2: "2,3"}
    b.stop(1, tmp_path / "1")
    b.start(Launch(3, spec(samples=4000, step_s=0.05), tmp_path / "3", 1, 32, placement={"g": 1}))
    pid = json.loads((tmp_path / "3" / "launch.json").read_text())["pid"]
    assert psutil.Process(pid).environ()["CUDA_VISIBLE_DEVICES"] == "0"
    b.stop_all()


def test_slots_a_resize_holds_back_go_to_no_job_until_released_and_are_held_after_a_restart(tmp_path):
    """A grow given up unconfirmed gives its slot back with ``hold_given_back``: the grown group may still train there.
    The books went back to the old slot only, and the next job started was given that GPU beside a free one."""
    gpus = dict(nodes=[NodeSpec(name="g", gpus=4, gpu_type="h100")], cuda_count=lambda: 4)
    backends = [LocalBackend(runtime=RUNTIME, **gpus)]

    def visible(job: int) -> str:
        pid = json.loads((tmp_path / str(job) / "launch.json").read_text())["pid"]
        return psutil.Process(pid).environ()["CUDA_VISIBLE_DEVICES"]

    def launch(job: int, n: int) -> Launch:
        return Launch(job, spec(samples=10**6, step_s=0.05), tmp_path / str(job), n, 32, placement={"g": n})

    try:
        b = backends[0]
        b.start(launch(1, 1))
        b.resize(replace(launch(1, 2), generation=1))                           # grows onto GPU 1
        b.resize(replace(launch(1, 1), generation=2, hold_given_back=True))     # given up: GPU 1 held back
        info = json.loads((tmp_path / "1" / "launch.json").read_text())
        assert (info["slots"], info["releasing"]) == ({"g": [0]}, {"g": [1]})
        assert json.loads((tmp_path / "1" / "control.json").read_text())["devices"] == ["0"]
        b.shutdown()                                                            # a service restart
        b = LocalBackend(runtime=RUNTIME, **gpus)
        backends.append(b)
        assert b.attach(1, tmp_path / "1")
        b.start(launch(2, 2))
        assert visible(2) == "2,3", "job 2 was given the GPU job 1's grown group may still train on"
        b.release(1, tmp_path / "1")                                            # job 1 confirmed it trains on 1
        assert "releasing" not in json.loads((tmp_path / "1" / "launch.json").read_text())
        b.start(launch(3, 1))
        assert visible(3) == "1"
    finally:
        for b in backends:
            b.stop_all()

def test_resize_rebooks_slots_keeping_the_held_ones():
    assert resize_slots({"a": [0, 1]}, {"a": 3}, {"a": {2}}) == {"a": [0, 1, 3]}   # grow around another job
    assert resize_slots({"a": [0, 1, 3]}, {"a": 1}, {}) == {"a": [0]}               # shrink gives back 1 and 3
    assert resize_slots({"a": [2]}, {"b": 2}, {"a": {0}}) == {"b": [0, 1]}          # moved: a's slot is free
    assert resize_slots({"a": [0, 1]}, {"a": 1, "b": 1}, {"b": {0}}) == {"a": [0], "b": [1]}
    assert resize_slots({"a": [0]}, {"a": 0}, {}) == {}


def real_spec(samples=20_000):
    return load_job_spec(json.dumps({"name": "g", "entry": "examples/mlp.py:make_job", "gpus": 1, "max_gpus": 4,
                                     "batch_size": 12, "params": {"num_samples": samples, "throttle_s": 0.1}}),
                         fmt="json")


def seen_devices(job_dir, generation):
    """The GPU each worker of ``generation`` trains on: the first of the CUDA_VISIBLE_DEVICES it reported
    (its cuda:0; the others are its job's peers for P2P). None until all are ready."""
    st = read_status(job_dir) or {}
    devs = st.get("worker_devices")
    if st.get("generation") != generation or not devs or None in devs:
        return None
    return [d.split(",")[0] for d in devs]


@pytest.mark.slow
def test_resized_jobs_give_every_worker_its_own_gpu_and_never_share_one(tmp_path):
    """Real runtime, GPUs declared (4 on node a, 2 on b) but faked: each worker process records the
    CUDA_VISIBLE_DEVICES it got, which must be exactly one device, its own, after every resize."""
    nodes = [NodeSpec(name="a", gpus=4, gpu_type="h100"), NodeSpec(name="b", gpus=2, gpu_type="h100")]
    b = LocalBackend(runtime=[*DEFAULT_RUNTIME, "--threads", "1", "--ckpt-every", "5"], cwd=REPO, nodes=nodes,
                     cuda_count=lambda: 6)
    one, two = tmp_path / "1", tmp_path / "2"
    try:
        job1, job2 = Launch(1, real_spec(), one, 2, 12, placement={"a": 2}), Launch(2, real_spec(), two, 1, 12, placement={"a": 1})
        b.start(job1)
        b.start(job2)
        assert wait_until(lambda: seen_devices(one, 0), 60) == ["0", "1"]
        assert wait_until(lambda: seen_devices(two, 0), 60) == ["2"]

        b.resize(replace(job1, num_gpus=3, generation=1, placement={"a": 3}))      # grows around job 2's slot
        assert json.loads((one / "control.json").read_text())["devices"] == ["0", "1", "3"]
        assert wait_until(lambda: seen_devices(one, 1), 60) == ["0", "1", "3"]
        assert json.loads((one / "launch.json").read_text())["slots"] == {"a": [0, 1, 3]}

        b.resize(replace(job1, num_gpus=1, generation=2, placement={"a": 1}))      # gives back 1 and 3
        assert wait_until(lambda: seen_devices(one, 2), 60) == ["0"]
        assert assign_slots({"a": 2}, b._held()) == {"a": [1, 3]}      # what the next job to start gets

        b.resize(replace(job2, num_gpus=2, generation=1, placement={"b": 2}))      # moved: its GPU goes, so does its worker
        assert wait_until(lambda: seen_devices(two, 1), 60) == ["4", "5"]
        moved = wait_until(lambda: [r for r in read_progress(two, 0)[0] if r.get("event") == "resized"], 60)[0]
        wait_until(lambda: records(two) and records(two)[-1]["generation"] == 1, 60)  # trains on, from the checkpoint
        assert moved["from_workers"] == 1 and moved["workers"] == 2
        books = [(n, i) for slots in b._slots.values() for n, idx in slots.items() for i in idx]
        assert sorted(books) == [("a", 0), ("b", 0), ("b", 1)]                    # nothing held twice
    finally:
        b.stop_all()


def test_a_progress_line_longer_than_a_read_is_skipped_not_waited_for(tmp_path):
    """Job code writes progress.jsonl: a line over the read's size with no end in it was left "for the next read",
    which read the same bytes again, so the job's progress stalled for good. It is skipped and reported."""
    from dlsched.backends.base import read_progress

    (tmp_path / "progress.jsonl").write_bytes(b'{"step": 1, "time": 1}\n' + b"x" * 5000 + b'\n{"step": 2, "time": 2}\n')
    records, offset = [], 0
    for _ in range(10):   # before: every read from offset 12 on gave nothing and the same offset
        got, offset = read_progress(tmp_path, offset, max_bytes=1000)
        records += got
    seen = [r.get("step") for r in records if "event" not in r]
    assert seen == [1, 2] and offset == (tmp_path / "progress.jsonl").stat().st_size, records
    assert any(r.get("event") == "malformed_progress" for r in records)
