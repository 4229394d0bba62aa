"""The REST API over real HTTP (uvicorn on a free loopback port) and a real SQLite store."""
import json
import random
import time

import httpx
import numpy as np
import pytest

from tests.service.teardown import stop_service_and_jobs
from dlsched.errors import UserError
from dlsched.service.server import Service, free_port
from dlsched.service.limits import MAX_PROGRESS_PAGE
from tests.service.conftest import RUNTIME, cluster, job_yaml
from tests.waiting import wait_until

YAML = {"content-type": "application/yaml"}


def wait_state(client, job_id, states, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        j = client.get(f"/jobs/{job_id}").json()
        if j["state"] in states:
            return j
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} stuck in {j['state']}")


def test_predictions_are_paged_as_progress_is(service, client):
    """``GET /jobs/{id}/predictions`` had no default limit: a month-long job (a refit a minute) answered all 43 000
    of them, 26 MB. It answers the first 1 000 by default, 5 000 at most, ``X-Next-After`` naming the next page."""
    from dlsched.service.limits import DEFAULT_PREDICTIONS_PAGE, MAX_PREDICTIONS_PAGE

    jid = client.post("/jobs", content=job_yaml("a", samples=64), headers=YAML).json()["id"]
    client.post(f"/jobs/{jid}/cancel")
    wait_state(client, jid, ("cancelled", "finished"))   # nothing refits it any more: its rows are the test's
    store, t0 = service.store, time.time()
    with store.batch():   # a minute apart: each one is kept (store.KEEP_EVERY_S)
        for i in range(MAX_PREDICTIONS_PAGE + 10):
            store.add_prediction(jid, t0 + 60.0 * i, i / 10**5, 640, 1.0, t0, None)
    every = store.predictions(jid)
    first = client.get(f"/jobs/{jid}/predictions")
    assert [p["id"] for p in first.json()] == [p["id"] for p in every[:DEFAULT_PREDICTIONS_PAGE]]
    assert first.headers["x-next-after"] == str(every[DEFAULT_PREDICTIONS_PAGE - 1]["id"])
    big = client.get(f"/jobs/{jid}/predictions", params={"limit": 10**6})
    assert len(big.json()) == MAX_PREDICTIONS_PAGE
    paged, after = [], None
    while True:   # followed to the end as the CLI follows events: every row once, in order, no header on the last
        page = client.get(f"/jobs/{jid}/predictions", params={"after": after or 0, "limit": 2000})
        paged += page.json()
        if (after := page.headers.get("x-next-after")) is None:
            break
    assert paged == every
    assert client.get(f"/jobs/{jid}/predictions", params={"limit": 0}).status_code == 422


def test_submit_list_show_logs_events_predictions(client):
    r = client.post("/jobs", content=job_yaml("a", samples=640, step_s=0.05), headers=YAML)
    assert r.status_code == 201 and r.json()["state"] == "queued"
    jid = r.json()["id"]
    body = json.dumps({"name": "b", "entry": "x.py:make_job", "gpus": 1, "params": {"samples": 64}})
    assert client.post("/jobs", content=body, headers={"content-type": "application/json"}).status_code == 201
    assert [j["name"] for j in client.get("/jobs").json()] == ["a", "b"]
    j = wait_state(client, jid, ("finished",))
    assert j["fraction_done"] == 1.0 and j["allocations"][0]["num_gpus"] == 1 and j["start_time"] is not None
    kinds = [e["kind"] for e in client.get(f"/jobs/{jid}/events").json()]
    assert kinds[0] == "submitted" and "running" in kinds and kinds[-1] == "finished"
    preds = client.get(f"/jobs/{jid}/predictions").json()
    assert preds and preds[-1]["total_samples"] == 640
    assert any(p["predicted_finish"] for p in preds)
    # page one at a time to the end. The loop may still store a refit of the finished job meanwhile, and a new row
    # takes the drawn curve off the one before (Store keeps it on the newest only): so the pages are compared with
    # the whole list read after them, up to the last id paged, each row without its curve
    paged = client.get(f"/jobs/{jid}/predictions", params={"limit": 1}).json()
    while page := client.get(f"/jobs/{jid}/predictions", params={"after": paged[-1]["id"], "limit": 1}).json():
        paged += page
    after = client.get(f"/jobs/{jid}/predictions").json()

    def without_curve(rows):
        return [{**p, "loss_fit": {k: v for k, v in (p["loss_fit"] or {}).items() if k != "curve"}} for p in rows]

    assert without_curve(paged) == without_curve([p for p in after if p["id"] <= paged[-1]["id"]])
    assert without_curve(paged[:len(preds)]) == without_curve(preds)
    logs = client.get(f"/jobs/{jid}/logs")
    assert "start:" in logs.text and int(logs.headers["x-next-offset"]) == len(logs.content)
    assert client.get(f"/jobs/{jid}/logs", params={"offset": logs.headers["x-next-offset"]}).text == ""
    rows = client.get(f"/jobs/{jid}/progress").json()
    # every row with its id, however asked for (a first page's rows had none, a followed page's had): one row read
    # two ways is equal, and a client follows on from any row it read
    assert rows[-1]["samples"] == 640 and all(isinstance(r["id"], int) for r in rows)
    followed = client.get(f"/jobs/{jid}/progress", params={"after": 0}).json()
    assert followed == rows
    assert client.get(f"/jobs/{jid}/progress", params={"after": rows[-2]["id"]}).json() == rows[-1:]
    drawn = client.get(f"/jobs/{jid}/progress", params={"points": 2}).json()
    assert 2 <= len(drawn) <= 3 and drawn[0] == rows[0] and drawn[-1] == rows[-1]
    assert client.get(f"/jobs/{jid}/progress", params={"points": 0}).status_code == 422
    # a page at a time: a job that ran for months has a row a step, all of them were one answer
    first = client.get(f"/jobs/{jid}/progress", params={"limit": 2})
    assert first.json() == rows[:2] and first.headers["x-next-after"] == str(followed[1]["id"])
    paged, after = first.json(), first.headers.get("x-next-after")
    while after is not None:
        page = client.get(f"/jobs/{jid}/progress", params={"after": after, "limit": 2})
        paged += page.json()
        after = page.headers.get("x-next-after")
    assert paged == rows and "x-next-after" not in client.get(f"/jobs/{jid}/progress").headers
    assert client.get("/cluster").json()["nodes"][0]["gpus"] == 2


def test_cancel_queued_and_running(client):
    big = client.post("/jobs", content=job_yaml("big", gpus=4, samples=100000, step_s=0.05), headers=YAML).json()["id"]
    waiting = client.post("/jobs", content=job_yaml("w", gpus=4), headers=YAML).json()["id"]
    wait_state(client, big, ("running",))
    end = time.monotonic() + 20
    while client.get(f"/jobs/{big}").json()["samples"] == 0 and time.monotonic() < end:
        time.sleep(0.05)
    assert client.post(f"/jobs/{waiting}/cancel").json()["state"] == "cancelled"
    assert client.delete(f"/jobs/{big}").json()["cancel_requested"] is True
    j = wait_state(client, big, ("cancelled",))
    assert j["num_gpus"] == 0 and 0 < j["samples"] < 100000
    assert client.post("/jobs/9999/cancel").json() == {"error": "no job 9999"}
    # an ended job has nothing to cancel: 409 by either route, as `dlsched cancel` (exit 1) says it
    for r in (client.post(f"/jobs/{waiting}/cancel"), client.delete(f"/jobs/{big}")):
        assert r.status_code == 409 and r.json()["error"].endswith("already cancelled; nothing to cancel"), r.text


def test_a_batch_is_stored_all_or_none_and_a_refusal_names_its_place(client):
    """``POST /jobs/batch``: every spec checked before any is stored; the first refused is ``jobs[i]`` with its index."""
    good = {"name": "g", "entry": "x.py:make_job", "gpus": 1, "params": {"samples": 10**6}}
    batch = lambda *jobs: json.dumps({"jobs": list(jobs)})   # noqa: E731
    post = lambda body, ctype="application/json": client.post("/jobs/batch", content=body,   # noqa: E731
                                                              headers={"content-type": ctype})
    for bad, index, needle in ((dict(good, gpus=5), 1, "jobs[1]: field gpus: needs 5 GPUs, the cluster has 4"),
                               (dict(good, entry="os:system"), 1, "jobs[1]: field entry: 'os:system' imports module"),
                               (dict(good, gpus="2"), 1, "jobs[1]: field gpus: Input should be a valid integer")):
        r = post(batch(good, bad, good))
        assert r.status_code == 422 and r.json()["index"] == index and r.json()["error"].startswith(needle), r.text
    r = post(batch(dict(good, gpus=9), good))
    assert r.status_code == 422 and r.json()["index"] == 0 and r.json()["error"].startswith("jobs[0]: ")
    assert client.get("/jobs").json() == []                       # none of them
    for body, needle in (("[]", "expected a mapping with one field, jobs"), ('{"jobs": []}', "expected 1..100"),
                         (json.dumps({"jobs": [good] * 101}), "got 101"), ('{"jobs": [1]}', "jobs[0]: expected a mapping"),
                         (json.dumps({"jobs": [good], "x": 1}), "expected a mapping with one field")):
        r = post(body)
        assert r.status_code == 422 and needle in r.json()["error"], r.text
    assert post(batch(good), "text/plain").status_code == 415
    assert client.get("/jobs").json() == []
    r = post(f"jobs:\n  - {{name: a, entry: 'x.py:make_job', params: {{samples: {10**6}}}}}\n  - {{name: b, "
             f"entry: 'x.py:make_job', gpus: 2, params: {{samples: {10**6}}}}}\n", "application/yaml")
    assert r.status_code == 201, r.text
    assert r.json() == {"jobs": [{"id": 1, "name": "a", "state": "queued"}, {"id": 2, "name": "b", "state": "queued"}]}
    assert [(j["id"], j["name"], j["spec"]["gpus"]) for j in client.get("/jobs").json()] == [(1, "a", 1), (2, "b", 2)]
    kinds = [e["kind"] for e in client.get("/events").json() if e["job_id"] is not None]
    assert kinds.count("submitted") == 2


def _fuzz_bodies(n, rng):
    """Malformed job specs of many kinds (wrong types, negative/huge numbers, unknown fields, bad encodings)."""
    good = {"name": "f", "entry": "x.py:make_job", "gpus": 1, "batch_size": 32, "params": {"samples": 64}}
    count = ["4", 4.5, True, -1, 0, -10**9, 10**30, [], {}, "x" * 300]
    bad = {"name": [4, None, "", "a b", "x" * 300, [], True], "entry": [None, "no-colon", "a:1x", "x" * 500, 3],
           "gpus": count + [None], "min_gpus": count, "max_gpus": count, "batch_size": count, "max_local_batch": count,
           "total_samples": count, "kind": ["serve", 1, None], "preemptible": ["yes", 1, None], "params": [[], "p", 3]}
    out = []
    for i in range(n):
        kind = i % 8
        doc = dict(good)
        if kind == 0:
            field = rng.choice(sorted(bad))
            doc[field] = rng.choice(bad[field])
            out.append(("application/json", json.dumps(doc).encode()))
        elif kind == 1:
            doc[f"unknown_{rng.randrange(10**6)}"] = rng.randrange(100)
            out.append(("application/yaml", json.dumps(doc).encode()))
        elif kind == 2:
            doc["gpus"] = -rng.randrange(1, 10**6)
            out.append(("application/json", json.dumps(doc).encode()))
        elif kind == 3:
            doc[rng.choice(["gpus", "batch_size", "total_samples", "max_gpus"])] = 10 ** rng.randrange(19, 400)
            out.append(("application/yaml", json.dumps(doc).encode()))
        elif kind == 4:
            raw = bytearray(json.dumps(good).encode())
            raw[rng.randrange(len(raw))] = rng.choice([0xff, 0xfe, 0xc3, 0x80])
            out.append(("application/yaml", bytes(raw)))
        elif kind == 5:
            raw = json.dumps(good).encode()
            cut = raw[: rng.randrange(1, len(raw) - 1)]
            out.append((rng.choice(["application/json", "application/yaml"]), cut + rng.choice([b"", b"{", b"\x00"])))
        elif kind == 6:
            doc["params"] = {"x": {"nested": [1, 2]}} if rng.random() < 0.5 else {"bad key": 1}
            out.append(("application/json", json.dumps(doc).encode()))
        else:
            out.append((rng.choice(["application/json", "application/yaml"]),
                        rng.choice([b"[1, 2, 3]", b"42", b"null", b"- a\n- b", b"{{{", b"'str'"])))
    return out


def test_the_service_forecasts_when_a_waiting_job_starts(tmp_path):
    """The loop thread's forecast thread rolls the policy forward: the waiting job's predicted start is the
    running job's forecast finish, served by GET /jobs."""
    svc = Service(cluster(), tmp_path / "f", port=0, runtime=RUNTIME)
    svc.loop.forecaster.every_s = 0.3
    svc.start()
    try:
        with httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30) as c:
            a = c.post("/jobs", content=job_yaml("a", gpus=4, samples=6400, step_s=0.02), headers=YAML).json()["id"]
            b = c.post("/jobs", content=job_yaml("b", gpus=4, samples=64), headers=YAML).json()["id"]
            end, jobs = time.monotonic() + 30, {}
            while time.monotonic() < end:
                jobs = {j["id"]: j for j in c.get("/jobs").json()}
                if jobs[a]["state"] == "running" and jobs[b]["predicted_start"] and jobs[a]["predicted_finish"]:
                    break
                time.sleep(0.1)
            assert jobs[b]["state"] == "queued" and jobs[b]["predicted_start"] == pytest.approx(jobs[a]["predicted_finish"])
            assert jobs[a]["predicted_start"] == jobs[a]["start_time"]
    finally:
        stop_service_and_jobs(svc)


def test_fuzzed_malformed_specs_are_refused_and_change_nothing(service, client):
    client.post("/jobs", content=job_yaml("ok"), headers=YAML)
    wait_state(client, 1, ("finished",))
    # the round that saw it finish writes its last refit after the state: let that round and one more end
    seen = service.thread.rounds
    wait_until(lambda: service.thread.rounds >= seen + 2, timeout=60, what="two loop rounds after the finish")
    before = service.store.snapshot()
    rng = random.Random(7)
    bodies = _fuzz_bodies(995, rng)
    bodies += [("application/yaml", b"x" * (10 << 20)), ("application/json", b"{" * (2 << 20)),
               ("application/xml", b"<job/>"), ("application/json", b"[" * 100000 + b"]" * 100000),
               ("application/yaml", b"a: &a [*a, *a]")]
    statuses = {}
    for ctype, body in bodies:
        r = client.post("/jobs", content=body, headers={"content-type": ctype})
        assert 400 <= r.status_code < 500, (r.status_code, body[:80], r.text)
        msg = r.json()["error"]
        assert msg and "\n" not in msg and len(msg) <= 500
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
    assert sum(statuses.values()) == 1000 and statuses.get(413) == 2
    assert service.store.snapshot() == before
    assert client.get("/healthz").json()["ok"] is True     # still up
    assert client.post("/jobs", content=job_yaml("after"), headers=YAML).status_code == 201


def test_jobs_that_can_never_run_are_refused_at_submit(service, client, tmp_path):
    r = client.post("/jobs", content=job_yaml("huge", gpus=5), headers=YAML)
    assert r.status_code == 422 and r.json()["error"] == "request body: field gpus: needs 5 GPUs, the cluster has 4"
    assert service.store.count() == 0
    svc = Service(cluster("elastic"), tmp_path / "e", port=0, runtime=RUNTIME).start()
    try:
        bad = "name: nobatch\nentry: x.py:make_job\ngpus: 1\nmax_gpus: 2\nmax_local_batch: 8\nmin_batch_size: 64\nmax_batch_size: 64\n"
        r = httpx.post(f"{svc.url}/jobs", content=bad, headers=YAML | svc.headers)
        assert r.status_code == 422 and r.json()["error"].startswith("request body: policy elastic: job 'nobatch'")
    finally:
        svc.close()


def test_chunked_upload_cannot_bypass_the_size_limit(client):
    def gen():
        for _ in range(12):
            yield b"x" * (1 << 20)
    r = client.post("/jobs", content=gen(), headers=YAML)
    assert r.status_code == 413 and "exceeds" in r.json()["error"]


def test_burst_of_500_submissions_all_stored(service, client):
    lat = []
    ids = []
    for i in range(500):
        t = time.perf_counter()
        r = client.post("/jobs", content=job_yaml(f"b{i}", gpus=4, samples=32), headers=YAML)
        lat.append(time.perf_counter() - t)
        assert r.status_code == 201
        ids.append(r.json()["id"])
    assert len(set(ids)) == 500 and service.store.count() == 500
    print(f"\n500 submissions: p50 {1e3 * np.percentile(lat, 50):.1f} ms, p99 {1e3 * np.percentile(lat, 99):.1f} ms")


def test_non_loopback_bind_needs_a_token(tmp_path):
    with pytest.raises(UserError, match="--no-auth is for a loopback bind only"):
        Service(cluster(), tmp_path / "s", host="0.0.0.0", port=0, runtime=RUNTIME, auth=False)
    token = "s3cret-token-0123456789"
    svc = Service(cluster(), tmp_path / "s", host="0.0.0.0", port=free_port("0.0.0.0"), token=token,
                  runtime=RUNTIME).start()
    try:
        url = f"http://127.0.0.1:{svc.port}"
        assert httpx.get(f"{url}/jobs").status_code == 401
        assert httpx.get(f"{url}/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        r = httpx.post(f"{url}/jobs", content=job_yaml("x"), headers=YAML)
        assert r.status_code == 401 and svc.store.count() == 0
        assert httpx.get(f"{url}/jobs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert httpx.get(f"{url}/jobs", headers={"Authorization": f"bearer {token}"}).status_code == 200   # any case
        assert httpx.get(f"{url}/jobs", headers={"Authorization": f"Basic {token}"}).status_code == 401
    finally:
        stop_service_and_jobs(svc)


def test_a_nan_metric_is_null_not_a_500(service, client):
    """A diverging script reports ``loss=nan`` (or its evaluation does): the value reached the job's events, and
    /jobs/ID/events, /events and the dashboard's job page answered 500 ("Out of range float values")."""
    jid = client.post("/jobs", content=job_yaml("nan", samples=64), headers=YAML).json()["id"]
    service.store.event("metrics", jid, metrics={"val_loss": float("nan"), "acc": float("inf"), "ok": 0.5})
    for path in (f"/jobs/{jid}/events", "/events", f"/dashboard/api/jobs/{jid}"):
        r = client.get(path)
        assert r.status_code == 200, (path, r.text[:300])
    detail = [e["detail"] for e in client.get(f"/jobs/{jid}/events").json() if e["kind"] == "metrics"]
    assert detail == [{"metrics": {"val_loss": None, "acc": None, "ok": 0.5}}]


def test_an_unknown_state_filter_is_a_422_naming_it_not_an_empty_list(client):
    r = client.get("/jobs", params={"state": "runing"})
    assert r.status_code == 422 and "'runing' is not one of queued, running" in r.json()["error"], r.text
    assert client.get("/jobs", params={"state": "queued,finished"}).status_code == 200


def test_a_resize_outside_the_jobs_own_gpu_range_is_a_422_naming_the_limit_and_changes_nothing(client):
    """The cluster's slots were the only bound: a job with max_gpus 2 was held at 4 workers (and a rigid 2-GPU job
    at 1), outside the range its spec, and its code, were written for."""
    elastic = client.post("/jobs", content=job_yaml("el", gpus=1, max_gpus=2, samples=10**6, step_s=0.05),
                          headers=YAML).json()["id"]
    rigid = client.post("/jobs", content=job_yaml("rigid", gpus=2, samples=10**6, step_s=0.05),
                        headers=YAML).json()["id"]
    for job, workers, line in [(elastic, 3, "workers: 3 is above the job's max_gpus=2 (its spec allows 1..2)"),
                               (rigid, 1, "workers: 1 is below the job's gpus=2 (its spec allows 2..2)"),
                               (rigid, 4, "workers: 4 is above the job's gpus=2 (its spec allows 2..2)")]:
        r = client.post(f"/jobs/{job}/resize", json={"workers": workers})
        assert r.status_code == 422 and r.json() == {"error": line}, r.text
    for job in (elastic, rigid):
        assert client.get(f"/jobs/{job}").json()["requested_workers"] is None
        assert "resize_requested" not in [e["kind"] for e in client.get(f"/jobs/{job}/events").json()]
    r = client.post(f"/jobs/{elastic}/resize", json={"workers": 2})
    assert r.status_code == 200 and r.json()["requested_workers"] == 2, r.text
    assert client.post("/jobs/999/resize", json={"workers": 1}).status_code == 404


def test_a_resize_outside_the_jobs_own_batch_range_is_a_422_naming_the_field_and_changes_nothing(client):
    """Only the global MAX_BATCH bounded a resize's batch: a job written for batches 16..64 (or a fixed 32) was held
    at 4096."""
    ranged = client.post("/jobs", content=job_yaml("ranged", gpus=1, max_gpus=2, samples=10**6, step_s=0.05,
                                                   extra="min_batch_size: 16\nmax_batch_size: 64\n"),
                         headers=YAML).json()["id"]
    fixed = client.post("/jobs", content=job_yaml("fixed", gpus=1, samples=10**6, step_s=0.05), headers=YAML).json()["id"]
    free = client.post("/jobs", content="name: free\nentry: x.py:make_job\ngpus: 1\nparams: {samples: 1000000}\n",
                       headers=YAML).json()["id"]
    for job, body, line in [
            (ranged, {"workers": 1, "batch_size": 4096},
             "batch_size: 4096 is above the job's max_batch_size=64 (its spec allows 16..64)"),
            (ranged, {"workers": 2, "batch_size": 8}, "batch_size: 8 is below the job's min_batch_size=16 (its spec allows 16..64)"),
            (fixed, {"workers": 1, "batch_size": 64}, "batch_size: 64 is above the job's batch_size=32 (its spec allows 32..32)"),
            (ranged, {"workers": 3, "batch_size": 4096}, "workers: 3 is above the job's max_gpus=2 (its spec allows 1..2)")]:
        r = client.post(f"/jobs/{job}/resize", json=body)
        assert r.status_code == 422 and r.json() == {"error": line}, r.text
    for job in (ranged, fixed):
        assert client.get(f"/jobs/{job}").json()["requested_batch"] is None
        assert "resize_requested" not in [e["kind"] for e in client.get(f"/jobs/{job}/events").json()]
    for job, batch in [(ranged, 16), (ranged, 64), (fixed, 32), (free, 48)]:   # a spec with no batch declares no range
        r = client.post(f"/jobs/{job}/resize", json={"workers": 1, "batch_size": batch})
        assert r.status_code == 200 and r.json()["requested_batch"] == batch, r.text
        assert client.get(f"/jobs/{job}").json()["requested_batch"] == batch


def test_a_database_locked_past_the_busy_timeout_is_a_503_and_nothing_is_stored(tmp_path, monkeypatch, capsys):
    """An sqlite3 shell (or a backup tool) holding the write lock: a submission waited 30 s, then answered a bare 500
    'Internal Server Error', and the CLI, which had given up at 10 s, said the service could not be reached (the job
    might have been stored; a retry could submit it twice)."""
    import logging
    import sqlite3
    import threading

    from dlsched.commands import service as service_commands
    from dlsched.commands.service import Client
    from dlsched.service import store as store_module

    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.5)
    svc = Service(cluster(), tmp_path / "state", port=0, runtime=RUNTIME).start()
    try:
        holder = sqlite3.connect(svc.state_dir / "dlsched.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")   # what `sqlite3 dlsched.db` + BEGIN, or a locking backup, holds
        with httpx.Client(base_url=svc.url, headers=svc.headers, timeout=30) as c:
            r = c.post("/jobs", content=job_yaml("a"), headers=YAML)
            assert r.status_code == 503 and r.headers["retry-after"] == "10"
            assert r.json()["error"] == ("the service's database stayed locked for 0.5 s (another process holds it: an "
                                         "sqlite3 shell, a backup?); nothing was changed: retry when it is fixed")
            holder.execute("ROLLBACK")
            assert c.get("/jobs").json() == []                     # nothing was stored
            assert c.post("/jobs", content=job_yaml("a"), headers=YAML).status_code == 201   # and it writes again
        # the CLI says it retries, and its retry stores the job once the lock is gone, once
        refused = threading.Event()

        class Refusals(logging.Handler):
            def emit(self, record):
                if record.getMessage().startswith("API request refused"):
                    refused.set()

        handler = Refusals()
        logging.getLogger("dlsched.service").addHandler(handler)
        holder.execute("BEGIN IMMEDIATE")
        client, answers = Client(svc.url, svc.token), []
        submit = threading.Thread(target=lambda: answers.append(client.submit(job_yaml("b").encode(), "yaml")))
        submit.start()
        assert refused.wait(60)
        holder.execute("ROLLBACK")
        submit.join(60)
        logging.getLogger("dlsched.service").removeHandler(handler)
        assert answers and [j["name"] for j in client.http.get("/jobs").json()] == ["a", "b"]
        assert "HTTP 503: the service's database stayed locked for 0.5 s" in capsys.readouterr().err
        holder.execute("BEGIN IMMEDIATE")   # past RETRY_S: one line
        monkeypatch.setattr(service_commands, "RETRY_S", 0.0)
        with pytest.raises(UserError, match=r"HTTP 503: the service's database stayed locked for 0.5 s"):
            client.submit(job_yaml("c").encode(), "yaml")
        holder.execute("ROLLBACK")
    finally:
        stop_service_and_jobs(svc)


def test_a_write_the_service_does_not_answer_is_said_to_maybe_have_been_done(tmp_path):
    """A submission the service took but did not answer in time may be stored: 'cannot reach the service' sent the
    user to submit it again."""
    import socket

    from dlsched.commands.service import Client
    from dlsched.service.store import BUSY_TIMEOUT_S

    with socket.socket() as listener:   # a service that accepts the connection and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = Client(f"http://127.0.0.1:{listener.getsockname()[1]}", "t" * 20, write_timeout=0.3)
        with pytest.raises(UserError) as e:
            client.submit(job_yaml("a").encode(), "yaml")
    assert str(e.value) == (f"the dlsched service at {client.base} did not answer POST /jobs within 0.3 s: it may "
                            "have carried it out; check `dlsched status` before retrying")
    assert Client(client.base, "t" * 20).write_timeout > BUSY_TIMEOUT_S   # it outwaits the lock's 503


def test_a_service_killed_before_it_answers_a_write_is_said_to_maybe_have_done_it(tmp_path):
    """`serve` killed -9 between storing a submission and answering it: the client said 'cannot reach the service (is
    it running?)', and the user submitted the job again."""
    import socket
    import threading

    from dlsched.commands.service import Client

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def die_on_the_request():   # takes the request, then goes without a word, as a killed process does
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.close()

        threading.Thread(target=die_on_the_request, daemon=True).start()
        client = Client(f"http://127.0.0.1:{listener.getsockname()[1]}", "t" * 20)
        with pytest.raises(UserError) as e:
            client.submit(job_yaml("a").encode(), "yaml")
    assert str(e.value).startswith(f"the dlsched service at {client.base} did not answer POST /jobs (")
    assert str(e.value).endswith("): it may have carried it out; check `dlsched status` before retrying")
    with pytest.raises(UserError, match=r"^cannot reach the dlsched service at .*is `dlsched serve` running"):
        client.submit(job_yaml("a").encode(), "yaml")   # nothing listens now: never sent


def test_the_service_keeps_an_idle_connection_open_past_its_clients_own_expiry():
    """Both closed an idle connection at 5 s: under load a client's next request went out on a connection the
    service was closing, and a POST met 'Connection reset by peer' (a stress run's slot-holds test)."""
    from dlsched.service.server import KEEP_ALIVE_S

    assert KEEP_ALIVE_S > httpx.Limits().keepalive_expiry


def test_an_unknown_query_parameter_is_a_422_naming_it_not_ignored(client):
    """A typo was ignored and the answer was what no parameter asks for: `/jobs/ID/progress?after_id=N` (the route's
    is `after`) answered every row from the first, `/events?job=ID` every job's events."""
    jid = client.post("/jobs", content=job_yaml("q", samples=64), headers=YAML).json()["id"]
    r = client.get(f"/jobs/{jid}/progress", params={"after_id": 5})
    assert r.status_code == 422 and r.json() == {"error": "query: unknown parameter 'after_id'; did you mean "
                                                          "'after'?"}, r.text
    r = client.get("/events", params={"job": jid})
    assert r.status_code == 422 and r.json() == {"error": "query: unknown parameter 'job' (/events takes: after, "
                                                          "limit, tail, before, kind)"}, r.text
    assert client.get(f"/jobs/{jid}/progress", params={"after": 5}).status_code == 200
    assert client.get("/jobs", params={"state": "queued,running,finished", "limit": 5}).status_code == 200
    assert client.get("/dashboard/", params={"token": "x"}).status_code == 200   # the page's own ?token=


def test_points_draws_at_most_a_pages_rows(client, service):
    """``?points=N`` with N past a job's rows answered every one of them: the paging of ``/progress`` (at most
    50 000 rows, a job that ran for months has millions) undone by a large N."""
    jid = client.post("/jobs", content=job_yaml("big"), headers={"content-type": "application/yaml"}).json()["id"]
    client.post(f"/jobs/{jid}/cancel")   # queued, it ends at once; started meanwhile, once stopped
    wait_until(lambda: client.get(f"/jobs/{jid}").json()["state"] == "cancelled", 60, "job cancelled")
    rows = MAX_PROGRESS_PAGE + 10
    service.store.add_progress(jid, [{"time": float(i), "step": i, "loss": 1.0 / (i + 1), "samples": float(i)}
                                     for i in range(rows)], 0)
    drawn = client.get(f"/jobs/{jid}/progress", params={"points": 10**9}).json()
    assert len(drawn) <= MAX_PROGRESS_PAGE + 1 and drawn[0]["step"] == 0 and drawn[-1]["step"] == rows - 1
