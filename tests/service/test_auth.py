"""The bearer token: generated 0600 on the first start, refused when weak or readable by others."""
import os
import stat

import pytest

from dlsched.errors import UserError
from dlsched.service.auth import client_token, load_or_create_token, read_token_file
from dlsched.service.server import Service, free_port
from tests.service.conftest import RUNTIME, cluster


def test_first_start_generates_a_private_token_and_reuses_it(tmp_path):
    svc = Service(cluster(), tmp_path / "state", port=free_port(), runtime=RUNTIME)
    f = tmp_path / "state" / "token"
    assert stat.S_IMODE(f.stat().st_mode) == 0o600 and len(svc.token) >= 32
    assert Service(cluster(), tmp_path / "state", port=free_port(), runtime=RUNTIME).token == svc.token
    assert Service(cluster(), tmp_path / "state2", port=free_port(), runtime=RUNTIME).token != svc.token
    assert Service(cluster(), tmp_path / "s3", port=free_port(), runtime=RUNTIME, auth=False).token is None


def test_weak_or_exposed_tokens_are_refused(tmp_path, monkeypatch):
    f = tmp_path / "token"
    f.write_text("x" * 40)
    f.chmod(0o644)
    with pytest.raises(UserError, match=r"readable by others \(mode 0644\); run: chmod 600"):
        read_token_file(f)
    with pytest.raises(UserError, match="readable by others"):
        Service(cluster(), tmp_path / "state", port=free_port(), runtime=RUNTIME, token_file=f)
    f.chmod(0o600)
    assert load_or_create_token(f) == "x" * 40
    f.write_text("x")
    with pytest.raises(UserError, match="token is 1 characters, need at least 16"):
        read_token_file(f)
    with pytest.raises(UserError, match="token is 1 characters"):
        Service(cluster(), tmp_path / "s", host="0.0.0.0", port=free_port(), runtime=RUNTIME, token="x")
    monkeypatch.setenv("DLSCHED_TOKEN", "short")
    with pytest.raises(UserError, match=r"\$DLSCHED_TOKEN: token is 5 characters"):
        client_token()


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
