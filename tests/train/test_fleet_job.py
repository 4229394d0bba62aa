"""FLEET's loop and its job-folder contract: real profiling (cached), re-formation, pinned pipelines, a share that
changes through control.json, SIGTERM and resume -- all with real processes and tiny CNNs."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dlsched.paths import REPO_ROOT
from dlsched.policy.fleet import FleetPlan, Flotilla
from dlsched.train.files import read_status, write_control
from dlsched.train.progress_log import read_progress
from dlsched.train.fleet_job import Share, _Contract, assign_cores, assign_devices, stream_places, train_ensemble
from dlsched.train import fleet_profile
from dlsched.train.fleet_profile import CACHE_FILE, profile_member
from dlsched.train.flotilla import Convergence, MemberSpec, synthetic_images
from dlsched.train.member_cancel import request_member_cancel
from dlsched.train.protocol import EventRecord, Status, StepRecord, is_step
from tests.waiting import wait_until

MODELS = REPO_ROOT / "examples" / "ensemble" / "models.py"


@pytest.fixture(autouse=True)
def profile_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLSCHED_PROFILE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_profiles_are_measured_on_each_slot_count_then_cached_and_say_what_was_modelled(tmp_path, profile_cache):
    spec = MemberSpec("tiny", f"{MODELS}:TinyCNN", {"width": 4})
    cores = len(os.sched_getaffinity(0))
    p = profile_member(spec, 16, (3, 32, 32), max_gpus=cores + 1, steps=2, scratch=tmp_path)
    assert p.measured == (True,) * cores + (False,) and str(cores) in p.note and "modelled" in p.note
    assert all(r > 0 for r in p.profile.rates)
    cached = json.loads((profile_cache / CACHE_FILE).read_text())
    assert len(cached) == cores
    again = profile_member(spec, 16, (3, 32, 32), max_gpus=cores, steps=2, scratch=tmp_path)
    assert again.profile.rates == p.profile.rates[:cores]          # from the cache: no new run, same numbers
    # a week later (or a bare rate, the cache's earlier format) g = 1 is measured again, g = 2 still read
    first, *rest = cached
    cached[first] = {"rate": 1e-3, "measured_at": time.time() - fleet_profile.PROFILE_MAX_AGE_S - 60}
    (profile_cache / CACHE_FILE).write_text(json.dumps(cached))
    later = profile_member(spec, 16, (3, 32, 32), max_gpus=cores, steps=2, scratch=tmp_path)
    assert later.profile.rates[0] > 1e-3 and later.profile.rates[1:] == p.profile.rates[1:cores]
    assert json.loads((profile_cache / CACHE_FILE).read_text())[first]["measured_at"] > time.time() - 600


def test_a_model_of_fewer_than_ten_classes_is_profiled(tmp_path):
    """Profiling trained on random targets 0..9: a 2-class member failed ("Target 3 is out of bounds") and with it
    the whole ensemble, before training started."""
    spec = MemberSpec("binary", f"{MODELS}:TinyCNN", {"width": 4, "classes": 2})
    p = profile_member(spec, 16, (3, 32, 32), max_gpus=1, steps=2, scratch=tmp_path)
    assert p.measured == (True,) and p.profile.rates[0] > 0


SLOW = REPO_ROOT / "tests" / "train" / "slow_models.py"


def test_a_profiling_rank_that_stalls_is_measured_again_and_the_last_stall_fails_in_one_line(tmp_path, monkeypatch,
                                                                                                capfd):
    """A rank hung with ~1 s of CPU in a full test run, and its ensemble waited on it (600 s then) past its test's
    timeout."""
    monkeypatch.setattr(fleet_profile, "RANK_STALL_S", 12.0)   # the attempt that goes through has 13 s
    once = MemberSpec("once", f"{SLOW}:StallingCNN", {"marker": str(tmp_path / "stalled"), "width": 4})
    assert fleet_profile.measure_rate(once, 16, (3, 32, 32), 1, (), 2, tmp_path) > 0
    assert (tmp_path / "stalled").exists()
    err = capfd.readouterr().err
    assert "profiling once on 1 rank(s) gave no rate in 13 s: measuring again" in err
    monkeypatch.setattr(fleet_profile, "ATTEMPTS", 1)
    always = MemberSpec("always", f"{SLOW}:StallingCNN", {"width": 4})
    with pytest.raises(RuntimeError, match=r"^profiling always on 1 rank\(s\) gave no rate in 13 s; gave up after 1 "
                                           r"attempt\(s\)$"):
        fleet_profile.measure_rate(always, 16, (3, 32, 32), 1, (), 2, tmp_path)


def test_a_rank_stuck_in_its_teardown_still_gives_its_rate_and_is_killed(tmp_path, monkeypatch):
    """Rank 0 sends the rate before the process group's teardown, which can hang; the parent then waits TEARDOWN_S
    for the ranks, not the stall limit (the rate came after the teardown: every attempt timed out)."""
    monkeypatch.setattr(fleet_profile, "RANK_STALL_S", 40.0)
    monkeypatch.setattr(fleet_profile, "TEARDOWN_S", 2.0)
    spec = MemberSpec("stuck", f"{SLOW}:TeardownHangingCNN", {"width": 4})
    started = time.monotonic()
    assert fleet_profile.measure_rate(spec, 16, (3, 32, 32), 2, (), 2, tmp_path) > 0
    assert time.monotonic() - started < 40.0


def test_planned_cores_and_devices_become_concrete_assignments():
    plan = FleetPlan((Flotilla({"a": 1, "b": 2}, {"a": {"s": 1}, "b": {"s": 2}}, 3, 1.0),
                      Flotilla({"c": 1}, {"c": {"s": 1}}, 2, 1.0)), ())
    assert assign_cores(plan, [0, 1, 2, 3]) == [[0, 1, 2], [3, 0]]
    assert assign_devices(plan, Share(4, ("cuda:5", "cuda:6", "cuda:7"))) == {
        "a": ["cuda:5"], "b": ["cuda:6", "cuda:7"], "c": ["cpu"]}


@pytest.mark.slow
def test_members_converge_leave_with_checkpoints_and_the_rest_are_re_formed(tmp_path):
    data, val = synthetic_images(256, seed=0), synthetic_images(128, seed=1)
    members = [
        MemberSpec("tiny", f"{MODELS}:TinyCNN", {"width": 4}, lr=0.05, max_epochs=2),
        MemberSpec("mlp", f"{MODELS}:MLPHead", {"hidden": 16}, lr=0.05),
    ]
    # tiny stops after 2 epochs at the latest, mlp after 4: tiny leaves first, mlp is re-formed alone and resumed.
    conv = Convergence(patience=5, min_delta=0.0, max_epochs=4)
    plans, events = [], []
    report, done = train_ensemble(members, data, val, 64, conv, tmp_path, share=lambda: Share(4), eps=0.99,
                                  on_plan=plans.append, on_event=events.append)
    assert done and set(report.finish_s) == {"tiny", "mlp"}
    assert [sorted(f["members"]) for f in plans[0]["flotillas"]] == [["mlp", "tiny"]]   # one shared flotilla first
    assert plans[0]["flotillas"][0]["cores"]                                             # its pipeline's cores
    assert len(report.flotillas) == 2 and report.flotillas[1].members == ("mlp",)        # re-formed for the survivor
    assert report.epochs == {"tiny": 2, "mlp": 4}
    assert report.finish_s["mlp"] > report.flotillas[0].end > report.finish_s["tiny"]
    assert all((tmp_path / f"{m}.pt").exists() and (tmp_path / f"{m}.best.pt").exists() for m in ("tiny", "mlp"))
    assert max(report.best_acc.values()) > 0.3      # 10 classes: learned something from the shared batches
    assert all(f.producer_cpu_s > 0 for f in report.flotillas)
    assert [e["member"] for e in events if e["event"] == "member_converged"] == ["tiny", "mlp"]
    # each departure names the file of its best weights (the user had to know the runtime's folder layout)
    assert [e["best_checkpoint"] for e in events if e["event"] == "member_converged"] == \
        [str((tmp_path / f"{m}.best.pt").resolve()) for m in ("tiny", "mlp")]


def test_the_job_folder_echoes_an_ensembles_records_as_the_lines_dlsched_logs_shows(tmp_path, capsys, monkeypatch):
    """An ensemble job's output.log held only the service's start line: `dlsched logs -f` showed no step, no plan
    and no result (the coordinator of every other job echoes its records there)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    io = _Contract(tmp_path, 2, 8, ["m"])
    io.event({"event": "flotillas", "share": 2, "waiting": [], "flotillas": [{"members": {"m": 2}}]})
    io.report(("m", "training", 0, 1, 0.5, None, 10.0))
    io.event({"event": "member_converged", "member": "m", "epoch": 3, "best_acc": 0.75, "reason": "converged",
              "best_checkpoint": "/j/ckpt/m.best.pt"})
    out = capsys.readouterr().out
    assert "planned on 2 slot(s): flotillas m:2" in out and "member m step 1 epoch 0 loss 0.5 | ensemble: step 1" in out
    assert "member m converged at epoch 3: best val acc 0.75, weights /j/ckpt/m.best.pt" in out


@pytest.mark.slow
def test_a_new_share_that_leaves_the_plan_as_it_is_re_forms_nothing(tmp_path):
    """A shrink that takes only slots no member uses (the service's, once a member left) stopped every member,
    checkpointed and restarted them; with a DDP member that cost 30 s of teardown. It is now answered by recording
    the same plan on the new share."""
    data, val = synthetic_images(256, seed=0), synthetic_images(32, seed=1)
    # 32 steps of >= 0.05 s: the share changes after its 10th (its first report), well before its end
    members = [MemberSpec("solo", f"{SLOW}:SlowWideCNN", {"width": 4, "step_s": 0.05}, max_epochs=4)]
    seen, events = [], []
    report, done = train_ensemble(members, data, val, 32, Convergence(patience=100, min_delta=0.0, max_epochs=4),
                                  tmp_path, share=lambda: Share(3 if seen else 4), eps=0.99,
                                  on_report=seen.append, on_event=events.append)
    assert done and report.epochs == {"solo": 4}
    assert len(report.flotillas) == 1                                           # one run: never re-formed
    plans = [e for e in events if e["event"] == "flotillas"]
    assert [p["share"] for p in plans] == [4, 3] and plans[0]["flotillas"] == plans[1]["flotillas"]


def _fast_and_slow(tmp_path, fast_epochs: int, slow_epochs: int):
    """Two members whose rates differ (eps 1e-9 then plans two flotillas of one slot each), each writing the id of
    every process that builds it; ``seen``: lines in a member's pid file at its first report (its training process
    built), filled by ``on_report``."""
    data, val = synthetic_images(512, seed=0), synthetic_images(32, seed=1)
    pids = {n: tmp_path / f"{n}.pids" for n in ("fast", "slow")}
    members = [MemberSpec(n, f"{SLOW}:PidRecordingCNN", {"width": 4, "step_s": step_s, "pid_file": str(pids[n])},
                          max_epochs=epochs) for n, step_s, epochs in (("fast", 0.05, fast_epochs),
                                                                        ("slow", 0.1, slow_epochs))]
    seen: dict[str, int] = {}

    def on_report(msg):
        seen.setdefault(msg[0], len(pids[msg[0]].read_text().splitlines()))
    return data, val, members, pids, seen, on_report


@pytest.mark.slow
def test_a_grow_starts_a_flotilla_for_a_waiting_member_beside_the_running_one_without_restarting_it(tmp_path):
    """A grow that gives a waiting member a slot of its own re-formed the member already training too; and a
    re-formation that stops nothing (it only starts a flotilla) must still start it."""
    data, val, members, pids, seen, on_report = _fast_and_slow(tmp_path, 3, 4)
    built = {}   # fast's builds when slow first reported: its training process had started by then

    def report(msg):
        on_report(msg)
        if msg[0] == "slow":
            built.setdefault("fast", len(pids["fast"].read_text().splitlines()))

    events = []
    report_, done = train_ensemble(members, data, val, 32, Convergence(patience=100, min_delta=0.0, max_epochs=12),
                                   tmp_path / "ckpt", share=lambda: Share(2 if "fast" in seen else 1), eps=1e-9,
                                   on_report=report, on_event=events.append)
    assert done and report_.epochs == {"fast": 3, "slow": 4}
    plans = [e for e in events if e["event"] == "flotillas"]
    assert [sorted(f["members"]) for f in plans[0]["flotillas"]] == [["fast"]] and plans[0]["waiting"] == ["slow"]
    assert plans[1]["share"] == 2 and plans[1]["flotillas"][0] == plans[0]["flotillas"][0]
    assert [sorted(f["members"]) for f in plans[1]["flotillas"]] == [["fast"], ["slow"]]
    assert built["fast"] == seen["fast"]   # fast trained on through the grow: not built again


@pytest.mark.slow
def test_a_shrink_that_drops_one_flotillas_slot_leaves_the_other_training_in_the_same_processes(tmp_path):
    """The runtime re-formed every member on any new plan (checkpoint, new processes): a shrink that took one
    flotilla's slot restarted the other too, where the simulator charged a restart only to the members that move.
    Now the flotilla the share still holds trains on: same process, one run, no rebuild of its model."""
    # 16 steps an epoch; fast (>= 0.05 s a step, 12 epochs: >= 9 s) is still training long after the shrink that
    # follows both members' first reports (their 10th step)
    data, val, members, pids, seen, on_report = _fast_and_slow(tmp_path, 12, 2)
    events = []
    report, done = train_ensemble(members, data, val, 32, Convergence(patience=100, min_delta=0.0, max_epochs=12),
                                  tmp_path / "ckpt", share=lambda: Share(1 if len(seen) == 2 else 2), eps=1e-9,
                                  on_report=on_report, on_event=events.append)
    assert done and report.epochs == {"fast": 12, "slow": 2}
    plans = [e for e in events if e["event"] == "flotillas"]
    assert [sorted(f["members"]) for f in plans[0]["flotillas"]] == [["fast"], ["slow"]]
    assert plans[1]["share"] == 1 and plans[1]["flotillas"] == plans[0]["flotillas"][:1] and plans[1]["waiting"] == ["slow"]
    # fast: built once for training, in the process it trained in to the end; one run, never re-formed
    assert len(pids["fast"].read_text().splitlines()) == seen["fast"]
    assert [r.members for r in report.flotillas].count(("fast",)) == 1
    # slow: stopped at the shrink, resumed from its checkpoint in a new process once fast left the slot
    assert [r.members for r in report.flotillas] == [("slow",), ("fast",), ("slow",)]
    assert len(pids["slow"].read_text().splitlines()) == seen["slow"] + 1


ENSEMBLE_YAML = """name: contract
dataset: {kind: synthetic, train: 512, val: 64}
batch_size: 32
convergence: {patience: 100, min_delta: 0.0, max_epochs: 40}
rate_tolerance: 0.99
models:
  - {name: a, model: "%s:SlowWideCNN", kwargs: {width: 4, step_s: 0.05}, max_workers: 2, max_epochs: 20}
  - {name: b, model: "%s:MLPHead", kwargs: {hidden: 8}, max_epochs: 2}
"""


@pytest.mark.slow
def test_ensemble_job_follows_the_runtime_contract_resize_stop_and_resume(tmp_path):
    spec = tmp_path / "ens.yaml"
    # a takes >= 20 epochs x 16 steps x 0.05 s: still training when b converges and the stop comes
    spec.write_text(ENSEMBLE_YAML % (Path(__file__).parent / "slow_models.py", MODELS))
    job = tmp_path / "job"
    job.mkdir()
    def cmd(workers):
        return [sys.executable, "-m", "dlsched.train.run", "--strategy", "fleet", "--job-dir", str(job), "--entry",
                "dlsched.train.fleet_spec:from_yaml", "--workers", str(workers), "--param", f"path={spec}"]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"))
    write_control(job, 1, None, 0)
    proc = subprocess.Popen(cmd(1), env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def plans():
            return [r for r in read_progress(job) if r.get("event") == "flotillas"]
        wait_until(lambda: plans() and any("step" in r and "event" not in r for r in read_progress(job)), 120)
        assert plans()[-1]["share"] == 1
        write_control(job, 3, None, 1)                         # the scheduler grows the share: FLEET re-plans
        wait_until(lambda: plans()[-1]["share"] == 3, 120)
        assert sum(sum(f["members"].values()) for f in plans()[-1]["flotillas"]) <= 3
        # and a has taken a step: on a loaded host its flotilla may start only as b's ends (a stopped at 0 samples)
        wait_until(lambda: (read_status(job) or {}).get("members", {}).get("b") == "stopped at max_epochs"
                   and any(r.get("member") == "a" and "event" not in r for r in read_progress(job)), 180)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 143, proc.stdout.read().decode()[-2000:]
        assert read_status(job)["state"] == "stopped"
        stops = [r for r in read_progress(job) if r.get("event") == "stopped"]
        # where the stop left each member still training (b had left): the service's DONE of a stopped ensemble
        assert len(stops) == 1 and list(stops[0]["samples_done"]) == ["a"] and stops[0]["samples_done"]["a"] > 0
        # resumed with a new share: b stays converged, a continues from its checkpoint; cancelled alone (`dlsched
        # cancel JOB --member a`: there was no way but to cancel the whole ensemble) it leaves, and the job finishes
        before = len(read_progress(job))
        write_control(job, 2, None, 2)
        proc = subprocess.Popen(cmd(2), env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        first = wait_until(lambda: [r for r in read_progress(job)[before:] if is_step(r)], 120, "a step of the rerun")[0]
        assert first["member"] == "a" and first["member_step"] > 1          # from its checkpoint
        # the job's step counts b's steps too: it counted only the members training in this run, and went backwards
        assert first["step"] > first["member_step"], first
        request_member_cancel(job, "a")
        assert proc.wait(timeout=120) == 0, proc.stdout.read().decode()[-2000:]
        assert read_status(job)["state"] == "finished" and read_status(job)["members"] == {"a": "cancelled", "b": "stopped at max_epochs"}
        resumed = read_progress(job)[before:]
        assert [(r["member"], r["reason"]) for r in resumed if r.get("event") == "member_converged"] == [("a", "cancelled")]
        finished = [r for r in resumed if r.get("event") == "finished"]
        b_steps = max(r["member_step"] for r in read_progress(job)[:before] if is_step(r) and r["member"] == "b")
        assert len(finished) == 1 and finished[0]["step"] >= b_steps + first["member_step"], (stops, finished)
        assert {r.get("member") for r in resumed if "event" not in r} == {"a"}
        for r in read_progress(job):                            # the same typed contract as every other job
            (StepRecord if is_step(r) else EventRecord).model_validate(r)
        Status.model_validate(read_status(job))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_step_names_the_request_and_share_its_flotillas_were_planned_on(tmp_path, monkeypatch):
    """Steps reported while the flotillas stop for a new share were written with the new share's slots (the
    service read them as the new size's); they carry the request the running flotillas answer."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    io = _Contract(tmp_path, 2, 8, ["m"])

    def step() -> dict:
        io.report(("m", "training", 0, 1, 0.5, None, 1.0))
        return [r for r in read_progress(tmp_path) if is_step(r)][-1]

    write_control(tmp_path, 2, None, 1)
    io.share()                                            # the start's request: the share as it stands
    io.event({"event": "flotillas", "flotillas": [], "share": 2})
    assert (step()["control_generation"], step()["workers"]) == (1, 2)
    write_control(tmp_path, 2, None, 2)                   # the same share again (a move on slots): nothing to change
    io.share()
    assert step()["control_generation"] == 2
    write_control(tmp_path, 1, None, 3)                   # a smaller share: the flotillas stop at their next step
    io.share()
    assert (step()["control_generation"], step()["workers"]) == (2, 2), "a step of the flotillas planned on 2"
    io.event({"event": "flotillas", "flotillas": [], "share": 1})   # re-planned on it
    assert (step()["control_generation"], step()["workers"]) == (3, 1)


RECORDING = REPO_ROOT / "tests" / "train" / "recording_models.py"


def test_a_member_at_an_epochs_start_joins_the_stream_in_the_furthest_members_epoch():
    # lin mid-epoch 15 (280 batches an epoch), deep and mlp never trained: they take epoch 15 of the stream as
    # their first, so lin waits 112 batches for them, not 4312
    assert stream_places({"lin": 4312, "deep": 0, "mlp": 0}, {}, 280) == (4200, {"lin": 0, "deep": 4200, "mlp": 4200})
    # mid-epoch members keep their shifts whatever the gap: each is inside one shuffle
    assert stream_places({"a": 3, "b": 21}, {"a": 8}, 8) == (11, {"a": 8, "b": 0})
    # one at an epoch's start never goes back to a stream epoch it trained
    assert stream_places({"a": 16, "b": 0}, {"b": 40}, 8) == (40, {"a": 24, "b": 40})


@pytest.mark.slow
def test_members_regrouped_at_different_steps_each_see_every_sample_once_per_epoch(tmp_path):
    """Members stop at different steps (a flotilla's members are up to a ring's length apart; members of different
    flotillas, or one that waited, anywhere). Re-formed into one flotilla, the one behind used to start at the
    leader's batch: it skipped batches and its epochs mixed two shuffles, some samples twice and some never; and a
    member re-formed mid-epoch into another flotilla went on in that flotilla's shuffle of the epoch."""
    from dlsched.train.flotilla import CTX, run_flotillas
    from tests.train.recording_models import id_images

    data, val = id_images(64), id_images(16)
    batch, steps_per_epoch = 8, 8
    logs = {n: tmp_path / f"{n}.log" for n in ("a", "b", "c")}
    members = [MemberSpec(n, f"{RECORDING}:RecordingMLP", {"log": str(logs[n])}) for n in ("a", "b", "c")]
    for m in members:   # profiled (and cached) first: the profile's random batches are not training
        profile_member(m, batch, (3, 8, 8), max_gpus=1, scratch=tmp_path)
        logs[m.name].unlink(missing_ok=True)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    conv = Convergence(patience=100, min_delta=0.0, max_epochs=4)
    # a stopped 3 steps into its first epoch in the second of two flotillas, b 5 steps into its third epoch
    run_flotillas([[members[1]], [members[0]]], data, val, batch, conv, ckpt, CTX.Queue(), max_batches=3)
    run_flotillas([[members[1]]], data, val, batch, conv, ckpt, CTX.Queue(), start_batch=3, max_batches=18)
    # c never trained (it waited): it joins at an epoch's start
    (ckpt / "fleet_state.json").write_text(json.dumps({"converged": {}, "progress": {"a": 3, "b": 21, "c": 0}}))
    plans = []
    report, done = train_ensemble(members, data, val, batch, conv, ckpt, share=lambda: Share(3), eps=0.99,
                                  on_plan=plans.append)
    assert done and report.epochs == {"a": 4, "b": 4, "c": 4}
    assert sorted(plans[0]["flotillas"][0]["members"]) == ["a", "b", "c"]   # one shared stream for all
    for name, log in logs.items():
        steps = [list(map(int, line.split())) for line in log.read_text().splitlines()]
        assert len(steps) == 4 * steps_per_epoch, name                       # no batch trained twice or skipped
        for e in range(4):
            seen = sorted(i for s in steps[e * steps_per_epoch: (e + 1) * steps_per_epoch] for i in s)
            assert seen == list(range(64)), (name, e)                          # every sample once per epoch


ONE_SLOW_MEMBER = """name: crash
dataset: {kind: synthetic, train: 256, val: 32}
batch_size: 32
convergence: {patience: 1000, min_delta: 0.0, max_epochs: 1000}
models:
  - {name: a, model: "%s:SlowWideCNN", kwargs: {width: 4, step_s: 0.05}}
"""


def test_a_sigkilled_runtime_or_member_resumes_each_member_from_its_last_epochs_end(tmp_path):
    """A member checkpointed only when it paused or left: a runtime SIGKILLed (OOM, a lost node) retrained everything
    since the last re-formation (a whole run, for a member never re-formed). A member's process SIGKILLed alone (the
    OOM killer's pick) failed the whole ensemble (exit 1, 'a member process failed'): it now resumes from the
    member's checkpoint in the same runtime, as a data-parallel job's lost worker does."""
    spec = tmp_path / "ens.yaml"
    spec.write_text(ONE_SLOW_MEMBER % (Path(__file__).parent / "slow_models.py"))
    job = tmp_path / "job"
    cmd = [sys.executable, "-m", "dlsched.train.run", "--strategy", "fleet", "--job-dir", str(job), "--entry",
           "dlsched.train.fleet_spec:from_yaml", "--workers", "1", "--param", f"path={spec}"]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"))
    state = job / "ckpt" / "fleet_state.json"

    def saved_step() -> int:
        try:
            return json.loads(state.read_text())["progress"]["a"]
        except (OSError, ValueError, KeyError):
            return 0

    procs = []
    try:
        procs.append(subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        wait_until(lambda: saved_step() >= 16, 120, "two epochs checkpointed")   # 8 steps an epoch
        procs[0].kill()                                        # the runtime alone: its member dies with it
        procs[0].wait()
        done_before = saved_step()
        before = len(read_progress(job))
        procs.append(subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        first = wait_until(lambda: [r for r in read_progress(job)[before:] if is_step(r)], 120, "a step of the rerun")[0]
        assert first["member_step"] > done_before >= 16, (first, done_before)   # went on from its checkpoint
        wait_until(lambda: saved_step() >= first["member_step"] + 8, 120, "an epoch of the rerun checkpointed")
        member = max(psutil.Process(procs[1].pid).children(), key=lambda c: c.create_time())  # after its producer
        member.kill()
        wait_until(lambda: procs[1].poll() is not None or [r for r in read_progress(job) if r.get("event") == "worker_lost"],
                   120, "worker_lost or the runtime's exit")
        assert procs[1].poll() is None, f"the runtime exited {procs[1].returncode}: {read_status(job)}"
        lost = [r for r in read_progress(job) if r.get("event") == "worker_lost"]
        assert lost[0]["workers_lost"] == ["a"] and lost[0]["exit_codes"] == [-signal.SIGKILL], lost
        after = len(read_progress(job))
        step = wait_until(lambda: [r for r in read_progress(job)[after:] if is_step(r)], 120, "a step after it")[0]
        assert procs[1].poll() is None and lost[0]["restored"]["a"] < step["member_step"], (lost, step)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_a_member_that_finds_the_disk_full_stops_the_ensemble_as_out_of_disk(tmp_path):
    """A member's write to a full disk (its checkpoint) failed the ensemble (exit 1, 'member a failed: OSError'),
    for good; now the runtime exits EXIT_NO_SPACE as the data-parallel one does: re-queued, it resumes from its
    checkpoint once there is room."""
    from dlsched.train.no_space import EXIT_NO_SPACE

    spec, full = tmp_path / "ens.yaml", tmp_path / "full"
    spec.write_text(ONE_SLOW_MEMBER.replace("SlowWideCNN", "DiskFillingCNN").replace(
        "step_s: 0.05", f"step_s: 0.05, marker: '{full}'") % (Path(__file__).parent / "slow_models.py"))
    job = tmp_path / "job"
    cmd = [sys.executable, "-m", "dlsched.train.run", "--strategy", "fleet", "--job-dir", str(job), "--entry",
           "dlsched.train.fleet_spec:from_yaml", "--workers", "1", "--param", f"path={spec}"]
    proc = subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src")), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: [r for r in read_progress(job) if is_step(r)], 120, "a step")
        full.touch()
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == EXIT_NO_SPACE, out[-2000:]
        assert "the job folder's disk is full ([Errno 28] member a: OSError: [Errno 28] No space left on device" in out, \
            out[-2000:]
        assert read_status(job)["state"] != "failed"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


NARROW = """from torch import nn

class Fixed(nn.Module):   # a 10-wide head no constructor parameter declares: the submit check cannot read it
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 10))

    def forward(self, x):
        return self.net(x)
"""


def test_a_members_head_narrower_than_the_labels_fails_in_one_line_before_anything_is_profiled(tmp_path):
    """It failed when the member first trained, after every member's profiling and the other members' training:
    "RuntimeError: member tiny failed: IndexError: Target 15 is out of bounds"."""
    (tmp_path / "models.py").write_text(NARROW)
    spec = tmp_path / "ens.yaml"
    spec.write_text("dataset: {kind: synthetic, train: 64, val: 16, classes: 20}\nbatch_size: 16\nmodels:\n"
                    f"  - {{name: tiny, model: \"{MODELS}:TinyCNN\", kwargs: {{width: 4, classes: 20}}}}\n"
                    "  - {name: fixed, model: \"models.py:Fixed\"}\n")
    job = tmp_path / "job"
    done = subprocess.run([sys.executable, "-m", "dlsched.train.run", "--strategy", "fleet", "--job-dir", str(job),
                           "--entry", "dlsched.train.fleet_spec:from_yaml", "--workers", "1", "--param",
                           f"path={spec}"], env=dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src")),
                          capture_output=True, text=True, timeout=120)
    line = ("field models[1] (fixed, models.py:Fixed): its output has 10 classes, but the data's labels go to 19 "
            "(20 classes)")
    assert done.returncode == 2 and line in done.stderr, done.stderr[-2000:]
    assert line in read_status(job)["error"] and read_status(job)["state"] == "failed"
    assert not (job / "progress.jsonl").exists() or not [r for r in read_progress(job) if r.get("event") == "profiled"]


def test_an_ensembles_samples_per_s_counts_only_the_members_training_now(tmp_path, monkeypatch):
    """A member re-planned to wait kept its last rate in the step records' samples_per_s (status's SAMPLES/S)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    io = _Contract(tmp_path, 2, 8, ["a", "b"])
    io.event({"event": "flotillas", "share": 2, "waiting": [], "flotillas": [{"members": {"a": 1}}, {"members": {"b": 1}}]})
    io.report(("a", "training", 0, 10, 0.5, None, 100.0))
    io.report(("b", "training", 0, 10, 0.5, None, 50.0))
    io.event({"event": "flotillas", "share": 1, "waiting": ["b"], "flotillas": [{"members": {"a": 1}}]})
    io.report(("a", "training", 0, 20, 0.4, None, 90.0))
    steps = [r for r in read_progress(tmp_path) if is_step(r)]
    assert [r["samples_per_s"] for r in steps] == [100.0, 150.0, 90.0]


def test_a_share_on_several_nodes_gets_node_local_flotillas_on_every_node():
    """Ray: 2 + 2 slots on two nodes: every flotilla inside one node (its pipeline is shared memory), members over
    both nodes, none waiting; a member profiled for 3 GPUs gets at most one node's 2."""
    from dlsched.policy.fleet import ModelProfile, Preprocessing
    from dlsched.train.fleet_job import plan_on_nodes

    profiles = [ModelProfile("a", (100.0, 190.0, 270.0)), ModelProfile("b", (95.0,)), ModelProfile("c", (60.0, 110.0)),
                ModelProfile("d", (55.0,))]
    plan, where = plan_on_nodes(profiles, (("n1", 2), ("n2", 2)), 8, Preprocessing(1e6), 0.10)
    assert not plan.waiting and len(where) == len(plan.flotillas) and set(where) == {"n1", "n2"}
    for node in ("n1", "n2"):
        assert sum(g for f, w in zip(plan.flotillas, where) if w == node for g in f.gpus.values()) <= 2
    assert {d for f in plan.flotillas for d in f.gpus} == {"a", "b", "c", "d"}


def test_on_ray_the_share_says_where_its_slots_are_as_the_slot_file_of_its_request_has_them(tmp_path, monkeypatch):
    """The node layout comes from ray-slots.json of the request in force: a file written ahead of its control.json
    (a grow) is not yet the share; one rewritten without a new request (a node lost) is at once, both ways."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")

    def slots(generation, nodes):
        (tmp_path / "ray-slots.json").write_text(json.dumps({"generation": generation, "resources": {"GPU": 1},
            "retired": [], "slots": [{"group": f"g{i}", "bundle": 0, "node": n} for i, n in enumerate(nodes)]}))

    io = _Contract(tmp_path, 4, 8, ["a", "b"], on_ray=True)
    slots(1, ["n1", "n1", "n2", "n2"])
    write_control(tmp_path, 4, None, 1)
    both = io.share()
    assert both == Share(4, (), (("n1", 2), ("n2", 2)))
    io.event({"event": "flotillas", "share": 4, "waiting": [], "flotillas": [{"members": {"a": 1}}, {"members": {"b": 1}}]})
    slots(2, ["n1", "n1", "n2", "n2", "n3"])                  # the grow's slots, its control.json not yet written
    assert io.share() == both
    slots(1, ["n1", "n1"])                                   # n2 lost: the backend dropped its slots
    assert io.share() == Share(2, (), (("n1", 2),))
    slots(1, ["n1", "n1", "n2", "n2"])                       # back as planned: no request to answer, nothing fails
    assert io.share() == both
    slots(2, ["n1", "n1", "n2", "n2", "n3"])
    write_control(tmp_path, 5, None, 2)
    assert io.share() == Share(5, (), (("n1", 2), ("n2", 2), ("n3", 1)))
