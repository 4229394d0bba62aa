"""The client commands as a user runs them (separate processes) against a real service."""
import json
import os
import subprocess
import sys
from pathlib import Path

from dlsched.service.server import free_port
from tests.service.conftest import job_yaml

SERVE = Path(__file__).with_name("serve_for_tests.py")


def cli(*args, server=None, service=None, timeout=60):
    """``service``: talk to it as its user does, the token read from its 0600 token file."""
    server = service.url if service is not None else server
    extra = ["--server", server] if server else []
    env = dict(os.environ, COLUMNS="200")
    if service is not None:
        env["DLSCHED_TOKEN_FILE"] = str(service.token_file)
    return subprocess.run([sys.executable, str(SERVE), *args, *extra], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_submit_status_logs_cancel(service, tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(job_yaml("cli-job", samples=320))
    r = cli("submit", str(f), service=service)
    assert r.returncode == 0 and r.stdout.strip() == "submitted job 1 (cli-job)", r.stderr
    long = tmp_path / "long.yaml"
    long.write_text(job_yaml("long", gpus=4, samples=100000, step_s=0.05))
    assert cli("submit", str(long), service=service).returncode == 0
    r = cli("logs", "1", "-f", service=service)       # follows until the job ends
    assert r.returncode == 0 and "start:" in r.stdout
    r = cli("status", "--json", service=service)
    jobs = json.loads(r.stdout)
    assert jobs[0]["state"] == "finished" and jobs[1]["name"] == "long"
    r = cli("status", service=service)
    assert "cli-job" in r.stdout and "finished" in r.stdout
    r = cli("cancel", "2", service=service)
    assert r.returncode == 0 and r.stdout.startswith("job 2: cancel")
    r = cli("cancel", "2", "--member", "a", service=service)    # one member of an ensemble only
    assert r.returncode == 1 and r.stderr.strip() == "error: job 2 is not an ensemble (kind train): it has no members"


def test_user_errors_are_one_line_exit_2(service, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nentry: m:f\ngpus: -2\n")
    r = cli("submit", str(bad), service=service)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "field gpus" in r.stderr
    assert service.store.count() == 0
    r = cli("status", server=f"http://127.0.0.1:{free_port()}")
    assert r.returncode == 2 and "cannot reach the dlsched service" in r.stderr
    r = cli("serve", "--cluster", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "missing.yaml: cannot read" in r.stderr


def test_a_server_that_is_not_dlsched_is_said_so_not_read_as_no_such_job(tmp_path):
    """Pointed at another web server (the port of something else, a service moved), `cancel 1` said "job 1: no such
    job" from that server's bare 404, and `status` "GET /jobs: HTTP 404: "."""
    from tests.waiting import wait_until

    port = free_port()
    other = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                              "--directory", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: "cannot reach" not in cli("nodes", server=url).stderr, 30, "the other server to listen")
        for args in (("cancel", "1"), ("status",)):
            r = cli(*args, server=url)
            assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not as a dlsched service does" in r.stderr, \
                r.stderr
            assert "no such job" not in r.stderr
    finally:
        other.kill()
        other.wait()


def test_serve_on_a_damaged_database_says_so_in_one_line(tmp_path):
    """A truncated or overwritten dlsched.db (a disk fault, a bad copy) was a 79-line traceback, exit 1."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "dlsched.db").write_bytes(b"not sqlite " * 1000)
    (state / "dlsched.db").chmod(0o600)
    r = cli("serve", "--state-dir", str(state), "--port", "0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"{state / 'dlsched.db'}: the service's database is damaged (file is not a database)" in r.stderr


def test_serve_refuses_an_unknown_backend_in_one_line():
    cluster = Path(__file__).resolve().parents[2] / "examples" / "demo" / "cluster.yaml"
    out = subprocess.run([sys.executable, "-m", "dlsched.cli", "serve", "--cluster", str(cluster), "--backend", "bogus"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == "error: --backend 'bogus': expected 'local' or 'ray'"


def test_serve_checks_its_policy_before_it_creates_the_state_folder_and_names_where_it_came_from(tmp_path):
    """``--policy nosuch`` was refused as a "cluster spec" error after NEW/ (its database, token and jobs/) was made."""
    (tmp_path / "cluster.yaml").write_text("nodes: [{name: n0, gpus: 1}]\npolicy: nosuch2\n")
    for args, where in [(["--policy", "nosuch"], "--policy nosuch"),
                        (["--cluster", str(tmp_path / "cluster.yaml")], f"--cluster {tmp_path / 'cluster.yaml'}: field policy")]:
        out = subprocess.run([sys.executable, "-m", "dlsched.cli", "serve", "--state-dir", str(tmp_path / "NEW"), *args,
                              "--port", str(free_port())], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert out.stderr.startswith(f"error: {where}: unknown policy 'nosuch"), out.stderr
        assert not (tmp_path / "NEW").exists()


def test_submit_applies_the_service_limits_before_sending(service, tmp_path):
    """The 60 KB file that segfaulted ``dlsched submit`` (deep nesting), an alias bomb, duplicate keys, a huge
    file: one line each, exit 2, nothing sent."""
    cases = {"deep.yaml": "a: " + "[" * 30000 + "]" * 30000, "bomb.yaml": "a: &a [x, x]\nb: [*a, *a]\n",
             "dup.yaml": "name: x\nname: y\nentry: x.py:make_job\n", "big.yaml": "# " + "x" * (2 << 20)}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        r = cli("submit", str(tmp_path / name), service=service)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and name in r.stderr, (name, r.stderr[-300:])
    assert service.store.count() == 0


def test_a_bad_server_url_or_watch_interval_is_one_line_not_a_traceback():
    """`--server http://256.1.1.1` raised httpx.InvalidURL (not an HTTPError) and `status -w --interval -1`
    (or nan) raised in time.sleep: both were tracebacks, exit 1."""
    for args, line in [(("status", "--server", "http://256.1.1.1:80"), "--server 'http://256.1.1.1:80': not a service URL"),
                       (("logs", "1", "--server", "http://[::1"), "--server 'http://[::1': not a service URL"),
                       # no scheme: was "cannot reach the dlsched service at 127.0.0.1:8642 (is `dlsched serve` running?)"
                       (("status", "--server", "127.0.0.1:8642"), "--server '127.0.0.1:8642': not a service URL"),
                       (("status", "-w", "--interval", "-1"), "--interval -1.0: expected a positive number"),
                       (("status", "-w", "--interval", "nan"), "--interval nan: expected a positive number")]:
        r = cli(*args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and line in r.stderr, (args, r.stderr[-500:])


def test_a_jobs_own_words_reach_the_terminal_as_text_not_as_escape_sequences(service):
    """A failed job's error is what its code wrote (status.json, or its output's last line): ``dlsched history``
    printed an ESC in it to the reader's terminal as it was (a cleared screen, a rewritten window title)."""
    import httpx

    from tests.waiting import wait_until

    error = "\x1b[2J\x1b]0;owned\x1b\\done \x9b31m"
    with httpx.Client(base_url=service.url, headers=service.headers, timeout=30) as c:
        r = c.post("/jobs", json={"name": "loud", "entry": "x.py:make_job", "gpus": 1,
                                  "params": {"samples": 320, "fail_at": 0, "error": error}})
        assert r.status_code == 201, r.text
        wait_until(lambda: c.get(f"/jobs/{r.json()['id']}").json()["state"] == "failed", 60, "job loud failing")
    for command in (("history",), ("history", "--wide")):
        out = cli(*command, service=service)
        assert out.returncode == 0 and "loud" in out.stdout, out.stderr
        assert "\x1b" not in out.stdout and "\x9b" not in out.stdout, repr(out.stdout)
        assert "␛[2J␛]0;owned␛\\done �31m" in out.stdout, out.stdout
