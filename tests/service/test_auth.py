"""The bearer token: generated 0600 on the first start, refused when weak or readable by others."""
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from dlsched.errors import UserError
from dlsched.faults import FAULT_ENV
from dlsched.service.auth import client_token, load_or_create_token, read_token_file
from dlsched.service.server import Service, free_port, wait_for_http
from tests.service.conftest import RUNTIME, cluster

SERVE = Path(__file__).with_name("serve_for_tests.py")   # dlsched's CLI, as a real separate process


def test_first_start_generates_a_private_token_and_reuses_it(tmp_path):
    svc = Service(cluster(), tmp_path / "state", port=0, runtime=RUNTIME)
    f = tmp_path / "state" / "token"
    assert stat.S_IMODE(f.stat().st_mode) == 0o600 and len(svc.token) >= 32
    svc.close()             # one service per state folder (service/state_lock.py)
    assert Service(cluster(), tmp_path / "state", port=0, runtime=RUNTIME).token == svc.token
    assert Service(cluster(), tmp_path / "state2", port=0, runtime=RUNTIME).token != svc.token
    assert Service(cluster(), tmp_path / "s3", port=0, runtime=RUNTIME, auth=False).token is None


def test_weak_or_exposed_tokens_are_refused(tmp_path, monkeypatch):
    f = tmp_path / "token"
    f.write_text("x" * 40)
    f.chmod(0o644)
    with pytest.raises(UserError, match=r"readable by others \(mode 0644\); run: chmod 600"):
        read_token_file(f)
    with pytest.raises(UserError, match="readable by others"):
        Service(cluster(), tmp_path / "state", port=0, runtime=RUNTIME, token_file=f)
    f.chmod(0o600)
    assert load_or_create_token(f) == "x" * 40
    f.write_text("x")
    with pytest.raises(UserError, match="token is 1 characters, need at least 16"):
        read_token_file(f)
    with pytest.raises(UserError, match="token is 1 characters"):
        Service(cluster(), tmp_path / "s", host="0.0.0.0", port=0, runtime=RUNTIME, token="x")
    monkeypatch.setenv("DLSCHED_TOKEN", "short")
    with pytest.raises(UserError, match=r"\$DLSCHED_TOKEN: token is 5 characters"):
        client_token()


def test_a_directory_given_as_the_token_file_is_called_a_directory(tmp_path, monkeypatch):
    """`--token-file DIR` said "token file is readable by others (mode 0755); run: chmod 600": wrong advice."""
    d = tmp_path / "tokens"
    d.mkdir(mode=0o755)
    line = f"{d}: is a directory, not a token file; give a file's path (e.g. {d / 'token'})"
    for call in (lambda: read_token_file(d), lambda: load_or_create_token(d),
                 lambda: Service(cluster(), tmp_path / "state", port=0, runtime=RUNTIME, token_file=d)):
        with pytest.raises(UserError) as e:
            call()
        assert str(e.value) == line
    monkeypatch.delenv("DLSCHED_TOKEN", raising=False)
    monkeypatch.setenv("DLSCHED_TOKEN_FILE", str(d))
    with pytest.raises(UserError, match="is a directory, not a token file"):
        client_token()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(UserError, match="is not a regular file"):   # was a read that never returned
        read_token_file(fifo)


def test_the_client_finds_the_token(tmp_path, monkeypatch):
    monkeypatch.delenv("DLSCHED_TOKEN", raising=False)
    monkeypatch.delenv("DLSCHED_TOKEN_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert client_token() is None
    token = load_or_create_token(tmp_path / "dlsched-state" / "token")    # serve's default state directory
    assert client_token() == token
    other = load_or_create_token(tmp_path / "elsewhere")
    monkeypatch.setenv("DLSCHED_TOKEN_FILE", str(tmp_path / "elsewhere"))
    assert client_token() == other
    monkeypatch.setenv("DLSCHED_TOKEN", "y" * 20)
    assert client_token() == "y" * 20
    assert os.environ["DLSCHED_TOKEN"]


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_state_folder_is_private_and_an_existing_one_keeps_its_mode_with_a_warning(tmp_path, monkeypatch, caplog):
    """A new folder is 0700 and the database 0600 (not the umask's 0755/0644: any local user could read every job's
    spec, params and events). An existing folder is the user's choice (``--state-dir .``, their home): it was chmod-ed
    to 0700, which surprised them; now it keeps its mode, a loose one is named in one warning, and the database files
    and the default job folders in it are still private."""
    import logging
    import sqlite3

    from dlsched.spec import load_job_spec
    from tests.service.teardown import stop_service_and_jobs

    old = os.umask(0o022)   # the usual umask, whatever the test runner's
    try:
        svc = Service(cluster(), tmp_path / "new" / "state", port=0, runtime=RUNTIME).start()
        stop_service_and_jobs(svc)
        state = tmp_path / "new" / "state"
        assert _mode(state) == 0o700 and _mode(state / "jobs") == 0o700
        assert {f.name: _mode(f) for f in state.iterdir() if f.is_file()} == {
            "token": 0o600, "dlsched.db": 0o600, "dlsched.db-wal": 0o600, "dlsched.db-shm": 0o600, "serve.lock": 0o600}

        cwd = tmp_path / "cwd"             # the user's working directory, as dlsched serve --state-dir . sees it
        cwd.mkdir(mode=0o755)
        monkeypatch.chdir(cwd)
        earlier = Service(cluster(), ".", port=0, runtime=RUNTIME, auth=False)
        earlier.store.submit(load_job_spec("name: kept\nentry: x.py:make_job"))
        earlier.close()                    # one service per state folder (service/state_lock.py)
        for f in cwd.glob("dlsched.db*"):
            f.chmod(0o644)                 # as an earlier dlsched left its database
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dlsched.service"):
            svc = Service(cluster(), ".", port=0, runtime=RUNTIME, auth=False)
        assert _mode(cwd) == 0o755                                                     # not chmod-ed
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        # the folder made absolute (the job folders stored in it must not depend on the working directory)
        assert warnings == [f"--state-dir {cwd}: an existing folder with mode 0755, left as it is; other users may "
                            f"read in it, and it will hold the service's database and token; run: chmod 700 {cwd}, or "
                            "choose a new folder"]
        assert {_mode(f) for f in cwd.glob("dlsched.db*")} == {0o600} and _mode(cwd / "jobs") == 0o700
        assert [j.name for j in svc.store.jobs()] == ["kept"]                          # nothing lost
        assert sqlite3.connect(cwd / "dlsched.db").execute("SELECT COUNT(*) FROM jobs").fetchone() == (1,)
        svc.close()

        cwd.chmod(0o777)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dlsched.service"):
            Service(cluster(), cwd, port=0, runtime=RUNTIME, auth=False).close()
        assert _mode(cwd) == 0o777 and "mode 0777" in caplog.text and "may write in it" in caplog.text
        cwd.chmod(0o700)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dlsched.service"):
            Service(cluster(), cwd, port=0, runtime=RUNTIME, auth=False).close()
        assert not caplog.records                                                      # a private folder: no noise
        # serve --token-file NEW/token creates the folder before the service: private too, not the umask's 0755
        load_or_create_token(tmp_path / "tok" / "token")
        assert _mode(tmp_path / "tok") == 0o700
    finally:
        os.umask(old)


def test_a_token_file_not_there_yet_says_serve_writes_it_as_it_starts(tmp_path, monkeypatch):
    """The README's tour exports DLSCHED_TOKEN_FILE=/tmp/dlsched-tour/token and submits in a second terminal; typed
    before `serve` was up (it took over 6 s on a loaded machine) it said only 'No such file or directory'."""
    monkeypatch.delenv("DLSCHED_TOKEN", raising=False)
    monkeypatch.setenv("DLSCHED_TOKEN_FILE", str(tmp_path / "state" / "token"))
    with pytest.raises(UserError) as e:
        client_token()
    assert str(e.value) == (f"{tmp_path / 'state' / 'token'}: cannot read token: No such file or directory "
                            "(`dlsched serve` writes it into its state folder as it starts: is it running, or still "
                            "starting?)")


def test_an_empty_token_file_left_by_a_cut_off_start_is_replaced(tmp_path, caplog):
    """A first start cut off between creating the token file and writing it (a full disk: the create succeeds, the
    write fails ENOSPC; a kill) left it empty, and every later start was refused ("token is 0 characters"). It is
    replaced by a new token, with one warning; a loose or foreign empty file is still refused."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "token").touch(mode=0o600)
    svc = Service(cluster(), state, port=0, runtime=RUNTIME).start()
    try:
        assert len(svc.token) >= 32 and (state / "token").read_text().strip() == svc.token
        assert stat.S_IMODE((state / "token").stat().st_mode) == 0o600
        assert "token file is empty" in caplog.text
        with httpx.Client(base_url=svc.url, timeout=30) as c:
            assert c.get("/jobs", headers=svc.headers).status_code == 200
            assert c.get("/jobs", headers={"Authorization": "Bearer x"}).status_code == 401
    finally:
        svc.close()
    loose = tmp_path / "loose"
    loose.touch(mode=0o644)
    loose.chmod(0o644)
    with pytest.raises(UserError, match="readable by others"):
        load_or_create_token(loose)


def test_a_first_start_killed_while_writing_its_token_starts_again(tmp_path):
    """``serve`` SIGKILLed with the new token written but not yet in place (``DLSCHED_FAULT_AT=token-written``): no
    token file, or a whole one, is left, and the next start serves with a token a client can use."""
    state = tmp_path / "state"
    cmd = [sys.executable, str(SERVE), "serve", "--state-dir", str(state), "--port", str(free_port())]
    killed = subprocess.run(cmd, env={**os.environ, FAULT_ENV: "token-written"}, capture_output=True, text=True,
                            timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    port = free_port()
    proc = subprocess.Popen([*cmd[:-1], str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for_http(f"http://127.0.0.1:{port}/healthz", 60, proc), proc.stdout and proc.stdout.read()[-2000:]
        token = read_token_file(state / "token")
        r = httpx.get(f"http://127.0.0.1:{port}/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert r.status_code == 200, r.text
    finally:
        proc.terminate()
        proc.wait(timeout=60)
