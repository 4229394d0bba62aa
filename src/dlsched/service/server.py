"""Assembles the service: store + backend + loop thread + API under uvicorn. ``dlsched serve`` and the tests
both go through ``Service`` so that what is tested is what runs."""
from __future__ import annotations

import logging
import socket
import sqlite3
import threading
import time
from pathlib import Path

import uvicorn

from dlsched.backends.make import make_backend
from dlsched.ensemble_check import check_ensemble
from dlsched.entry_check import check_entry, check_script
from dlsched.errors import UserError
from dlsched.policy.base import Policy, make_policy
from dlsched.service import state_lock
from dlsched.service.api import allowed_hosts, create_app, is_loopback
from dlsched.service.auth import TOKEN_FILE_NAME, check_token, load_or_create_token
from dlsched.service.checkpoint_locations import CheckpointRules
from dlsched.service.connections import BACKLOG, HEAD_S, deadline_protocol
from dlsched.service.entries import EntryRules
from dlsched.service.limits import DEFAULT_MAX_BODY
from dlsched.service.loop import LiveLoop, LoopThread
from dlsched.service.private_files import private_dir, private_jobs_dir
from dlsched.service.store import ACTIVE, Store, unopenable
from dlsched.spec import ClusterSpec, JobSpec

DEFAULT_PORT = 8642


KEEP_ALIVE_S = 20


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
    """One running scheduler.

    Authentication is on unless ``auth=False`` (``--no-auth``, loopback binds only): the bearer token is
    ``token``, else the one in ``token_file`` (default ``STATE_DIR/token``), generated there on the first start."""

    def __init__(self, cluster: ClusterSpec, state_dir: str | Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 token: str | None = None, runtime: list[str] | None = None, workdir: str | Path | None = None,
                 max_body: int = DEFAULT_MAX_BODY, policy: Policy | None = None, backend=None, auth: bool = True,
                 token_file: str | Path | None = None, extra_hosts: tuple[str, ...] = (),
                 entry_roots: tuple[str | Path, ...] = (), entry_modules: tuple[str, ...] = (),
                 jobs_dir: str | Path | None = None, head_timeout_s: float = HEAD_S,
                 max_connections: int | None = None):
        if not auth and not is_loopback(host):
            raise UserError(f"--host {host}: --no-auth is for a loopback bind only; beyond it every request needs a token")
        if token and auth:
            token = check_token(token, "token")
        if policy is None:   # checked before anything is created: a refused start leaves no state folder behind
            try:
                policy = make_policy(cluster.policy, **dict(cluster.policy_args))
            except (ValueError, TypeError) as e:   # an unknown name, arguments it does not take
                raise UserError(f"cluster spec: policy: {e}") from None
        # absolute: the job folders stored for each job must not depend on the working directory (job_folders.py)
        state_dir = Path(state_dir).absolute()
        # the database, the token and (by default) the job folders: a new folder this user's only, an existing one
        # (the user's own choice, e.g. --state-dir .) left as it is, with a warning where it is loose
        self.state_dir = private_dir(state_dir, "--state-dir")
        self._lock = state_lock.hold(self.state_dir)   # one service per state folder, for its whole life
        try:
            try:
                self._open(cluster, token, runtime, workdir, policy, backend, auth, token_file, jobs_dir)
            except sqlite3.DatabaseError as e:   # locked past the busy timeout, a damaged file, a full disk
                raise UserError(unopenable(self.state_dir / "dlsched.db", e)) from None
            self.host, self.port, self._sockets = host, port, None
            if port == 0:   # the OS picks a free one (several services side by side, tests): bound now to know it
                sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
                sock.bind((host, 0))
                self.port, self._sockets = sock.getsockname()[1], [sock]
            self.thread = LoopThread(self.loop, cluster.interval_s)
            self.workdir = Path(workdir) if workdir is not None else Path.cwd()
            # job code only from the allowed job directories / modules (entries.py); never from the state directory
            self.entries = EntryRules.make(self.workdir, tuple(entry_roots), tuple(entry_modules),
                                           forbidden=(self.state_dir, self.jobs_dir))
            self.loop.code_check = self.entries.check_spec   # and again at each start: what a path names may change
            # a job's checkpoints: never in the service's folders, never where a live job keeps its own
            self.checkpoints = CheckpointRules.make(self.workdir, forbidden=(self.state_dir, self.jobs_dir))
            # entries follow the default runtime's contract (file.py:make_job); a custom runtime defines its own
            self.check_entries = runtime is None
            app = create_app(self.store, cluster, self.state_dir, token=self.token, max_body=max_body,
                             jobs_dir=self.jobs_dir, loop_thread=self.thread, validate=self.validate,
                             claim=self.claim_location, hosts=allowed_hosts(host, extra_hosts),
                             node_table=lambda: self.loop.nodes.table)
            # a connection that never finishes its request head is closed, and none is opened past the cap: a peer
            # without the token held connections for good and ran the service out of descriptors (connections.py)
            http = deadline_protocol(head_timeout_s, max_connections, keep_alive_s=KEEP_ALIVE_S)
            # an idle connection is kept past the clients' own expiry (httpx's 5 s): closed at the same 5 s, a client's
            # next request went out on it as it closed and met a reset (a POST under load: ReadError, ECONNRESET)
            self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                                        access_log=False, limit_concurrency=256,
                                                        timeout_keep_alive=KEEP_ALIVE_S, http=http,
                                                        backlog=BACKLOG))
        except BaseException:
            state_lock.release(self._lock)
            raise
        self._uv_thread: threading.Thread | None = None

    def _open(self, cluster: ClusterSpec, token: str | None, runtime, workdir, policy: Policy, backend, auth: bool,
              token_file, jobs_dir) -> None:
        """The token, the store, the backend and the loop, under the state folder's lock."""
        self.jobs_dir = Path(jobs_dir).absolute() if jobs_dir is not None else \
            private_jobs_dir(self.state_dir / "jobs")
        self.token_file = Path(token_file) if token_file else self.state_dir / TOKEN_FILE_NAME
        if not auth:
            self.token = None
        elif token:
            self.token = token
        else:
            self.token = load_or_create_token(self.token_file)
        self.store = Store(self.state_dir / "dlsched.db")
        self.backend = backend or make_backend(cluster, runtime=runtime, workdir=workdir)
        self.loop = LiveLoop(self.store, self.backend, cluster, self.state_dir, policy=policy, jobs_dir=self.jobs_dir)

    def validate(self, spec: JobSpec, source: str = "job spec", batch: tuple[JobSpec, ...] = ()) -> None:
        """Submit-time checks: an allowed entry point (``entries.py``, before any file is read), a checkpoint location
        of its own (``checkpoint_locations.py``; ``batch``: the specs of the same batch before it), the cluster and
        policy can run it, and its entry exists and takes its params."""
        entry, command = spec.entry, spec.command
        self.entries.check_spec(spec, source)
        if spec.checkpoint_uri is not None:
            self.checkpoints.check(spec.checkpoint_uri, self._live_locations() + [
                (f"jobs[{i}]", s.checkpoint_uri) for i, s in enumerate(batch) if s.checkpoint_uri], source)
        self.loop.validate(spec, source)
        if self.check_entries and spec.kind in ("train", "ensemble") and entry:   # an ensemble's loader takes params too
            check_entry(entry, spec.params, self.workdir, source)
        if self.check_entries and command:
            check_script(command, self.workdir, source)
        if self.check_entries and spec.kind == "ensemble":
            check_ensemble(spec.params, self.workdir, source)

    def _live_locations(self) -> list[tuple[str, str]]:
        return [(f"job {j.id}", j.spec.checkpoint_uri) for j in self.store.jobs(states=ACTIVE) if j.spec.checkpoint_uri]

    def claim_location(self, spec: JobSpec, source: str = "job spec") -> None:
        """``validate``'s check that ``spec``'s checkpoint location is no live job's, again inside the write
        transaction that stores it (``Store.submit``'s ``check``): two submissions of one location at once were both
        checked before either was stored, and both were accepted."""
        if spec.checkpoint_uri is not None:
            self.checkpoints.check(spec.checkpoint_uri, self._live_locations(), source)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        """What a client of this service sends with every request."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def run(self) -> None:
        """Foreground: loop thread + uvicorn until SIGINT/SIGTERM (uvicorn handles the signals)."""
        self.thread.start()
        try:
            self.server.run(sockets=self._sockets)
        finally:
            self.close()

    def start(self) -> "Service":
        """Background (tests): returns once the API answers."""
        self.thread.start()
        self._uv_thread = threading.Thread(target=self.server.run, kwargs={"sockets": self._sockets}, name="dlsched-api",
                                           daemon=True)
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
        for sock in self._sockets or ():
            sock.close()
        self.thread.stop()
        if self.thread.is_alive():
            self.thread.join(timeout=30)
        self.backend.shutdown()
        if not self.thread.is_alive():   # a loop still running keeps the store: no second service on it yet
            state_lock.release(self._lock)
            self._lock = None


logging.getLogger("dlsched.service").addHandler(logging.NullHandler())
