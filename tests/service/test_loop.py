"""The live loop: placement, policy by registry name, start/resize/preempt/finish/fail with a real local backend."""
import json
import time
from collections import Counter

import pytest

from dlsched.backends.base import PollResult, read_progress, read_status
from dlsched.backends.recording import RecordingBackend
from dlsched.backends.local import LocalBackend
from dlsched.policy.base import _REGISTRY, Allocation, JobAllocation, NodeView, Policy, register
from dlsched.round import InvalidAllocation
from dlsched.service.job_models import job_view
from dlsched.service.loop import LiveLoop
from dlsched.service.progress_history import ProgressHistory
from dlsched.service.refit import SETTLE_STEPS, speed_sample
from dlsched.service.store import FAILED, FINISHED, QUEUED, RUNNING, Store
from dlsched.spec import load_job_spec
from tests.service.conftest import RUNTIME, cluster, job_yaml
from tests.service.policies import GreedyFifo, Sized


class NewestFirst(Policy):
    """Gives every GPU to the newest job: forces preemptions (test-only)."""

    name = "test-newest"

    def decide(self, jobs, c):
        if not jobs:
            return Allocation({})
        newest = max(jobs, key=lambda j: int(j.id))
        return Allocation({newest.id: JobAllocation(min(c.total_gpus, newest.max_gpus or 1))})


class Greedy(Policy):
    """Asks for more GPUs than exist (a broken policy)."""

    name = "test-greedy"

    def decide(self, jobs, c):
        return Allocation({j.id: JobAllocation(c.total_gpus) for j in jobs})


for p in (NewestFirst, Greedy):
    if p.name not in _REGISTRY:
        register(p.name)(p)


def run_until(loop, store, pred, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        loop.round()
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError([(j.id, j.state, j.samples) for j in store.jobs()])


def make_loop(tmp_path, policy, slots=(2, 2)):
    store = Store(tmp_path / "s.db")
    backend = LocalBackend(runtime=RUNTIME)
    return LiveLoop(store, backend, cluster(policy, slots), tmp_path), store, backend


def confirm(loop, job):
    """The runtime's first step under ``job``'s newest request (the recording backend starts nothing)."""
    loop.job_dir(job.id).mkdir(parents=True, exist_ok=True)
    with open(loop.job_dir(job.id) / "progress.jsonl", "a") as f:
        f.write(json.dumps({"time": 1.0, "step": 1, "samples": 32, "workers": job.num_gpus,
                            "control_generation": job.generation}) + "\n")


def test_policy_is_chosen_by_registry_name(tmp_path):
    loop, _, _ = make_loop(tmp_path, "test-elastic")
    assert loop.policy.name == "test-elastic"
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        LiveLoop(Store(tmp_path / "t.db"), LocalBackend(), cluster("test-fifo").model_copy(update={"policy": "nope"}), tmp_path)


def test_elastic_job_shrinks_for_an_arrival_and_grows_back(tmp_path):
    loop, store, backend = make_loop(tmp_path, "test-elastic")
    try:
        # a's work outlasts b's start-up and run on a loaded machine (with 2000 samples an epoch, a once finished
        # on the 2 GPUs it shrank to before b ended: allocations 4, 2, 0)
        a = store.submit(load_job_spec(job_yaml("a", gpus=1, max_gpus=4, samples=8000, epochs=2, step_s=0.04)))
        run_until(loop, store, lambda: store.get(a).num_gpus == 4 and store.get(a).samples > 0)
        b = store.submit(load_job_spec(job_yaml("b", gpus=2, samples=320)))
        loop.round()   # a's slots are held until it trains on 2 (slot_holds): b waits for them
        assert store.get(a).num_gpus == 2 and store.get(b).state == QUEUED and store.get(a).releasing
        run_until(loop, store, lambda: store.get(b).state == RUNNING)
        assert store.get(a).releasing is None
        run_until(loop, store, lambda: store.get(b).state == FINISHED)
        run_until(loop, store, lambda: store.get(a).state == FINISHED, timeout=60)
        gpus = [al["num_gpus"] for al in store.allocations(a)]
        assert gpus[:3] == [4, 2, 4] and gpus[-1] == 0
        kinds = [e["kind"] for e in store.events(a)]
        assert kinds.count("rescaling") >= 2 and kinds[-1] == "finished"
        delay = loop.forecaster.typical_delay
        assert delay("resize", -1.0) >= 0 and delay("start", -1.0) > 0
        assert store.get(a).samples == 16000 and store.get(a).attained_service > 0
        assert store.predictions(a)[-1]["total_samples"] == 16000
        # its speed fit's sample: both sizes it ran at, none of the warm-up steps after a start or resize
        recs = store.progress(a)
        fitted = {r["time"] for r in speed_sample(ProgressHistory.of(recs))}
        # (a stretch that ended before it settled keeps its last step: on a loaded machine the 2-GPU one might)
        changed = [i for i, r in enumerate(recs) if i == 0 or r["workers"] != recs[i - 1]["workers"]]
        assert {2, 4} <= {r["workers"] for r in recs if r["time"] in fitted}
        assert not fitted & {r["time"] for i, j in zip(changed, changed[1:] + [len(recs)]) if j - i > SETTLE_STEPS
                             for r in recs[i:i + SETTLE_STEPS]}
    finally:
        backend.stop_all()


def test_preempted_job_resumes_from_its_checkpoint(tmp_path):
    loop, store, backend = make_loop(tmp_path, "test-newest")
    try:
        old = store.submit(load_job_spec(job_yaml("old", samples=1600, step_s=0.04, extra="")), now=1.0)
        run_until(loop, store, lambda: store.get(old).samples >= 320)
        new = store.submit(load_job_spec(job_yaml("new", samples=320)), now=2.0)
        loop.round()
        assert store.get(old).state == QUEUED and store.get(new).state == RUNNING
        done_at_preempt = store.get(old).samples
        # what it wrote until it stopped is read then, not when it starts again (its DONE stood still while queued)
        (at_stop,) = [r for r in read_progress(loop.job_dir(old), 0)[0] if r.get("event") == "checkpoint"][-1:]
        assert [e["detail"]["step"] for e in store.events(old) if e["kind"] == "job_checkpoint"][-1] == at_stop["step"]
        assert store.progress(old)[-1]["step"] == at_stop["step"]
        run_until(loop, store, lambda: store.get(new).state == FINISHED)
        run_until(loop, store, lambda: store.get(old).state == FINISHED, timeout=60)
        samples = [p["samples"] for p in store.progress(old)]
        assert samples.count(32) == 1, "resumed from zero instead of the checkpoint"
        assert samples == sorted(samples) and samples[-1] == 1600 and done_at_preempt < 1600
        assert len(store.allocations(old)) == 4     # start, preempt, restart, finish
        assert [e["detail"].get("reason") for e in store.events(old) if e["kind"] == "queued"] == ["preempted"]
    finally:
        backend.stop_all()


def test_failed_job_is_failed_with_reason_and_frees_gpus(tmp_path):
    loop, store, backend = make_loop(tmp_path, "test-fifo", slots=(1,))
    bad = store.submit(load_job_spec(job_yaml("bad", samples=640, extra="") .replace("step_s: 0.02", "step_s: 0.02, fail_at: 64")))
    ok = store.submit(load_job_spec(job_yaml("ok", samples=64)))
    run_until(loop, store, lambda: store.get(ok).state == FINISHED)
    j = store.get(bad)
    assert j.state == FAILED and "injected failure" in j.error and j.num_gpus == 0


@pytest.mark.parametrize("ending, wrong_event", [("preempt", "queued"), ("cancel", "cancelled")])
def test_a_job_that_ended_while_its_process_exits_is_finished_not_requeued_or_cancelled(tmp_path, ending,
                                                                                        wrong_event):
    """A runtime writes ``finished`` and then tears down (an ensemble's flotillas: a second or more). A job with no
    total (a target loss, an ensemble: nothing says it is done before that status) preempted in that window was
    re-queued and started again, to say it had already finished (live: an ensemble's last member converged); one
    cancelled in it was recorded cancelled, every sample trained."""
    loop, store, backend = make_loop(tmp_path, "test-sized", slots=(1,))
    try:
        a = store.submit(load_job_spec(job_yaml("a", samples=64).replace("step_s: 0.02", "step_s: 0.02, exit_s: 120, "
                                                                          "open_ended: 1")))
        Sized.gpus = {a: 1}
        run_until(loop, store, lambda: (read_status(loop.job_dir(a)) or {}).get("state") == "finished")
        assert store.get(a).state == RUNNING and backend.poll(a, loop.job_dir(a)).state == "running"
        if ending == "preempt":
            Sized.gpus = {}   # the policy takes its slot
        else:
            store.request_cancel(a)
        run_until(loop, store, lambda: store.get(a).state != RUNNING)
        assert store.get(a).state == FINISHED and store.get(a).num_gpus == 0
        assert wrong_event not in [e["kind"] for e in store.events(a)], store.events(a)
    finally:
        Sized.gpus = {}
        backend.stop_all()


def test_a_policy_that_overcommits_changes_nothing(tmp_path):
    loop, store, _ = make_loop(tmp_path, "test-greedy")
    store.submit(load_job_spec(job_yaml("a")))
    store.submit(load_job_spec(job_yaml("b")))
    before = store.snapshot()
    with pytest.raises(InvalidAllocation):
        loop.round()
    assert store.snapshot() == before and all(j.state == QUEUED for j in store.jobs())


def test_a_round_over_1000_queued_jobs(tmp_path):
    store = Store(tmp_path / "s.db")
    store.submit_many([load_job_spec(job_yaml(f"j{i}", gpus=1 + i % 4)) for i in range(1000)], now=0.0)
    backend = RecordingBackend()
    loop = LiveLoop(store, backend, cluster("test-fifo", (8, 8)), tmp_path)
    stats = loop.round()
    assert stats.active_jobs == 1000
    started = [c for c in backend.calls if c[0] == "start"]
    assert sum(c[2] for c in started) <= 16 and started[0][1] == 1
    assert len(store.jobs(states=(RUNNING,))) == len(started)


def test_predictions_carry_the_policy_forecast(tmp_path):
    """FIFO on 4 slots: b (4 GPUs) waits for a (4 GPUs); the forecast starts b when a is forecast to finish,
    and the API shows it for the queued job."""
    store = Store(tmp_path / "s.db")
    backend = LocalBackend(runtime=RUNTIME)
    loop = LiveLoop(store, backend, cluster("test-fifo", (2, 2)), tmp_path)
    try:
        a = store.submit(load_job_spec(job_yaml("a", gpus=4, samples=3200, step_s=0.02)))
        b = store.submit(load_job_spec(job_yaml("b", gpus=4, samples=320)))

        def forecast_known():      # what LoopThread's forecast thread does every few seconds
            loop.forecaster.refresh(time.time())
            return any(p["policy_finish"] for p in store.predictions(a)) and store.forecasts()[a]["finish"]

        run_until(loop, store, forecast_known)
        fc = store.forecasts()
        assert store.get(b).state == QUEUED and fc[a]["finish"] > fc[a]["time"]
        assert fc[b]["start"] == pytest.approx(fc[a]["finish"])
        assert fc[b]["finish"] is None      # b never ran: no rate, so no made-up finish
        pa = [p for p in store.predictions(a) if p["policy_finish"]][-1]
        assert pa["forecast_time"] <= pa["time"] and pa["predicted_start"] == pytest.approx(pa["forecast_time"])
        # a cheap forecast is remade inside the round with the rates just refitted: no lag behind the refit
        run_until(loop, store, lambda: any(p["forecast_time"] == p["time"] for p in store.predictions(a)))
        run_until(loop, store, lambda: store.get(b).state == FINISHED, timeout=60)
        assert store.get(b).start_time >= store.get(a).end_time - 1.0
        assert 0 < loop.forecaster.typical_delay("start", -1.0) < 30     # measured here: decision -> first step
    finally:
        backend.shutdown()


class Swap(Policy):
    """The first job gets 3 GPUs and the second 1, then (``swapped``) the other way round: one shrink and one grow
    in the same round (test-only; the second gets no more than the view has left)."""

    name = "test-swap"
    swapped = False

    def decide(self, jobs, c):
        a, b = sorted(jobs, key=lambda j: int(j.id))[:2]
        ga, gb = (1, 3) if Swap.swapped else (3, 1)
        return Allocation({a.id: JobAllocation(ga), b.id: JobAllocation(min(gb, c.total_gpus - ga))})


if Swap.name not in _REGISTRY:
    register(Swap.name)(Swap)


def test_a_grow_onto_the_slots_a_shrink_of_the_same_round_gives_back_waits_until_the_shrink_is_confirmed(tmp_path):
    """The policy takes a shrink to free its slots at once: the grow of the same round took them while the shrinking
    job's larger group still trained there. It waits for a step at the smaller size under the shrink's request."""
    store = Store(tmp_path / "s.db")
    backend = RecordingBackend()
    loop = LiveLoop(store, backend, cluster("test-swap", (2, 2)), tmp_path)
    a = store.submit(load_job_spec(job_yaml("a", gpus=1, max_gpus=4)))
    b = store.submit(load_job_spec(job_yaml("b", gpus=1, max_gpus=4)))
    Swap.swapped = False
    loop.round()
    assert (store.get(a).num_gpus, store.get(b).num_gpus) == (3, 1)
    Swap.swapped = True
    backend.calls.clear()
    loop.round()
    job = store.get(a)
    assert backend.calls == [("resize", a)] and sum(job.releasing.values()) == 2 and store.get(b).num_gpus == 1
    loop.round()
    assert backend.calls == [("resize", a)], "b grew onto slots a's larger group may still train on"
    assert job.num_gpus == 1
    confirm(loop, job)   # the runtime's first step at 1
    loop.round()
    assert store.get(a).releasing is None and backend.calls == [("resize", a), ("resize", b)]
    assert store.get(b).num_gpus == 3


class FinishesBetweenReads(RecordingBackend):
    """A job whose last steps land in progress.jsonl after the loop's read and before its poll (a busy machine)."""

    def poll(self, job_id, job_dir):
        import json

        job_dir.mkdir(parents=True, exist_ok=True)
        with open(job_dir / "progress.jsonl", "a") as f:
            f.write(json.dumps({"time": 1.0, "step": 10, "epoch": 0, "samples": 320, "total_samples": 320, "loss": 0.1,
                                "samples_per_s": 100.0, "workers": 1, "batch_size": 32}) + "\n")
        return PollResult("finished")


def test_a_job_that_finishes_between_the_read_and_the_poll_keeps_its_last_steps(tmp_path):
    store = Store(tmp_path / "s.db")
    loop = LiveLoop(store, FinishesBetweenReads(), cluster("test-fifo", (1,)), tmp_path)
    job = store.submit(load_job_spec(job_yaml("j", samples=320)))
    run_until(loop, store, lambda: store.get(job).state == FINISHED)
    assert store.get(job).samples == 320          # read after the poll said finished: nothing is left behind


class SeesFinished(GreedyFifo):
    """test-fifo, keeping the finished jobs the last decision was shown (``ClusterView.finished``)."""

    def decide(self, jobs, cluster):
        self.finished = cluster.finished
        return super().decide(jobs, cluster)


def test_the_live_policy_is_shown_the_jobs_that_finished_as_the_simulators_is(tmp_path):
    """The simulator shows its policy the jobs that finished (the Gittins ranking learns job sizes from them); the
    live rounds showed none, so the same policy decided on other inputs live. Shown: each as it last ran, its speed
    model with it; after a restart, those the store holds (no speed model is kept)."""
    store = Store(tmp_path / "s.db")
    policy = SeesFinished()
    loop = LiveLoop(store, FinishesBetweenReads(), cluster("test-fifo", (1,)), tmp_path, policy=policy)
    done = store.submit(load_job_spec(job_yaml("j", samples=320)))
    run_until(loop, store, lambda: store.get(done).state == FINISHED)
    waiting = store.submit(load_job_spec(job_yaml("k", samples=320, gpus=2)))   # more than the cluster: stays queued
    loop.round()
    (seen,) = policy.finished
    assert (seen.id, seen.run_time, seen.speed is not None) == (str(done), store.get(done).run_time, True)
    restarted = SeesFinished()
    LiveLoop(store, FinishesBetweenReads(), cluster("test-fifo", (1,)), tmp_path, policy=restarted).round()
    assert [(f.id, f.speed) for f in restarted.finished] == [(str(done), None)]
    assert store.get(waiting).state == QUEUED


def test_a_job_that_trained_every_sample_is_neither_grown_nor_preempted_while_it_exits(tmp_path):
    """Between its last step and its exit (its evaluation, last checkpoint) a job's process still runs: a round
    there gave it every free GPU (live: a grow it never made, held one round while others queued)."""
    store = Store(tmp_path / "s.db")
    backend = RecordingBackend()
    loop = LiveLoop(store, backend, cluster("test-elastic", (2, 2)), tmp_path)
    job = store.submit(load_job_spec(job_yaml("j", gpus=1, max_gpus=4, samples=320)))
    loop.round()
    assert store.get(job).num_gpus == 4
    backend.calls.clear()
    j = store.get(job)
    confirm(loop, j)
    with open(loop.job_dir(job) / "progress.jsonl", "a") as f:   # its last step, trained on 4 GPUs
        f.write(json.dumps({"time": 2.0, "step": 10, "samples": 320, "total_samples": 320, "workers": 4,
                            "control_generation": j.generation}) + "\n")
    store.update(job, num_gpus=2, placement={"n0": 2})   # as if it had shrunk: the round would grow it back
    loop.round()
    assert store.get(job).num_gpus == 2 and backend.calls == [], backend.calls
    view = job_view(store.get(job), None)
    assert view.max_gpus == view.min_gpus == 2 and not view.preemptible


class LosesANodeAfterAPoll(RecordingBackend):
    """Ray's live nodes when one dies just after the loop polled a job on it (its health checks failed meanwhile):
    that poll saw the job whole; the next one finds the node dead and reports the job on the node left, once."""

    def __init__(self):
        super().__init__()
        self.lose, self.lost, self.reported = False, False, False

    def nodes(self):
        return tuple(NodeView(n, 2) for n in (("n0",) if self.lost else ("n0", "n1")))

    def poll(self, job_id, job_dir):
        if self.lost and not self.reported:
            self.reported = True
            return PollResult("running", nodes={"n0": 2})
        self.lost = self.lost or self.lose
        return PollResult("running")


def test_a_node_lost_between_the_poll_and_the_decision_leaves_the_job_on_it_training(tmp_path):
    """The round decided on nodes read after its polls: a node that died in between was gone from the policy's view
    while the job still held GPUs on it, so the job no longer fit and was preempted (stopped, re-queued) instead of
    training on with the workers it has left."""
    store = Store(tmp_path / "s.db")
    backend = LosesANodeAfterAPoll()
    loop = LiveLoop(store, backend, cluster("test-fifo", (2, 2)), tmp_path)
    job = store.submit(load_job_spec(job_yaml("j", gpus=3)))
    run_until(loop, store, lambda: store.get(job).state == RUNNING)
    assert store.get(job).placement == {"n0": 2, "n1": 1}
    backend.lose = True
    loop.round()   # its poll sees the job whole; the node dies before the decision
    loop.round()   # its poll finds the node dead: the job trains on in n0
    assert ("stop", job) not in backend.calls, backend.calls
    j = store.get(job)
    assert (j.state, j.num_gpus, j.placement) == (RUNNING, 2, {"n0": 2})


class LosesANodeBeforeAPoll(RecordingBackend):
    """Ray's live nodes when one dies after the round read them and before its poll: that poll finds the node dead
    and reports the job on the nodes left, while the round's view still lists the dead node, free."""

    def __init__(self):
        super().__init__()
        self.lose, self.lost = False, False

    def nodes(self):
        listed = tuple(NodeView(n, 1) for n in (("n0", "n1") if self.lost else ("n0", "n1", "n2")))
        self.lost = self.lost or self.lose     # it dies now, after the view was read
        return listed

    def poll(self, job_id, job_dir):
        if self.lost and not getattr(self, "reported", False):
            self.reported = True
            return PollResult("running", nodes={"n0": 1, "n1": 1})
        return PollResult("running")


def test_a_node_lost_between_the_view_and_the_poll_is_not_grown_onto_in_that_round(tmp_path):
    """The round's view, read before its polls, still listed the node whose loss its poll found: with the job's books
    shrunk off it, the node looked free and the policy grew the job back onto it. The grow's reservation on a dead
    node waited out Ray's 60 s placement timeout inside the round (the multinode killed-raylet test's node table went
    stale for 60 s, once under load)."""
    store = Store(tmp_path / "s.db")
    backend = LosesANodeBeforeAPoll()
    loop = LiveLoop(store, backend, cluster("test-elastic", (1, 1, 1)), tmp_path)
    job = store.submit(load_job_spec(job_yaml("j", gpus=3, max_gpus=3, extra="min_gpus: 1\n")))
    run_until(loop, store, lambda: store.get(job).num_gpus == 3)
    assert store.get(job).state == RUNNING
    backend.lose, backend.calls = True, []
    loop.round()   # the view lists n2; the poll finds it dead: the job is booked on n0 and n1
    j = store.get(job)
    assert (j.state, j.num_gpus, j.placement) == (RUNNING, 2, {"n0": 1, "n1": 1})
    assert backend.calls == [], backend.calls      # no grow back onto the dead node
    for _ in range(3):
        loop.round()    # later views lack it: the job trains on at 2
    assert backend.calls == [] and store.get(job).num_gpus == 2, backend.calls


class CannotReserveAGrow(RecordingBackend):
    """Ray's grow when the slots the round's view counted are not there (a node declared dead since): its reservation
    times out and nothing changes."""

    def resize(self, launch):
        super().resize(launch)
        raise TimeoutError(f"job {launch.job_id}: Ray could not reserve 1 x gpu_slot in 60 s")


def test_a_grow_whose_reservation_times_out_leaves_the_job_training_at_its_size(tmp_path):
    """A grow's reservation timeout failed the job and stopped its runtime, though the grow had changed nothing."""
    store = Store(tmp_path / "s.db")
    backend = CannotReserveAGrow()
    frozen: list[float] = []   # the loop's clock, held still from the grow on: no back-off wait runs out meanwhile
    loop = LiveLoop(store, backend, cluster("test-elastic", (1, 1)), tmp_path,
                    clock=lambda: frozen[0] if frozen else time.time())
    job = store.submit(load_job_spec(job_yaml("j", gpus=2, max_gpus=2, extra="min_gpus: 1\n")))
    first = store.submit(load_job_spec(job_yaml("first", gpus=1)))
    store.update(first, submit_time=store.get(job).submit_time - 1)     # older: the elastic one starts on 1 GPU
    run_until(loop, store, lambda: store.get(job).state == RUNNING and store.get(first).state == RUNNING)
    assert store.get(job).num_gpus == 1
    store.transition(first, "cancelled", time.time())                   # its GPU is free: the policy grows the job
    frozen.append(time.time())
    loop.round()
    j = store.get(job)
    assert (j.state, j.num_gpus) == (RUNNING, 1), (j.state, j.num_gpus, j.error)
    assert ("stop", job) not in backend.calls and backend.calls.count(("resize", job)) == 1, backend.calls
    (unreserved,) = [e for e in store.events(job) if e["kind"] == "grow_unreserved"]
    assert unreserved["detail"]["gpus"] == 2 and unreserved["detail"]["no_grow_for_s"] > 0
    loop.round()
    assert backend.calls.count(("resize", job)) == 1, backend.calls     # no retry before the wait is over


class PlacesWhereItCan(RecordingBackend):
    """Ray's start given a node that died since the round's view: it places the job on a node alive."""

    live = (NodeView("n0", 2, "generic", 1), NodeView("n1", 2, "generic", 1))
    asked: dict = {}

    def nodes(self):
        return self.live

    def start(self, launch):
        super().start(launch)
        self.asked = dict(launch.placement)

    def placement(self, job_id):
        return {next(v.name for v in self.live if v.name not in self.asked): 2}


def test_a_job_started_elsewhere_than_asked_is_booked_where_it_runs_and_not_moved(tmp_path):
    """A start was booked on the node it asked for: the next round's view lacked that (dead) node, and the loop moved
    the job, already on the live one, there (a resize for nothing: tests/backends/test_ray_node_loss.py's node loss
    counted a third 'running', once under load)."""
    store = Store(tmp_path / "s.db")
    backend = PlacesWhereItCan()
    loop = LiveLoop(store, backend, cluster("test-fifo", (2, 2)), tmp_path)
    job = store.submit(load_job_spec(job_yaml("j", gpus=2)))
    loop.round()
    (asked,) = backend.asked
    placed = backend.placement(job)
    assert store.get(job).placement == placed != backend.asked
    backend.live = tuple(v for v in backend.live if v.name != asked)    # the node it asked for is gone
    backend.calls.clear()
    for _ in range(3):
        loop.round()
    assert backend.calls == [], backend.calls
    assert [e["kind"] for e in store.events(job)] == ["submitted", "running"]
    (running,) = [e for e in store.events(job) if e["kind"] == "running"]
    assert running["detail"]["placed"] == placed


class WritesSteps(RecordingBackend):
    """A running job that wrote ten more steps before every poll."""

    def poll(self, job_id, job_dir):
        import json

        job_dir.mkdir(parents=True, exist_ok=True)
        with open(job_dir / "progress.jsonl", "a") as f:
            for _ in range(10):
                self.step = getattr(self, "step", 0) + 1
                f.write(json.dumps({"time": float(self.step), "step": self.step, "epoch": 0, "samples": 32 * self.step,
                                    "total_samples": 32000, "loss": 1 / self.step, "samples_per_s": 100.0,
                                    "workers": 1, "batch_size": 32}) + "\n")
        return PollResult("running")


def test_refits_never_hold_the_stores_write_lock(tmp_path):
    """Fits are CPU-heavy: while one runs, a submission (another connection) must get the write lock at once."""
    import sqlite3

    store = Store(tmp_path / "s.db")
    loop = LiveLoop(store, WritesSteps(), cluster("test-fifo", (1,)), tmp_path)
    job = store.submit(load_job_spec(job_yaml("j", samples=32000)))
    refit, locked = loop.models.refit, []

    def refit_while_another_writer_tries(*args, **kwargs):
        other = sqlite3.connect(tmp_path / "s.db", timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            locked.append(False)
        except sqlite3.OperationalError:
            locked.append(True)
        finally:
            other.close()
        return refit(*args, **kwargs)

    loop.models.refit = refit_while_another_writer_tries
    run_until(loop, store, lambda: len(locked) >= 3 and store.predictions(job))
    assert not any(locked)


def scheduler_goes_on_past(service, client, lines: str) -> int:
    """A long job's newest progress records are ``lines`` (its process stopped, so they stay the newest, as a job
    that writes only those): a second job still runs to its end and the first is cancelled; the first's id."""
    import json
    import os
    import signal

    from tests.waiting import wait_until

    post = {"content-type": "application/yaml"}
    first = client.post("/jobs", content=job_yaml("long", samples=10**6, step_s=0.05), headers=post).json()["id"]
    wait_until(lambda: client.get(f"/jobs/{first}").json()["samples"] > 0, 60, "the long job's first steps")
    folder = service.loop.job_dir(first)
    pid = json.loads((folder / "status.json").read_text())["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        with open(folder / "progress.jsonl", "a") as f:
            f.write(lines)
        second = client.post("/jobs", content=job_yaml("short", samples=64), headers=post).json()["id"]
        wait_until(lambda: client.get(f"/jobs/{second}").json()["state"] == "finished", 60, "the second job to finish")
    finally:
        os.kill(pid, signal.SIGCONT)
    client.post(f"/jobs/{first}/cancel")
    wait_until(lambda: client.get(f"/jobs/{first}").json()["state"] == "cancelled", 60, "the long job to be cancelled")
    return first


def test_a_non_number_in_a_jobs_progress_does_not_stop_the_scheduler(service, client):
    """Job code computes a step record's total_samples (make_job's epochs x num_samples): params {epochs: "abc"}
    made it a string, float() raised in every round, and the service stopped ending, starting and observing every
    job (a finished job stayed 'running' at 79.7%). The field is read as absent, named once in an event."""
    bad = '{"step": 1, "samples": 32, "total_samples": "abcabc", "loss": "x", "workers": 1, "time": 1.0}\n'
    first = scheduler_goes_on_past(service, client, bad + bad)
    events = [e for e in client.get(f"/jobs/{first}/events").json() if e["kind"] == "job_malformed_progress"]
    assert [e["detail"]["field"] for e in events] == ["total_samples"], events
    assert all(r["loss"] is None or isinstance(r["loss"], float) for r in service.store.progress(first))


@pytest.mark.parametrize("forged", [
    '{"event": "eval", "job_id": 7, "now": 3, "kind": "val"}',    # keys Store.event took as its own arguments
    '{"step": 99999999999999999999999, "samples": 32, "loss": 1.0, "workers": 1, "time": 1.0}',   # past SQLite's int
    # a step without a time, or with one that is no number (NaN is stored as NULL): progress.time NOT NULL failed
    '{"step": 5, "samples": 32, "loss": 1.0, "workers": 1}',
    '{"step": 5, "samples": 32, "loss": 1.0, "workers": 1, "time": NaN}',
])
def test_a_jobs_forged_progress_record_does_not_stop_the_scheduler(service, client, forged):
    """Job code writes progress.jsonl. An event record carrying a ``job_id`` key raised TypeError in every round (all
    running jobs are observed in one transaction): no job started, ended or progressed again; so did an integer past
    64 bits (OverflowError from SQLite), and a step without a finite time (IntegrityError). Now the scheduler goes on:
    the keys are the event's detail, the integer is read as absent, the untimed step left out (named in an event)."""
    first = scheduler_goes_on_past(service, client, forged + "\n")
    kinds = [e["kind"] for e in client.get(f"/jobs/{first}/events").json()]
    assert "running" in kinds and "cancelled" in kinds, kinds


def test_a_status_file_that_is_not_an_object_does_not_stop_the_scheduler(service, client):
    """Job code may write status.json. A list there, read when the coordinator died, raised AttributeError in every
    round from then on (the poll found it again each time): no job started or ended. Now it reads as no status (the
    killed job resumes, as one killed without a status)."""
    import json
    import os
    import signal

    from tests.waiting import wait_until

    post = {"content-type": "application/yaml"}
    first = client.post("/jobs", content=job_yaml("long", samples=10**6, step_s=0.05), headers=post).json()["id"]
    wait_until(lambda: client.get(f"/jobs/{first}").json()["samples"] > 0, 60, "the long job's first steps")
    folder = service.loop.job_dir(first)
    pid = json.loads((folder / "status.json").read_text())["pid"]
    os.kill(pid, signal.SIGSTOP)     # it must not rewrite the file before it dies
    (folder / "forged").write_text("[1]")
    os.replace(folder / "forged", folder / "status.json")
    os.kill(pid, signal.SIGKILL)
    second = client.post("/jobs", content=job_yaml("short", samples=64), headers=post).json()["id"]
    wait_until(lambda: client.get(f"/jobs/{second}").json()["state"] == "finished", 60, "the second job to finish")
    client.post(f"/jobs/{first}/cancel")
    wait_until(lambda: client.get(f"/jobs/{first}").json()["state"] == "cancelled", 60, "the long job to be cancelled")


def test_a_rescaling_job_shows_and_is_charged_the_gpus_it_trains_on_until_the_resize_is_confirmed(tmp_path):
    """The store's num_gpus jumps to the target at the resize (the scheduler reserves it, so no GPU is given
    twice), and status showed it, and attained service charged it, before the runtime trained at that size."""
    from dlsched.commands.service import job_rows
    from dlsched.service.store import RESCALING

    t = [0.0]
    store = Store(tmp_path / "s.db")
    backend = LocalBackend(runtime=RUNTIME, stop_grace_s=1.0)
    loop = LiveLoop(store, backend, cluster("test-elastic", (2, 2)), tmp_path, clock=lambda: t[0])
    try:
        # 150 s per step at 4 workers: the contract job reads its new size only after its first step
        a = store.submit(load_job_spec(job_yaml("a", gpus=1, max_gpus=4, samples=10**6, step_s=600)), now=0.0)
        loop.round()
        assert (store.get(a).state, store.get(a).num_gpus) == (RUNNING, 4)
        t[0] = 10.0
        b = store.submit(load_job_spec(job_yaml("b", gpus=2, samples=10**6, step_s=600)), now=10.0)
        loop.round()                          # a: 4 -> 2 for b, not yet confirmed by a's runtime
        job = store.get(a)
        assert (job.state, job.num_gpus, job.held_gpus) == (RESCALING, 2, 4)
        shown = job.public()
        assert (shown["num_gpus"], shown["target_gpus"]) == (4, 2)
        assert job_rows([shown])[0][3] == "4->2"
        assert job.num_gpus + sum(job.releasing.values()) == 4 and store.get(b).state == QUEUED   # held till then
        t[0] = 20.0
        loop.round()
        job = store.get(a)
        assert job.state == RESCALING, "the contract job confirmed a resize inside its 150 s step"
        assert job.attained_service == pytest.approx(4 * 10 + 4 * 10)    # charged 4 GPUs until it trains on 2
        assert store.get(b).state == QUEUED
    finally:
        backend.stop_all()


def test_a_resize_the_runtime_abandons_returns_the_job_to_its_old_gpus_and_slots_and_is_retried_after_a_wait(tmp_path):
    """A grow whose new worker crashed in start-up left the job `rescaling` at the target for good (its GPUs
    reserved, unused); once returned, the policy asked for the same grow every round (a resize storm)."""
    import json
    from dlsched.service.resize_backoff import FIRST_S
    from dlsched.service.store import RESCALING

    t = [0.0]
    store = Store(tmp_path / "s.db")
    backend = LocalBackend(runtime=RUNTIME, stop_grace_s=1.0)
    loop = LiveLoop(store, backend, cluster("test-elastic", (2,)), tmp_path, clock=lambda: t[0])
    try:   # 600 s steps: the contract job never confirms a resize by itself
        x = store.submit(load_job_spec(job_yaml("x", gpus=1, samples=10**6, step_s=600)), now=0.0)
        a = store.submit(load_job_spec(job_yaml("a", gpus=1, max_gpus=2, samples=10**6, step_s=600)), now=0.0)
        loop.round()
        assert backend._slots[a] == {"n0": [1]}
        store.request_cancel(x)
        t[0] = 10.0
        loop.round()                                       # x's slot goes to a: 1 -> 2
        job = store.get(a)
        assert (job.state, job.num_gpus, job.held_gpus, backend._slots[a]) == (RESCALING, 2, 1, {"n0": [0, 1]})
        with open(loop.job_dir(a) / "progress.jsonl", "a") as f:
            f.write(json.dumps({"event": "resize_abandoned", "time": 11.0, "reason": "new worker 1 exited with 3",
                                "control_generation": job.generation}) + "\n")
        t[0] = 20.0
        loop.round()
        job = store.get(a)
        assert (job.state, job.num_gpus, job.placement, job.training_gpus) == (RUNNING, 1, {"n0": 1}, None)
        assert backend._slots[a] == {"n0": [1]}            # the slot its worker sits on, not the lowest free one
        assert json.loads((loop.job_dir(a) / "control.json").read_text())["workers"] == 1
        assert store.allocations(a)[-1]["num_gpus"] == 1
        t[0] = 20.0 + FIRST_S - 1
        loop.round()
        assert (store.get(a).state, store.get(a).num_gpus) == (RUNNING, 1)   # no grow again yet
        t[0] = 20.0 + FIRST_S + 1
        loop.round()
        assert (store.get(a).state, store.get(a).num_gpus) == (RESCALING, 2)  # the next try
        assert backend._slots[a] == {"n0": [0, 1]}
    finally:
        backend.stop_all()


def fill_database(store):
    """The store's disk is full: its file may grow no more, and the free room left in its pages is taken."""
    import sqlite3
    conn = store._conn()
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    for size in (4000, 1000, 200, 50, 10):
        try:
            while True:
                store.event("filler", None, 0.0, x="y" * size)
        except sqlite3.OperationalError:
            pass


class FillsTheDiskWhenItDecides(Policy):
    """test-elastic's decisions; with ``fill`` set, the store's disk fills as it decides: the round's backend actions
    run, its commit fails."""

    name = "test-fills"

    def __init__(self, store):
        from tests.service.policies import GreedyElastic
        self.inner, self.store, self.fill = GreedyElastic(), store, False

    def decide(self, jobs, c):
        if self.fill:
            fill_database(self.store)
        return self.inner.decide(jobs, c)

    def __deepcopy__(self, memo):   # the forecast's copy decides only
        return self.inner


def test_a_runtimes_abandoned_resize_is_not_lost_with_a_round_that_failed_to_commit(tmp_path):
    """The round that grew the job wrote control.json (generation g) and failed to commit (a full disk): the store
    stayed at g - 1, the runtime's resize_abandoned for g was dropped as an older request's, and the retried grow
    reused g, which the runtime ignores (not higher): the job sat `rescaling` until resize_timeout_s."""
    import sqlite3
    from dlsched.service.store import RESCALING

    t = [0.0]
    store = Store(tmp_path / "s.db")
    backend = LocalBackend(runtime=RUNTIME, stop_grace_s=1.0)
    policy = FillsTheDiskWhenItDecides(store)
    loop = LiveLoop(store, backend, cluster("test-elastic", (2,)), tmp_path, clock=lambda: t[0], policy=policy)
    try:   # 600 s steps: the contract job never confirms a resize by itself
        x = store.submit(load_job_spec(job_yaml("x", gpus=1, samples=10**6, step_s=600)), now=0.0)
        a = store.submit(load_job_spec(job_yaml("a", gpus=1, max_gpus=2, samples=10**6, step_s=600)), now=0.0)
        loop.round()
        store.request_cancel(x)
        t[0], policy.fill = 10.0, True
        with pytest.raises(sqlite3.OperationalError, match="full"):
            loop.round()                                   # x's slot goes to a: 1 -> 2, in control.json only
        store._conn().execute("PRAGMA max_page_count = 1073741823")   # room again
        policy.fill = False
        sent = json.loads((loop.job_dir(a) / "control.json").read_text())
        assert sent["workers"] == 2 and store.get(a).generation == sent["generation"] - 1
        with open(loop.job_dir(a) / "progress.jsonl", "a") as f:
            f.write(json.dumps({"event": "resize_abandoned", "time": 11.0, "reason": "new worker 1 exited with 3",
                                "control_generation": sent["generation"]}) + "\n")
        t[0] = 20.0
        loop.round()                                       # the notice is read; the grow is retried
        assert (store.get(a).state, store.get(a).generation) == (RESCALING, sent["generation"])
        t[0] = 30.0
        loop.round()
        job = store.get(a)
        assert (job.state, job.num_gpus, job.placement) == (RUNNING, 1, {"n0": 1})
        assert "new worker 1 exited with 3" in store.last_event(a, RUNNING, came_from=RESCALING)["reason"]
    finally:
        backend.stop_all()


class KeepsItsFirstWorkers(RecordingBackend):
    """Ray's books: a job's slots in its workers' rank order; a shrink keeps the first (the runtime keeps its oldest
    workers), a grow adds the newcomers where asked, or on ``instead[node]`` (Ray placing them elsewhere: the node
    asked for died since the round's view)."""

    def __init__(self, instead=None):
        super().__init__()
        self.slots, self.instead = {}, dict(instead or {})

    def start(self, launch):
        super().start(launch)
        self.slots[launch.job_id] = [n for n, k in launch.placement.items() for _ in range(k)]

    def resize(self, launch):
        super().resize(launch)
        slots = self.slots[launch.job_id]
        if launch.num_gpus < len(slots):
            del slots[launch.num_gpus:]
        else:
            new = Counter(launch.placement) - Counter(slots)
            slots += [self.instead.get(n, n) for n, k in new.items() for _ in range(k)]

    def placement(self, job_id):
        return dict(Counter(self.slots[job_id]))


def test_a_shrink_after_a_grow_onto_an_earlier_node_keeps_the_worker_the_runtime_keeps(tmp_path):
    """A job started on n1 grew onto n0; its shrink asked to keep n0 (the store had sorted the node map, and a shrink
    keeps the first node's workers) while the runtime keeps its first worker, on n1: the books said n0 and showed n1
    free under a worker that trained on."""
    store = Store(tmp_path / "s.db")
    backend = KeepsItsFirstWorkers()
    loop = LiveLoop(store, backend, cluster("test-sized", (1, 1)), tmp_path)
    b = store.submit(load_job_spec(job_yaml("b")))
    a = store.submit(load_job_spec(job_yaml("a", max_gpus=2)))
    Sized.gpus = {b: 1, a: 1}
    loop.round()
    assert (store.get(b).placement, store.get(a).placement) == ({"n0": 1}, {"n1": 1})
    Sized.gpus = {a: 2}
    store.request_cancel(b)
    loop.round()
    loop.round()
    assert store.get(a).placement == backend.placement(a) == {"n1": 1, "n0": 1}
    confirm(loop, store.get(a))
    Sized.gpus = {a: 1}
    loop.round()
    job = store.get(a)
    assert job.placement == backend.placement(a) == {"n1": 1}
    assert job.releasing == {"n0": 1}
    assert "placed" not in store.events(a)[-1]["detail"], "the round asked for another node than the runtime keeps"


def test_a_grow_placed_elsewhere_than_asked_is_booked_where_its_newcomer_runs(tmp_path):
    """Ray places a grow's newcomer on a live node when the one asked for died since the round's view: the books
    named the dead node, and the node the newcomer trains on looked free."""
    store = Store(tmp_path / "s.db")
    backend = KeepsItsFirstWorkers(instead={"n1": "n2"})
    loop = LiveLoop(store, backend, cluster("test-sized", (1, 1, 1)), tmp_path)
    a = store.submit(load_job_spec(job_yaml("a", max_gpus=2)))
    Sized.gpus = {a: 1}
    loop.round()
    assert store.get(a).placement == {"n0": 1}
    Sized.gpus = {a: 2}
    loop.round()
    job = store.get(a)
    assert job.placement == backend.placement(a) == {"n0": 1, "n2": 1}
    (resize,) = [e for e in store.events(a) if e["kind"] == "rescaling"]
    assert resize["detail"]["placed"] == {"n0": 1, "n2": 1}


def test_a_jobs_failing_prediction_is_said_once_and_every_job_is_still_scheduled(tmp_path):
    """A fit that raises (an injected fault in one job's refit) was the whole round's exception: no job was started,
    resized or finished while that job's progress kept arriving. It is now the job's ``prediction_failed`` event,
    once, and the round goes on."""
    loop, store, backend = make_loop(tmp_path, "test-fifo", slots=(1, 1))
    a = store.submit(load_job_spec(job_yaml("a", samples=640)))
    refit = loop.models.refit

    def fails_for_a(job, *args, **kwargs):
        if job.id == a:
            raise FloatingPointError("injected: a fit that overflowed")
        return refit(job, *args, **kwargs)

    loop.models.refit = fails_for_a
    run_until(loop, store, lambda: store.get(a).state == RUNNING and store.get(a).samples > 0)
    b = store.submit(load_job_spec(job_yaml("b", samples=320)))
    run_until(loop, store, lambda: store.get(a).state == FINISHED and store.get(b).state == FINISHED, timeout=60)
    failed = [e["detail"] for e in store.events(a) if e["kind"] == "prediction_failed"]
    assert failed == [{"error": "FloatingPointError: injected: a fit that overflowed"}]
    assert store.predictions(b) and not store.predictions(a)
    backend.stop_all()


def test_a_queued_job_is_predicted_from_its_tasks_finished_jobs_before_it_starts(tmp_path):
    """Issue 14's prior before the first point, in the service: two charlm jobs finished here (their fits in the
    store); a third, queued behind a job holding every GPU, gets a prediction before its first step: its loss carried
    from those jobs to its own schedule and budget, and its stated target's step. A job of another dataset, and one
    that declares no schedule while its task's finished jobs ran different ones (nothing to carry them to), get none;
    once two ran one recipe, a job declaring none is predicted under it."""
    from pathlib import Path

    import pandas as pd

    from dlsched.service.job_models import JobModels
    from dlsched.spec import JobSpec

    curves = Path(__file__).resolve().parents[2] / "bench" / "curves"
    store = Store(tmp_path / "s.db")
    models = JobModels(("slot",), store)

    def spec(gpus=1, **params) -> JobSpec:
        return JobSpec(name="lm", entry="x.py:make_job", gpus=gpus, batch_size=32, total_samples=32 * 800,
                       params={"dataset": "charlm", **params})
    for name, sched in (("step", "step:400,600:0.1"), ("wsd", "wsd:warmdown=160")):
        d = pd.read_csv(curves / f"charlm-{name}.csv")
        j = store.submit(spec(schedule=sched))
        store.update(j, samples=32 * 800)
        models.refit(store.get(j), [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step,
                                     "loss": r.loss, "samples_per_s": 100.0, "workers": 1, "batch_size": 32}
                                    for r in d.itertuples()], 3000.0)
        models.forget(j, finished=True)
        store.transition(j, RUNNING, 1.0)
        store.transition(j, FINISHED, 2.0)
    truth = pd.read_csv(curves / "charlm-cosine.csv").loss.iloc[-3:].mean()
    backend = RecordingBackend()
    loop = LiveLoop(store, backend, cluster("test-fifo", (2, 2)), tmp_path)   # reads the finished fits back
    big = store.submit(spec(gpus=4, schedule="constant"))
    queued = store.submit(spec(schedule="cosine:warmup=30", target_loss=1.7))
    other = store.submit(JobSpec(name="lm", entry="x.py:make_job", gpus=1, batch_size=32, total_samples=32 * 800,
                                 params={"dataset": "tinylm", "schedule": "cosine"}))
    undeclared = store.submit(spec())
    more = [store.submit(spec(schedule="cosine")) for _ in range(9)]
    loop.round()
    assert store.get(big).state == RUNNING and store.get(queued).state == QUEUED
    # a long queue: a few tried a round (big, queued, other and undeclared were four of them), the rest after
    assert sum(bool(store.predictions(j)) for j in more) == 8 - 4
    fit = store.predictions(queued)[-1]["loss_fit"]
    assert (fit["model"], fit["bands"], fit["curve"][-1][0]) == ("prior", "task_runs", 800.0)
    assert fit["final_80"][0] <= truth <= fit["final_80"][1] and abs(fit["final"] / truth - 1) < 0.05
    assert fit["target_loss"] == 1.7 and 0 < fit["target_step"] < 800 and fit["target_time"] is None
    assert store.predictions(other) == [] and store.predictions(undeclared) == []
    loop.round()   # made once per pool of finished jobs
    assert len(store.predictions(queued)) == 1 and all(len(store.predictions(j)) == 1 for j in more)
    assert store.predictions(other) == [] and store.predictions(undeclared) == []
    # two more finished jobs of its model ran one recipe (a cosine, declared over 800 steps and 400): a job that
    # declares none is predicted under that shape over its own budget, as if it had declared it, and says so
    for budget in (800, 400):
        d = pd.read_csv(curves / "charlm-cosine.csv")
        j = store.submit(JobSpec(name="lm", entry="x.py:make_job", gpus=1, batch_size=32, total_samples=32 * budget,
                                 params={"dataset": "charlm", "schedule": f"cosine:warmup={budget // 20}"}))
        store.update(j, samples=32 * budget)
        loop.models.refit(store.get(j), [{"time": 1000 + r.wall_s, "step": int(r.step) * budget // 800,
                                          "samples": 32 * r.step * budget // 800, "loss": r.loss,
                                          "samples_per_s": 100.0, "workers": 1, "batch_size": 32}
                                         for r in d.itertuples()], 3000.0)
        loop.models.forget(j, finished=True)
    undeclared_too, declared = store.submit(spec()), store.submit(spec(schedule="cosine:warmup=40"))
    assert loop.models.task_schedule(store.get(undeclared_too)) is not None
    for _ in range(10):   # a few queued jobs tried a round, oldest first: the earlier ones are tried again first
        loop.round()
        if store.predictions(undeclared_too) and store.predictions(declared):
            break
    got, want = (store.predictions(j)[-1]["loss_fit"] for j in (undeclared_too, declared))
    assert got["lr"] == "as its task's finished jobs ran (none declared)" and want["lr"] == "cosine:warmup=40 (declared)"
    assert got["final"] == pytest.approx(want["final"], rel=1e-3)
    # the same once it runs and reports no LR: under that shape, not a constant LR
    d = pd.read_csv(curves / "charlm-cosine.csv")
    seen = [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step, "loss": r.loss,
             "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples() if r.step <= 200]
    running = [loop.models.refit(store.get(j), seen, 4000.0).loss_fit for j in (undeclared_too, declared)]
    assert running[0]["lr"] == "as its task's finished jobs ran (none declared, none reported)"
    assert running[0]["final"] == pytest.approx(running[1]["final"], rel=1e-3)
    # and once it reports its LR so far, which follows theirs: past its reports, as they ran (perf.lr_continuation)
    reporting = [{"time": 1000 + r.wall_s, "step": int(r.step), "samples": 32 * r.step, "loss": r.loss, "lr": r.lr,
                  "samples_per_s": 100.0, "workers": 1, "batch_size": 32} for r in d.itertuples() if r.step <= 210]
    fit = loop.models.refit(store.get(undeclared_too), reporting, 4100.0).loss_fit
    assert fit["lr"] == "reported to step 210, then as its task's finished jobs ran"
    assert fit["final"] == pytest.approx(running[1]["final"], rel=0.01)
    # a prediction that raises is that job's alone: the round still schedules
    late = store.submit(spec(schedule="cosine"))
    loop.models.bands.of = lambda kind: 1 / 0
    stats = loop.round()
    assert store.predictions(late) == [] and stats.active_jobs >= 2


def _timed_steps(tmp_path, gaps, total):
    """A running job's loop after it read steps of 32 samples ``gaps`` seconds apart, each step's own samples/s 320
    (computed in 0.1 s): (store, job id)."""
    store = Store(tmp_path / "s.db")
    loop = LiveLoop(store, RecordingBackend(), cluster("test-fifo", (2,)), tmp_path)
    job = store.submit(load_job_spec(job_yaml("j", gpus=1, samples=total)))
    loop.round()
    j = store.get(job)
    loop.job_dir(job).mkdir(parents=True, exist_ok=True)
    t = time.time() - sum(gaps)
    with open(loop.job_dir(job) / "progress.jsonl", "a") as f:
        for i, gap in enumerate(gaps, 1):
            t += gap
            f.write(json.dumps({"time": t, "step": i, "samples": 32 * i, "loss": 1.0 / i, "samples_per_s": 320.0,
                                "workers": 1, "batch_size": 32, "total_samples": total,
                                "control_generation": j.generation}) + "\n")
    loop.round()
    return store, job


def test_the_speed_shown_is_the_wall_clock_rate_the_remaining_time_assumes_not_a_steps_own(tmp_path):
    """`status` showed the newest step's own samples/s, which swings step by step: SAMPLES/S 243 beside a LEFT of 4
    minutes for 6 500 samples, in a job that trained at 25/s on a busy machine; the operator could not tell which
    was wrong."""
    store, job = _timed_steps(tmp_path, [1.0] * 40, 6400)   # a step a second
    j = store.get(job)
    assert j.samples_per_s == pytest.approx(32.0)
    pred = store.predictions(job)[-1]
    assert pred["remaining_s"] == pytest.approx((6400 - 32 * 40) / j.samples_per_s)


def test_a_job_whose_speed_varies_is_shown_its_finish_at_the_fast_and_slow_end_of_it(tmp_path):
    """On the loaded 2-core machine an MLP's wall-clock rate over 10-step windows spread 51-153 samples/s (10th-90th
    percentile) and its LEFT moved with it, nothing saying how far it could: the remaining time at its newest rate."""
    from dlsched.commands.service import job_rows
    from dlsched.service.finish_times import shown_fields
    store, job = _timed_steps(tmp_path, [1.0] * 20 + [3.0] * 20 + [1.0] * 21, 32000)   # another job beside it a while
    pred = store.predictions(job)[-1]
    left = 32000 - 32 * 61
    assert pred["remaining_lo_s"] == pytest.approx(left / 32.0, rel=0.05)        # at a step a second
    assert pred["remaining_hi_s"] == pytest.approx(left / (32 / 3.0), rel=0.05)  # at a step in 3 s
    assert pred["remaining_lo_s"] <= pred["remaining_s"] <= pred["remaining_hi_s"]
    j = store.get(job)
    shown = j.public() | shown_fields(j, pred, None)
    early, late = shown["predicted_finish_range"]
    assert early < shown["predicted_finish"] < late
    left_cell = job_rows([shown], now=pred["time"])[0][9]
    assert "(" in left_cell and left_cell.endswith(")"), left_cell
