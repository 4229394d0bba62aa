"""``GET /jobs`` answers a page, not every job ever run (``service/job_pages.py``): at 20 000 ended jobs one answer was
14 MB and took 11 s, and ``dlsched status`` (each second under ``-w``) and the dashboard's overview read them all."""
import json

from dlsched.service.job_pages import DEFAULT_JOBS_PAGE
from dlsched.service.store import FINISHED, RUNNING
from dlsched.spec import load_job_spec
from tests.service.conftest import job_yaml
from tests.service.test_cli import cli
from tests.waiting import wait_until

ENDED = DEFAULT_JOBS_PAGE + 20


def months_of_jobs(service, client) -> int:
    """One long job submitted first (still active), then ``ENDED`` jobs that ran and finished; its id."""
    first = client.post("/jobs", content=job_yaml("long", samples=10**6, step_s=0.05),
                        headers={"content-type": "application/yaml"}).json()["id"]
    store, spec = service.store, load_job_spec(job_yaml("old"), "spec")
    ids = store.submit_many([spec] * ENDED)
    with store.batch():
        for i in ids:
            store.transition(i, RUNNING, 1000.0 + i)
            store.record_allocation(i, 1000.0 + i, 1, 32, {"n0": 1})
            store.transition(i, FINISHED, 1010.0 + i)
            store.record_allocation(i, 1010.0 + i, 0, 32, {})
    return first


def test_the_jobs_list_is_paged_newest_first_and_every_job_is_reached(service, client):
    first = months_of_jobs(service, client)
    last = first + ENDED
    r = client.get("/jobs")
    page = [j["id"] for j in r.json()]
    assert page == list(range(last - DEFAULT_JOBS_PAGE + 1, last + 1))   # the newest, in id order
    assert r.headers["x-total-count"] == str(ENDED + 1) and r.headers["x-next-before"] == str(page[0])
    seen, before = [], None
    while True:
        r = client.get("/jobs", params={"limit": 200, **({"before": before} if before else {})})
        seen = [j["id"] for j in r.json()] + seen
        before = r.headers.get("x-next-before")
        if before is None:
            break
    assert seen == list(range(first, last + 1))
    assert [j["id"] for j in client.get("/jobs", params={"state": "queued,running,rescaling"}).json()] == [first]
    assert [j["id"] for j in client.get("/jobs", params={"id": f"{first},{first + 2}"}).json()] == [first, first + 2]
    for query, field in (({"id": "3,x"}, "id: 'x' is not a job id"), ({"limit": 0}, "query.limit: "),
                         ({"before": -1}, "query.before: ")):
        r = client.get("/jobs", params=query)
        assert r.status_code == 422 and r.json()["error"].startswith(field) and "\n" not in r.text, r.text


def test_status_history_and_the_dashboard_show_the_active_jobs_and_the_newest_ended(service, client):
    first = months_of_jobs(service, client)
    wait_until(lambda: client.get(f"/jobs/{first}").json()["state"] == "running", 60, "the long job to run")
    r = cli("status", "--json", service=service)
    jobs = json.loads(r.stdout)
    assert r.returncode == 0 and [j["id"] for j in jobs] == [first, *range(first + ENDED - 49, first + ENDED + 1)]
    assert f"{ENDED - 50} older ended jobs not shown: --limit 0" in r.stderr
    r = cli("status", "--json", "--limit", "0", service=service)
    assert len(json.loads(r.stdout)) == ENDED + 1 and r.stderr == ""
    r = cli("status", str(first + 1), service=service)   # an old job named: shown, whatever the limit
    assert r.returncode == 0 and f"\n {first + 1} " in r.stdout, r.stdout
    r = cli("status", "--limit", "-1", service=service)
    assert r.returncode == 2 and r.stderr.strip() == "error: --limit -1: expected 0 (all) or a positive number of ended jobs"
    r = cli("history", "--json", service=service)
    assert [j["id"] for j in json.loads(r.stdout)] == list(range(first + ENDED - 99, first + ENDED + 1))
    # without --since or --user, the same read as status's: how many it left out (it said only "older jobs")
    assert r.stderr == f"{ENDED - 100} older jobs not shown: --limit 0 lists them all\n", r.stderr
    r = cli("history", "--json", "--since", "1d", service=service)   # a filter the service does not apply
    assert len(json.loads(r.stdout)) == 0 and r.stderr == "", r.stderr
    assert len(json.loads(cli("history", "--json", "-n", "0", service=service).stdout)) == ENDED
    d = client.get("/dashboard/api/overview").json()
    assert d["total_jobs"] == ENDED + 1 and d["counts"] == {"running": 1, "finished": ENDED}
    assert [j["id"] for j in d["queue"]] == [first] and len(d["recent"]) == 50
    assert d["recent"][0]["id"] == first + ENDED and d["gantt_total_jobs"] == ENDED + 1
