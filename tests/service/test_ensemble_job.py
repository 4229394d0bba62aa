"""An ensemble (``kind: ensemble``) as a job of the running service, next to two ordinary jobs: the policy gives it a
share, FLEET plans flotillas inside it, the share grows when the other jobs finish, and every member converges.
Real service, real SQLite, real runtime processes (tiny CNNs, few steps)."""
import time

import httpx
import psutil
import pytest

from dlsched.paths import REPO_ROOT
from dlsched.commands.service import job_rows
from dlsched.service.fleet_status import summary
from dlsched.service.server import Service
from dlsched.train.files import read_status
from dlsched.spec import load_cluster_spec
from tests.service import policies  # noqa: F401  (test-elastic: min for everyone, the rest to the oldest)
from tests.service.teardown import stop_service_and_jobs
from tests.waiting import wait_until

ENSEMBLE = """name: sweep
dataset: {kind: synthetic, train: 384, val: 64}
batch_size: 32
convergence: {patience: 100, min_delta: 0.0, max_epochs: 4}
rate_tolerance: 0.99
models:
  - {name: tiny4, model: "%(m)s:TinyCNN", kwargs: {width: 4}, max_workers: 2}
  - {name: wide, model: "%(slow)s:SlowWideCNN", kwargs: {width: 4, step_s: 0.1}, max_workers: 4, max_epochs: 20}
  - {name: strided, model: "%(m)s:StridedCNN", kwargs: {width: 4}}
  - {name: mlp, model: "%(m)s:MLPHead", kwargs: {hidden: 16}, max_epochs: 2}
"""
JOB = """name: {name}
kind: ensemble
entry: examples/ensemble/ensemble_job.py:from_yaml
params: {{path: {path}}}
gpus: 1
min_gpus: 1
max_gpus: 4
"""
ORDINARY = """name: {name}
entry: tests/service/held_job.py:make_job
gpus: 1
batch_size: 32
params: {{gate: {gate}, num_samples: 320, epochs: 1}}
"""


@pytest.mark.slow
def test_ensemble_job_shares_the_cluster_grows_when_others_finish_and_every_member_converges(tmp_path, monkeypatch):
    monkeypatch.setenv("DLSCHED_PROFILE_CACHE", str(tmp_path / "cache"))
    # wide takes >= 20 epochs x 12 steps x 0.1 s: it is still training when the ordinary jobs have finished, and it
    # alone can use the 4 slots (max_workers 4; the policy sees an ensemble capped to what its members can use)
    (tmp_path / "ens.yaml").write_text(ENSEMBLE % {"m": REPO_ROOT / "examples" / "ensemble" / "models.py",
                                                   "slow": REPO_ROOT / "tests" / "train" / "slow_models.py"})
    gate = tmp_path / "gate"
    cluster = load_cluster_spec("nodes: [{name: n0, gpus: 4}]\npolicy: test-elastic\ninterval_s: 0.3")
    svc = Service(cluster, tmp_path / "state", port=0, workdir=REPO_ROOT,
                  entry_roots=(REPO_ROOT, tmp_path)).start()     # the ensemble YAML is job code: allowed here
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)

        def submit(body):
            return c.post("/jobs", content=body, headers={"content-type": "application/yaml"}).json()["id"]

        ordinary = [submit(ORDINARY.format(name=f"ordinary{i}", gate=gate)) for i in range(2)]
        ens = submit(JOB.format(name="sweep", path=tmp_path / "ens.yaml"))

        def plans():
            return [e["detail"] for e in c.get(f"/jobs/{ens}/events").json() if e["kind"] == "job_flotillas"]

        def seen() -> list:
            """What a failed wait shows: every job, the ensemble's events, the end of its log and its processes."""
            try:
                runtime = psutil.Process(read_status(tmp_path / "state" / "jobs" / str(ens))["pid"])
                procs = [(p.pid, p.status(), p.cpu_times()[:2], " ".join(p.cmdline())[-80:])
                         for p in [runtime, *runtime.children(recursive=True)]]
            except (TypeError, KeyError, psutil.Error) as e:   # no status.json yet: None
                procs = [repr(e)]
            return ([(j["name"], j["state"], j["num_gpus"], j["error"]) for j in c.get("/jobs").json()]
                    + [(round(e["time"] - t0, 1), e["kind"], e["detail"]) for e in c.get(f"/jobs/{ens}/events").json()]
                    + [c.get(f"/jobs/{ens}/logs").text[-3000:]] + procs)

        t0 = time.time()
        try:   # within the test's 300 s (pytest-timeout), so that a miss shows what the job was doing
            wait_until(lambda: plans(), 200, "the ensemble's first flotillas")
        except AssertionError as e:
            raise AssertionError([str(e)] + seen()) from None
        assert plans()[0]["share"] == 2                         # 4 slots - 1 - 1 for the ordinary jobs
        assert sum(sum(f["members"].values()) for f in plans()[0]["flotillas"]) <= 2
        shown = c.get(f"/jobs/{ens}").json()["ensemble"]
        assert set(shown["members"]) == {"tiny4", "wide", "strided", "mlp"} and shown["flotillas"]
        assert "converged" in summary(shown)
        gate.touch()                                            # the ordinary jobs finish; the share grows
        try:
            wait_until(lambda: any(p["share"] == 4 for p in plans()), 180, "a re-plan inside the grown share")
        except AssertionError as e:
            raise AssertionError([str(e)] + seen() + [c.get(f"/jobs/{ens}").json()["allocations"]]
                                 + [e for e in c.get("/events").json()][-30:]) from None

        def states():
            return {j["id"]: j["state"] for j in c.get("/jobs").json()}
        wait_until(lambda: all(s in ("finished", "failed", "cancelled") for s in states().values()), 300, "all jobs done")
        jobs = {j["id"]: j for j in c.get("/jobs").json()}
        assert [jobs[i]["state"] for i in (*ordinary, ens)] == ["finished"] * 3, [(j["name"], j["error"]) for j in jobs.values()]
        shown = c.get(f"/jobs/{ens}").json()
        assert set(shown["ensemble"]["members"].values()) == {"stopped at max_epochs"}
        assert shown["fraction_done"] == 1.0 and job_rows([shown])[0][5] == "100.0%"   # `dlsched status`'s DONE
        grants = [a["num_gpus"] for a in shown["allocations"]]
        assert grants[0] == 2 and 4 in grants                  # each ordinary job's slot went to the ensemble
        assert c.get(f"/jobs/{ens}/logs").status_code == 200
    finally:
        stop_service_and_jobs(svc)
