"""``dlsched logs ID`` prints the whole log: over one read of the service's (1 MiB) it printed the first MiB and
stopped, without a word, so a long job's end (its result, its error) was never shown."""
from dlsched.service.api import MAX_LOG_CHUNK
from tests.service.conftest import job_yaml
from tests.service.test_cli import cli
from tests.waiting import wait_until


def test_logs_prints_a_log_longer_than_one_read_to_its_end(service, client):
    jid = client.post("/jobs", content=job_yaml("short"), headers={"content-type": "application/yaml"}).json()["id"]
    wait_until(lambda: client.get(f"/jobs/{jid}").json()["state"] == "finished", 60, "the job to finish")
    out = service.jobs_dir / str(jid) / "output.log"
    line = "[worker 0] a chatty script's line, as it printed it\n"
    with open(out, "a") as f:   # what months of a job's output add up to
        f.write(line * (2 * MAX_LOG_CHUNK // len(line)) + "the last line: accuracy 0.93\n")
    r = cli("logs", str(jid), service=service, timeout=120)
    assert r.returncode == 0 and r.stdout == out.read_text()
    assert r.stdout.endswith("the last line: accuracy 0.93\n")
