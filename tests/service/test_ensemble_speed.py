"""The elastic policy's view of an ensemble job's speed comes from its members' profiles (as the forecast rolls it
forward), not from the total samples/s of whichever members ran last. Under `serve` an ensemble was resized 13 times in
about 2 minutes: its linear member alone reported ~28k samples/s on 1 slot, a 3-member flotilla ~6.5k/s on 3, and
the speed fitted to that swung between "grows linearly" and "3 slots are 4x slower" every round. Real loop, real
SQLite, the real elastic policy; the runtime's progress is written by hand (deterministic)."""
import json
from dataclasses import replace

from dlsched.backends.base import PollResult
from dlsched.backends.recording import RecordingBackend
from dlsched.service.loop import LiveLoop
from dlsched.service.store import Store
from dlsched.spec import load_job_spec
from tests.service.conftest import cluster

ENSEMBLE = ("name: ens\nkind: ensemble\nentry: dlsched.train.fleet_spec:from_yaml\nparams: {path: ens.yaml}\n"
            "gpus: 1\nmin_gpus: 1\nmax_gpus: 4\nbatch_size: 32\n")
# each member one worker (max_workers 1): the ensemble can use 3 slots
PROFILES = [{"member": "linear", "rates": [28000.0]}, {"member": "cnn_a", "rates": [2300.0]},
            {"member": "cnn_b", "rates": [2200.0]}]
ROWS = 40
CAPS = {"linear": 1e9, "cnn_a": 1e9, "cnn_b": 1e9}   # far from done: no member leaves in the test


class FleetRuntime(RecordingBackend):
    """What a FLEET runtime writes: its members' profiles once, then before every poll a plan for its share and 250
    steps (more than a refit's window) at the summed rate of the members that plan runs: the linear member alone
    on 1 slot, a flotilla of all three (held back by the slowest) on more."""

    def __init__(self, clock):
        super().__init__()
        self.clock, self.launches, self.step = clock, {}, 0

    def start(self, launch):
        super().start(launch)
        self.launches[launch.job_id] = launch

    def resize(self, launch):
        super().resize(launch)
        self.launches[launch.job_id] = launch

    def poll(self, job_id, job_dir):
        launch, t = self.launches[job_id], self.clock()
        one = launch.num_gpus == 1
        rate, members = (28000.0, ["linear"]) if one else (6500.0, ["linear", "cnn_a", "cnn_b"])
        rows = [] if self.step else [{"event": "profiled", "time": t, "profiles": PROFILES, "max_samples": CAPS}]
        rows.append({"event": "flotillas", "time": t, "share": launch.num_gpus, "samples_done": {},
                     "flotillas": [{"members": {m: 1 for m in members}, "rate": rate / len(members)}]})
        for _ in range(ROWS):
            self.step += 1
            rows.append({"time": t + 0.001 * self.step, "step": self.step, "epoch": 0, "samples": 32 * self.step,
                         "loss": 1.0, "samples_per_s": rate, "workers": launch.num_gpus, "batch_size": 32,
                         "total_samples": None, "member": members[self.step % len(members)],
                         "generation": launch.generation, "control_generation": launch.generation})
        job_dir.mkdir(parents=True, exist_ok=True)
        with open(job_dir / "progress.jsonl", "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        return PollResult("running")


def test_an_ensemble_is_not_resized_back_and_forth_by_which_members_ran_last(tmp_path):
    t = [0.0]
    store = Store(tmp_path / "s.db")
    backend = FleetRuntime(lambda: t[0])
    loop = LiveLoop(store, backend, cluster("elastic", (4,)), tmp_path, clock=lambda: t[0])
    job = store.submit(load_job_spec(ENSEMBLE), now=0.0)
    sizes = []
    for i in range(40):   # a round every 10 s: every start or resize has long paid its pause (restart_hold)
        t[0] = 10.0 * i
        loop.round()
        sizes.append(store.get(job).num_gpus)
    resizes = [c for c in backend.calls if c[0] == "resize"]
    # its members can use 3 slots and their profiles say 3 run faster than 1: it grows once and stays
    assert len(resizes) <= 1, sizes
    assert sizes[-4:] == [3] * 4, sizes


def events(flotilla_members, converged=()):
    """A job's member events: the profiles, one plan running ``flotilla_members``, the members that left."""
    out = [{"kind": "job_profiled", "time": 0.0, "detail": {"profiles": PROFILES, "max_samples": CAPS}},
           {"kind": "job_flotillas", "time": 1.0,
            "detail": {"flotillas": [{"members": {m: 1 for m in flotilla_members}, "rate": 1000.0}]}}]
    return out + [{"kind": "job_member_converged", "time": 2.0, "detail": {"member": m}} for m in converged]


def test_the_ensembles_speed_is_its_still_training_members_plan_whichever_ran_last():
    from dlsched.policy.base import JobView
    from dlsched.service.ensemble_view import ensemble_view

    view = JobView(id="1", submit_time=0.0, requested_gpus=1, batch_size=32, min_gpus=1, max_gpus=4, kind="ensemble")
    alone, flotilla = (ensemble_view(view, events(m), now=2.0) for m in (["linear"], ["linear", "cnn_a", "cnn_b"]))
    assert alone.speed == flotilla.speed and alone.max_gpus == 3
    # 1 slot: the linear member alone; 3: it, and the two CNNs matched in a flotilla of their own
    assert alone.speed.throughput(1, 1, 32) == 28000.0
    assert alone.speed.throughput(3, 1, 32) == 28000.0 + 2 * 2200.0
    left = ensemble_view(view, events(["linear"], converged=["linear"]), now=2.0)
    assert left.max_gpus == 2 and left.speed.throughput(2, 1, 32) == 2 * 2200.0
    assert ensemble_view(view, events([])[:0], now=2.0) is view   # not profiled yet: as the job's record gives it


def test_an_ensemble_whose_every_member_left_is_held_as_it_is_until_it_exits():
    """Its view asked for 1 slot and was preemptible: live, the round that read its last member's departure shrank it
    (a resize it never answered) or preempted it, and it was started again to say it had finished."""
    from dlsched.policy.base import JobView
    from dlsched.service.ensemble_view import ensemble_view

    view = JobView(id="1", submit_time=0.0, requested_gpus=1, batch_size=32, min_gpus=1, max_gpus=4, kind="ensemble",
                   placement={"n0": 2, "n1": 1})
    done = ensemble_view(view, events(["linear"], converged=["linear", "cnn_a", "cnn_b"]), now=2.0)
    assert (done.min_gpus, done.max_gpus, done.requested_gpus, done.preemptible) == (3, 3, 3, False)
    assert done.remaining_samples == 0.0
    queued = replace(view, placement={})   # re-queued with every member gone: started to find that out, as before
    assert ensemble_view(queued, events([], converged=["linear", "cnn_a", "cnn_b"]), now=2.0).max_gpus == 1


class ProfilingFleetRuntime(FleetRuntime):
    """``FleetRuntime`` whose first PROFILE_S go to profiling its members: nothing is written meanwhile."""

    PROFILE_S = 30.0

    def poll(self, job_id, job_dir):
        if self.clock() < self.PROFILE_S:
            return PollResult("running")
        return super().poll(job_id, job_dir)


def test_an_ensemble_grows_once_it_has_profiled_not_a_profiling_time_later(tmp_path):
    """The restart hold (``policy.restart_hold``) counted the start's pause from the decision to the first step, and
    an ensemble's first 30 s go to profiling its members, which a resize does not repeat: it was held on 1 slot for
    30 s more while 3 were idle (found running an ensemble alone on an idle 3-slot service)."""
    t = [0.0]
    store = Store(tmp_path / "s.db")
    loop = LiveLoop(store, ProfilingFleetRuntime(lambda: t[0]), cluster("elastic", (4,)), tmp_path, clock=lambda: t[0])
    job = store.submit(load_job_spec(ENSEMBLE), now=0.0)
    sizes = {}
    for i in range(26):   # a round every 2 s to 50 s: profiled at 30
        t[0] = 2.0 * i
        loop.round()
        sizes[t[0]] = store.get(job).num_gpus
    assert sizes[28.0] == 1 and sizes[40.0] == 3, sizes
