"""An ensemble job's members that leave free their slots for the other jobs: the live policy sees the ensemble
capped to what its still-training members can use (each its max_workers), as the forecast already rolled it
forward. It used to keep its whole share: next to another tenant's job (the policy gives the oldest job the
rest, up to its max_gpus) it held 3 slots for two 1-worker members, and still 3 with one left. Real service, real SQLite, real runtime processes."""
import httpx
import pytest

from dlsched.paths import REPO_ROOT
from dlsched.service.server import Service
from dlsched.spec import load_cluster_spec
from tests.service import policies  # noqa: F401  (test-elastic: min for everyone, the rest to the oldest)
from tests.service.teardown import stop_service_and_jobs
from tests.waiting import wait_until

ENSEMBLE = """name: leave
dataset: {kind: synthetic, train: 256, val: 32}
batch_size: 32
convergence: {patience: 1000, min_delta: 0.0, max_epochs: 1}
models:
  - {name: slow, model: "%(slow)s:SlowWideCNN", kwargs: {width: 4, step_s: 0.05}, max_epochs: 1000}
  - {name: quick, model: "%(m)s:MLPHead", kwargs: {hidden: 8}}
"""
JOB = "name: ens\nkind: ensemble\nentry: dlsched.train.fleet_spec:from_yaml\nparams: {path: %s}\ngpus: 1\nmin_gpus: 1\nmax_gpus: 4\n"
OTHER = """name: other
entry: tests/service/held_job.py:make_job
gpus: 1
min_gpus: 1
max_gpus: 4
batch_size: 32
params: {gate: %s, num_samples: 320, epochs: 1}
"""


@pytest.mark.slow
def test_members_that_leave_free_their_slots_for_another_tenant(tmp_path, monkeypatch):
    monkeypatch.setenv("DLSCHED_PROFILE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "ens.yaml").write_text(ENSEMBLE % {"m": REPO_ROOT / "examples" / "ensemble" / "models.py",
                                                   "slow": REPO_ROOT / "tests" / "train" / "slow_models.py"})
    svc = Service(load_cluster_spec("nodes: [{name: n0, gpus: 4}]\npolicy: test-elastic\ninterval_s: 0.3"),
                  tmp_path / "state", port=0, workdir=REPO_ROOT, entry_roots=(REPO_ROOT, tmp_path)).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        post = {"content-type": "application/yaml"}
        ens = c.post("/jobs", content=JOB % (tmp_path / "ens.yaml"), headers=post).json()["id"]
        other = c.post("/jobs", content=OTHER % (tmp_path / "gate"), headers=post).json()["id"]

        def gpus(job):
            return c.get(f"/jobs/{job}").json()["num_gpus"]

        def members():
            return (c.get(f"/jobs/{ens}").json()["ensemble"] or {}).get("members", {})

        # quick leaves after its one epoch; slow, one worker, trains on (1000 epochs): the ensemble keeps one slot
        wait_until(lambda: members().get("quick") == "stopped at max_epochs", 240, "quick to leave")
        assert members()["slow"] in ("training", "waiting")
        wait_until(lambda: gpus(ens) == 1, 60, "the ensemble down to its one still-training member's slot")
        grants = [a["num_gpus"] for a in c.get(f"/jobs/{ens}").json()["allocations"]]
        assert max(grants[1:]) <= 2 and gpus(other) == 1     # after its first start, never past its 2 members' 2
        assert members()["slow"] == "training"                # the shrink re-planned it, it trains on
        assert c.post(f"/jobs/{ens}/cancel").status_code == 200
        wait_until(lambda: c.get(f"/jobs/{ens}").json()["state"] == "cancelled", 60, "the ensemble cancelled")
    finally:
        stop_service_and_jobs(svc)
