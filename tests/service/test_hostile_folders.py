"""A job folder is written by job code: nothing it leaves there stops the scheduler (docs/security.md)."""
import os

from tests.service.conftest import job_yaml
from tests.waiting import wait_until

YAML = {"content-type": "application/yaml"}


def test_a_fifo_in_place_of_a_jobs_status_or_progress_file_does_not_stop_the_scheduler(service, client, tmp_path):
    """A FIFO named status.json (or progress.jsonl) blocked the loop's read of it until a writer came: no round ran
    again, no job started, ended or was cancelled (seen on a real service: rounds stuck at 394)."""
    job = client.post("/jobs", content=job_yaml("fifo", samples=10**6, step_s=0.05), headers=YAML).json()["id"]
    wait_until(lambda: client.get(f"/jobs/{job}").json()["samples"] > 0, 60, "the job's first steps")
    folder = tmp_path / "state" / "jobs" / str(job)
    fifos = [folder / "status.json", folder / "progress.jsonl"]
    for f in fifos:
        os.mkfifo(folder / "fifo")
        os.replace(folder / "fifo", f)     # what job code could do
    try:
        rounds = client.get("/healthz").json()["rounds"]
        wait_until(lambda: client.get("/healthz").json()["rounds"] >= rounds + 3, 30, "three more rounds")
        assert client.get(f"/jobs/{job}/logs").status_code == 200
        client.post(f"/jobs/{job}/cancel")
        wait_until(lambda: client.get(f"/jobs/{job}").json()["state"] == "cancelled", 60, "the cancel")
    finally:
        for f in fifos:   # a reader still blocked on one (without the fix) gets its end of file
            try:
                os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
