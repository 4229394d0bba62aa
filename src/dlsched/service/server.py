"""Assembles the service: store + backend + loop thread + API under uvicorn. ``dlsched serve`` and the tests
both go through ``Service`` so that what is tested is what runs."""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path

import uvicorn

from dlsched.backends.make import make_backend
from dlsched.entry_check import check_entry
from dlsched.errors import UserError
from dlsched.policy.base import Policy
from dlsched.service.api import DEFAULT_MAX_BODY, create_app, is_loopback
from dlsched.service.loop import LiveLoop, LoopThread
from dlsched.service.store import Store
from dlsched.spec import ClusterSpec

DEFAULT_PORT = 8642


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_http(url: str, timeout_s: float = 30.0, proc=None) -> bool:
    """Poll ``url`` until it answers 200 (True), or the process ``proc`` has exited / time is up (False).

    The one readiness wait for anything started in the background: the service, chromedriver."""
    import httpx

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


class Service:
    """One running scheduler. Refuses a non-loopback bind without a token."""

    def __init__(self, cluster: ClusterSpec, state_dir: str | Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 token: str | None = None, runtime: list[str] | None = None, workdir: str | Path | None = None,
                 max_body: int = DEFAULT_MAX_BODY, policy: Policy | None = None, backend=None):
        if not is_loopback(host) and not token:
            raise UserError(f"--host {host}: binding beyond loopback needs a bearer token (--token-file or DLSCHED_TOKEN)")
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.host, self.port = host, port
        self.store = Store(self.state_dir / "dlsched.db")
        self.backend = backend or make_backend(cluster, runtime=runtime, workdir=workdir)
        try:
            self.loop = LiveLoop(self.store, self.backend, cluster, self.state_dir, policy=policy)
        except ValueError as e:   # unknown policy name
            raise UserError(f"cluster spec: policy: {e}") from None
        self.thread = LoopThread(self.loop, cluster.interval_s)
        self.workdir = Path(workdir) if workdir is not None else Path.cwd()
        # entries follow the default runtime's contract (file.py:make_job); a custom runtime defines its own
        self.check_entries = runtime is None
        app = create_app(self.store, cluster, self.state_dir, token=token, max_body=max_body, loop_thread=self.thread,
                         validate=self.validate, node_table=lambda: self.loop.nodes.table)
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                                    access_log=False, limit_concurrency=256, timeout_keep_alive=5))
        self._uv_thread: threading.Thread | None = None

    def validate(self, spec, source: str = "job spec") -> None:
        """Submit-time checks: the cluster and policy can run it, and its entry exists and takes its params."""
        self.loop.validate(spec, source)
        if self.check_entries and spec.kind == "train" and getattr(spec, "entry", None):
            check_entry(spec.entry, spec.params, self.workdir, source)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def run(self) -> None:
        """Foreground: loop thread + uvicorn until SIGINT/SIGTERM (uvicorn handles the signals)."""
        self.thread.start()
        try:
            self.server.run()
        finally:
            self.close()

    def start(self) -> "Service":
        """Background (tests): returns once the API answers."""
        self.thread.start()
        self._uv_thread = threading.Thread(target=self.server.run, name="dlsched-api", daemon=True)
        self._uv_thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self._uv_thread.is_alive():
                raise RuntimeError("API server did not start")
            time.sleep(0.02)
        return self

    def close(self) -> None:
        self.server.should_exit = True
        if self._uv_thread is not None:
            self._uv_thread.join(timeout=10)
        self.thread.stop()
        if self.thread.is_alive():
            self.thread.join(timeout=30)
        self.backend.shutdown()


def read_token(token_file: str | None) -> str | None:
    if token_file:
        try:
            tok = Path(token_file).read_text().strip()
        except OSError as e:
            raise UserError(f"{token_file}: cannot read token: {e.strerror}") from None
        if len(tok) < 16:
            raise UserError(f"{token_file}: token is {len(tok)} characters, need at least 16")
        return tok
    return os.environ.get("DLSCHED_TOKEN") or None


logging.getLogger("dlsched.service").addHandler(logging.NullHandler())
