"""A seeded fuzz of the whole API over real HTTP: random routes, ids, queries, headers and bodies (valid specs
mutated, hostile documents, garbage). Nothing may answer 5xx or break the connection, the service stays up,
and every accepted submission is stored exactly once."""
import json
import random
import time

import httpx
import pytest

from dlsched.service.server import Service
from tests.service.conftest import RUNTIME, cluster
from tests.service.teardown import stop_service_and_jobs

REQUESTS = 1200
SEED = 20261124
GOOD = {"name": "f", "entry": "x.py:make_job", "gpus": 1, "batch_size": 32, "params": {"samples": 64}}
IDS = ["1", "2", "0", "-1", "9223372036854775807", "9223372036854775808", "1" * 40, "1e3", "0x10", "%00", "abc",
       "..%2F..%2Fetc%2Fpasswd", " 1", "1.0", "\u0661", ""]
ROUTES = ["/jobs/{id}", "/jobs/{id}/events", "/jobs/{id}/predictions", "/jobs/{id}/progress", "/jobs/{id}/logs",
          "/jobs/{id}/cancel", "/dashboard/api/jobs/{id}", "/jobs", "/events", "/cluster", "/healthz",
          "/dashboard/api/overview", "/dashboard/api/reports", "/dashboard/api/reports/image/{id}.png",
          "/dashboard/static/{id}", "/nope/{id}", "/jobs/{id}/{id}"]
QUERIES = ["", "?after={id}", "?limit={id}", "?offset={id}", "?state={id}", "?after={id}&limit={id}", "?all={id}",
           "?" + "a=1&" * 200]
CTYPES = ["application/json", "application/yaml", "text/yaml", "text/plain", "application/x-www-form-urlencoded",
          "multipart/form-data; boundary=x", "", "application/json; charset=utf-8", "APPLICATION/YAML", "x/" + "y" * 300]


def hostile_document(rng: random.Random) -> bytes:
    kind = rng.randrange(9)
    if kind == 0:
        return ("a: &a [x, x]\n" + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}]\n" for p, c in zip("abcde", "bcdef"))).encode()
    if kind == 1:
        n = rng.randrange(30, 20000)
        return rng.choice([b"[" * n + b"]" * n, b"{a: " * n + b"1" + b"}" * n, b'{"a":' * n + b"1" + b"}" * n])
    if kind == 2:
        return b"name: a\nname: b\nentry: x.py:make_job\n"
    if kind == 3:
        return f"name: x\nentry: x.py:make_job\ngpus: {'9' * rng.randrange(18, 6000)}\n".encode()
    if kind == 4:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
    if kind == 5:
        return rng.choice([b"!!python/object/apply:os.system ['id']", b"--- !!binary AAAA", b"%YAML 9.9\n---\na: 1",
                           b"? [1, 2]\n: x", b"a: !!float nan", b"\x00", b"{", b"'", b"&x", b"*x"])
    if kind == 6:
        doc = dict(GOOD, entry=rng.choice(["os:system", "/etc/passwd.py:x", "../x.py:make_job", "x.py:__init__",
                                           "x.py:" + "a" * 120, ":", "a:", ":b"]))
        return json.dumps(doc).encode()
    if kind == 7:
        return json.dumps(dict(GOOD, params={"p": [[[]]] * rng.randrange(1, 5), "q": "x" * rng.randrange(300)})).encode()
    return ("name: x\nentry: x.py:make_job\nparams: {" + ", ".join(f"k{i}: {i}" for i in range(rng.randrange(60, 80)))
            + "}\n").encode()


def mutated_spec(rng: random.Random) -> bytes:
    doc = dict(GOOD, name=f"f{rng.randrange(10**6)}")
    field = rng.choice(["gpus", "min_gpus", "max_gpus", "batch_size", "total_samples", "kind", "preemptible", "user",
                        "params", "name", "extra"])
    doc[field] = rng.choice([0, 1, 2, 4, -1, 2**63, 2**64, 1.5, "4", True, None, [], {}, "x" * 70, float("inf")])
    text = json.dumps(doc)
    if rng.random() < 0.3:
        i = rng.randrange(len(text))
        text = text[:i] + rng.choice(["", "}", "\"", "\\", "\x00", "\ud800"]) + text[i + 1:]
    return text.encode("utf-8", "surrogatepass")


def request(rng: random.Random, token: str) -> dict:
    rid = lambda: rng.choice(IDS)  # noqa: E731
    if rng.random() < 0.5:      # half are submissions: the parser is the largest surface
        path, method = "/jobs", "POST"
    else:
        path = rng.choice(ROUTES).replace("{id}", rid()) + rng.choice(QUERIES).replace("{id}", rid())
        method = rng.choices(["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"], [6, 2, 1, 1, 1, 1, 1])[0]
    headers = {}
    auth = rng.random()
    if auth < 0.85:
        headers["authorization"] = f"Bearer {token}"
    elif auth < 0.95:
        headers["authorization"] = rng.choice(["Bearer", "Bearer x", "Basic Zm9vOmJhcg==", f"Bearer {token}x", "é".encode("latin-1")])
    if rng.random() < 0.1:
        headers["origin"] = rng.choice(["http://evil.example", "null", "http://127.0.0.1", "file://", "%"])
    if rng.random() < 0.05:
        headers["host"] = rng.choice(["evil.example", "localhost", "[::1]", "127.0.0.1:1", "", "a" * 300])
    content = None
    if method in ("POST", "PUT", "PATCH") or rng.random() < 0.1:
        headers["content-type"] = rng.choice(CTYPES[:2]) if rng.random() < 0.6 else rng.choice(CTYPES)
        content = rng.choice([mutated_spec, hostile_document])(rng)
    return {"method": method, "url": path, "headers": headers, "content": content}


@pytest.fixture(scope="module")
def quiet_service(tmp_path_factory):
    """Scheduling rounds an hour apart: accepted jobs are stored, never started (the fuzz stays fast)."""
    svc = Service(cluster(interval=3600), tmp_path_factory.mktemp("fuzz") / "state", port=0,
                  runtime=RUNTIME).start()
    yield svc
    stop_service_and_jobs(svc)


def test_seeded_fuzz_of_the_api_never_answers_5xx(quiet_service):
    svc = quiet_service
    rng = random.Random(SEED)
    statuses: dict[int, int] = {}
    crashes, accepted = [], []
    t0 = time.perf_counter()
    with httpx.Client(base_url=svc.url, timeout=10) as c:
        for i in range(REQUESTS):
            req = request(rng, svc.token)
            try:
                r = c.request(**req)
            except httpx.HTTPError as e:        # a dropped connection is a crash of the request
                crashes.append((i, req["method"], req["url"][:80], repr(e)[:120]))
                continue
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            assert r.status_code < 500, (i, req["method"], req["url"][:120], req["content"] and req["content"][:120],
                                         r.status_code, r.text[:300])
            if r.status_code >= 400 and req["method"] != "HEAD":
                msg = r.json()["error"]
                assert msg and "\n" not in msg and len(msg) <= 500
            if r.status_code == 201:
                accepted.append(r.json()["id"])
        took = time.perf_counter() - t0
        health = c.get("/healthz")
    fours = sum(n for s, n in statuses.items() if 400 <= s < 500)
    fives = sum(n for s, n in statuses.items() if s >= 500)
    stored = [j.id for j in svc.store.jobs()]
    print(f"\nfuzz: requests={REQUESTS} 4xx={fours} 5xx={fives} crashes={len(crashes)} "
          f"duplicates={len(stored) - len(set(stored))} accepted={len(accepted)} in {took:.1f} s; statuses {statuses}")
    assert not crashes, crashes[:5]
    assert fives == 0 and fours >= REQUESTS // 2
    assert health.status_code == 200 and svc._uv_thread.is_alive() and svc.thread.is_alive()
    assert sorted(stored) == sorted(accepted)            # every 201 stored once, nothing else


def test_seeded_fuzz_of_batches_stores_all_of_an_accepted_one_and_nothing_of_a_refused_one(quiet_service):
    """``POST /jobs/batch`` with 1-6 specs, valid, mutated and hostile mixed (after the fuzz above: it counts the
    whole store). Never a 5xx; a 201 stores every spec of its batch, in order, and any 4xx stores none."""
    svc = quiet_service
    rng = random.Random(SEED + 1)
    outcomes = {201: 0, 422: 0}
    with httpx.Client(base_url=svc.url, headers={"authorization": f"Bearer {svc.token}"}, timeout=10) as c:
        for i in range(150):
            docs = []
            for _ in range(rng.randrange(1, 7)):
                pick = rng.random()
                if pick < 0.6:
                    docs.append(dict(GOOD, name=f"b{rng.randrange(10**6)}"))
                else:
                    raw = (mutated_spec if pick < 0.9 else hostile_document)(rng)
                    try:
                        docs.append(json.loads(raw))
                    except (ValueError, UnicodeDecodeError, RecursionError):
                        docs.append(raw.decode("latin-1"))   # a string where a spec should be
            before = svc.store.count()
            r = c.post("/jobs/batch", content=json.dumps({"jobs": docs}), headers={"content-type": "application/json"})
            assert r.status_code < 500, (i, r.status_code, r.text[:300])
            outcomes[r.status_code] = outcomes.get(r.status_code, 0) + 1
            if r.status_code == 201:
                ids = [j["id"] for j in r.json()["jobs"]]
                assert [svc.store.get(j).name for j in ids] == [d["name"] for d in docs]
                assert svc.store.count() == before + len(docs)
            else:
                assert svc.store.count() == before, (i, r.text[:300])
                body = r.json()
                assert "\n" not in body["error"] and (r.status_code != 422 or "index" not in body
                                                      or body["error"].startswith(f"jobs[{body['index']}]: "))
    print(f"\nbatch fuzz: {outcomes}")
    assert outcomes[201] >= 10 and outcomes[422] >= 10
