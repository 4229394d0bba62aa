"""``dlsched events`` shows the newest events (``service/event_pages.py``): on a service that had run for months it
printed the 1 000 oldest events it ever stored and nothing since, and ``-f`` paged through all of them first."""
import json

from tests.service.conftest import job_yaml
from tests.service.test_cli import cli
from tests.service.test_job_pages import ENDED, months_of_jobs
from tests.waiting import wait_until


def test_the_newest_events_are_shown_and_older_pages_reached(service, client):
    first = months_of_jobs(service, client)
    client.post(f"/jobs/{first}/cancel")   # its checkpoints would add events while the test reads them
    wait_until(lambda: client.get(f"/jobs/{first}").json()["state"] == "cancelled", 60, "the long job cancelled")
    total = len(json.loads(cli("events", "--json", "-n", "0", service=service).stdout))   # every one, paged
    assert total >= 3 * ENDED > 1000   # submitted, running, finished for each: more than one old page
    r = client.get("/events", params={"tail": 5})
    page = r.json()
    assert [e["id"] for e in page] == sorted(e["id"] for e in page) and page[-1]["id"] >= total
    ids, before = [], None
    while True:
        r = client.get("/events", params={"tail": 700, **({"before": before} if before else {})})
        ids = [e["id"] for e in r.json()] + ids
        before = r.headers.get("x-next-before")
        if before is None:
            break
    assert ids == list(range(1, total + 1))   # each once, none skipped
    last = first + ENDED
    r = client.get(f"/jobs/{last}/events", params={"tail": 1, "kind": "finished"})
    assert [(e["job_id"], e["kind"]) for e in r.json()] == [(last, "finished")]
    for query, said in (({"tail": 2, "kind": "finishd"}, "kind: 'finishd' is not an event kind"),
                        ({"before": 3}, "before: pages back from the newest events; give tail too")):
        r = client.get("/events", params=query)
        assert r.status_code == 422 and r.json()["error"].startswith(said), r.text

    r = cli("events", "--json", "-n", "5", service=service)
    shown = json.loads(r.stdout)
    assert [e["id"] for e in shown] == [e["id"] for e in page] and "older events not shown: --limit 0" in r.stderr
    r = cli("events", "-t", "finished", "-n", "2", "--json", service=service)
    assert [e["job_id"] for e in json.loads(r.stdout)] == [last - 1, last]
    r = cli("events", service=service)
    assert r.returncode == 0 and f"  {last}  finished" in r.stdout and "  2  submitted" not in r.stdout
    assert len(r.stdout.splitlines()) == 100


def test_the_dashboards_job_page_lists_a_long_jobs_newest_events(service, client):
    """It listed a job's first 200: a job that had checkpointed for an hour showed none of its resizes or its end."""
    jid = client.post("/jobs", content=job_yaml("long", samples=10**6, step_s=0.05),
                      headers={"content-type": "application/yaml"}).json()["id"]
    wait_until(lambda: client.get(f"/jobs/{jid}").json()["state"] == "running", 60, "the job to run")
    for step in range(300):   # an hour of checkpoints, as the runtime writes them
        service.store.event("job_checkpoint", jid, None, step=step)
    client.post(f"/jobs/{jid}/cancel")
    wait_until(lambda: client.get(f"/jobs/{jid}").json()["state"] == "cancelled", 60, "the job cancelled")
    kinds = [e["kind"] for e in client.get(f"/dashboard/api/jobs/{jid}").json()["events"]]
    assert len(kinds) == 200 and kinds[-1] == "cancelled" and "submitted" not in kinds
