"""An ensemble's DONE and LEFT follow its members' measured progress, not the profiles their flotillas were planned
on: a 2-worker member profiled at 911 samples/s trained at 506-525, and `dlsched status` showed it done and
``LEFT -0s`` for 20 s while it still trained. Real service over HTTP, real SQLite, the real FLEET runtime: a member
whose profile runs far faster than it trains (``ProfiledFastCNN``)."""
import time

import httpx

from dlsched.commands.service import job_rows
from dlsched.paths import REPO_ROOT
from dlsched.service.server import Service
from dlsched.spec import load_cluster_spec
from tests.service import policies  # noqa: F401  (test-fifo)
from tests.service.teardown import stop_service_and_jobs
from tests.waiting import wait_until

STEPS = 60   # 6 epochs of 10 steps; past its 8th step in a process, 0.2 s a step (~160 samples/s)
ENSEMBLE = """name: slowed
dataset: {kind: synthetic, train: 320, val: 32}
batch_size: 32
convergence: {patience: 100, min_delta: 0.0, max_epochs: 6}
models:
  - {name: slowed, model: "%s:ProfiledFastCNN", kwargs: {width: 4, step_s: 0.2}}
"""
JOB = "name: slowed\nkind: ensemble\nentry: examples/ensemble/ensemble_job.py:from_yaml\nparams: {path: %s}\ngpus: 1\n"


def test_an_ensembles_done_and_left_follow_its_members_measured_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("DLSCHED_PROFILE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "ens.yaml").write_text(ENSEMBLE % (REPO_ROOT / "tests" / "train" / "slow_models.py"))
    cluster = load_cluster_spec("nodes: [{name: n0, gpus: 1}]\npolicy: test-fifo\ninterval_s: 0.3")
    svc = Service(cluster, tmp_path / "state", port=0, workdir=REPO_ROOT, entry_roots=(REPO_ROOT, tmp_path)).start()
    try:
        c = httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30)
        ens = c.post("/jobs", content=JOB % (tmp_path / "ens.yaml"),
                     headers={"content-type": "application/yaml"}).json()["id"]
        cap = STEPS * 32
        lefts = []

        def measured_view():
            """The job while it trains its second half: DONE within 15 points of the samples it trained, and LEFT at
            least a third of what its remaining steps take at 0.2 s (the profile's rate said ~0)."""
            j = c.get(f"/jobs/{ens}").json()
            now = time.time()
            lefts.append(job_rows([j], now)[0][9])
            if j["state"] != "running" or not 30 * 32 <= (j["samples"] or 0) < 45 * 32:
                return j["state"] in ("finished", "failed") and ("ended", j["state"], j["fraction_done"])
            left_s = (j["predicted_finish"] or now) - now
            ok = abs(j["fraction_done"] - j["samples"] / cap) < 0.15 and left_s > (cap - j["samples"]) / 160 / 3
            return ok and (j["fraction_done"], j["samples"] / cap, left_s)

        seen = wait_until(measured_view, 120, "the ensemble's second half", every=0.3)
        assert seen[0] != "ended", seen
        wait_until(lambda: c.get(f"/jobs/{ens}").json()["state"] == "finished", 120, "the ensemble's end")
        # `dlsched status`'s LEFT never went negative meanwhile
        assert not [x for x in lefts if x.startswith("-") and x != "-"], lefts
        profiled = [e for e in c.get(f"/jobs/{ens}/events").json() if e["kind"] == "job_profiled"]
        assert profiled[0]["detail"]["profiles"][0]["rates"][0] > 3 * 160   # the profile did run far faster
    finally:
        stop_service_and_jobs(svc)
