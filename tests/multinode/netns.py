"""A real multi-node Ray cluster on one machine: one network namespace per node, joined by veth pairs to a bridge.

Each node has its own IP on a private /24 the harness picks (unused on this machine), its own mount namespace
with a private tmpfs on ``/tmp`` and ``/dev/shm`` (nodes share no temp files, no Ray session dir, no plasma
store) and one directory bind-mounted at the same path in every node: the shared file system (NFS stand-in).
Node 0 runs the Ray head, the others join it with ``ray start``; each advertises its IP, a ``gpu_slot``-style
resource and a ``dlsched.io/node`` label. The host end of the bridge holds ``.254``, so the test process reaches
a service bound on a node's IP, and nothing leaves the bridge: no route beyond the /24 is added anywhere.

Names carry a random run tag (parallel runs and reruns never collide). Teardown kills exactly the processes
inside the namespaces this harness made, deletes them and the bridge, and runs even when setup failed half
way. ``NetnsUnavailable`` says why namespaces cannot be made: callers fail with it, never skip.
"""
from __future__ import annotations

import ipaddress
import json
import os
import random
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
# Ray on a busy 2-core box: no dashboard, a small object store, no CPUs to schedule plain tasks on; a dead
# raylet is declared dead in ~3 s (health checks every 0.5 s, 5 misses) rather than the default ~30 s.
RAY_ENV = {"RAY_health_check_initial_delay_ms": "0", "RAY_health_check_period_ms": "500",
           "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "5",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0", "OMP_NUM_THREADS": "1"}
OBJECT_STORE_BYTES = 80 * 1024 * 1024
HEAD_PORT = 6379     # inside node 0's own network namespace: nobody else's port


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no ``ip``, no veth/bridge support): the reason."""


@dataclass
class Node:
    index: int
    name: str          # dlsched.io/node label
    netns: str
    ip: str
    veth: str          # host end
    launcher: subprocess.Popen | None = None    # `ray start --block` inside the node's namespaces


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(args), capture_output=True, text=True)
    if check and p.returncode != 0:
        raise NetnsUnavailable(f"`{' '.join(args)}` failed ({p.returncode}): {(p.stderr or p.stdout).strip()}")
    return p


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 no interface on this machine (or in another run's namespaces on the bridge) uses."""
    used = _sh("ip", "-j", "addr").stdout
    nets = [ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
            for link in json.loads(used) for a in link.get("addr_info", []) if a.get("family") == "inet"]
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{random.randint(64, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(n) for n in nets):
            return net
    raise NetnsUnavailable("no free 10.x.y.0/24 test subnet")


class NetnsCluster:
    """``with NetnsCluster(4, head_slots=0) as c:`` - a Ray head on node 0 and workers on the rest; ``c.shared`` is the
    directory every node sees at the same path; ``c.run_on(i, argv)`` starts a process inside node ``i``."""

    def __init__(self, num_nodes: int = 3, slots_per_node: int = 1, resource: str = "gpu_slot",
                 ready_timeout_s: float = 120.0, head_slots: int | None = None):
        self.tag = secrets.token_hex(3)
        self.num_nodes, self.slots, self.resource = num_nodes, slots_per_node, resource
        self.head_slots = slots_per_node if head_slots is None else head_slots   # 0: a head without GPUs
        self.ready_timeout_s = ready_timeout_s
        self.bridge = f"dlsb{self.tag}"
        self.root = Path(tempfile.mkdtemp(prefix=f"dlsched-mn-{self.tag}-", dir="/var/tmp"))
        self.export = self.root / "export"         # what the "NFS server" exports
        self.shared = self.root / "shared"         # where every node mounts it (empty on the host)
        self.nodes: list[Node] = []
        self.procs: list[subprocess.Popen] = []    # everything run_on started
        self.net: ipaddress.IPv4Network | None = None

    # -- setup ------------------------------------------------------------------------------------
    def __enter__(self) -> "NetnsCluster":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        if os.geteuid() != 0:
            raise NetnsUnavailable(f"network namespaces need root (euid {os.geteuid()})")
        missing = [tool for tool in ("ip", "unshare", "nsenter") if shutil.which(tool) is None]
        if missing:
            raise NetnsUnavailable(f"missing {missing}: iproute2 and util-linux are needed")
        self.export.mkdir()
        self.shared.mkdir()
        self.net = _free_subnet()
        hosts = list(self.net.hosts())
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"{hosts[253]}/24", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        for i in range(self.num_nodes):
            node = Node(i, f"node{i}", f"dls{self.tag}n{i}", str(hosts[i]), f"dlsv{self.tag}{i}")
            self.nodes.append(node)
            peer = f"dlsp{self.tag}{i}"
            _sh("ip", "netns", "add", node.netns)
            _sh("ip", "link", "add", node.veth, "type", "veth", "peer", "name", peer)
            _sh("ip", "link", "set", peer, "netns", node.netns)
            _sh("ip", "link", "set", node.veth, "master", self.bridge)
            _sh("ip", "link", "set", node.veth, "up")
            inside = ["ip", "netns", "exec", node.netns]
            _sh(*inside, "ip", "link", "set", peer, "name", "eth0")
            _sh(*inside, "ip", "addr", "add", f"{node.ip}/24", "dev", "eth0")
            _sh(*inside, "ip", "link", "set", "eth0", "up")
            _sh(*inside, "ip", "link", "set", "lo", "up")
        for node in self.nodes:
            self.start_ray(node.index)
        self.wait_nodes(self.num_nodes - (self.head_slots == 0))

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def address(self) -> str:
        return f"{self.head.ip}:{HEAD_PORT}"

    def _inside(self, node: Node, argv: list[str]) -> list[str]:
        """argv run in the node's network namespace and a fresh private mount namespace of its own."""
        script = (f"mount -t tmpfs -o size=256m tmpfs /tmp && mount -t tmpfs -o size=256m tmpfs /dev/shm && "
                  f"mount --bind {shlex.quote(str(self.export))} {shlex.quote(str(self.shared))} && "
                  f"exec {shlex.join(argv)}")
        return ["ip", "netns", "exec", node.netns, "unshare", "--mount", "--propagation", "private",
                "sh", "-c", script]

    def _entered(self, node: Node, argv: list[str]) -> list[str]:
        """argv run inside the node's running namespaces (network and mount: a Ray driver must see its node's
        sockets under the node's private /tmp)."""
        if node.launcher is None or node.launcher.poll() is not None:
            raise RuntimeError(f"{node.name} is down")
        return ["nsenter", "--target", str(node.launcher.pid), "--net", "--mount", *argv]

    def _log(self, name: str):
        return open(self.root / f"{name}.log", "ab")

    def start_ray(self, i: int) -> None:
        """(Re)start node ``i``'s Ray processes (a node that comes back joins as a new Ray node)."""
        node = self.nodes[i]
        ray = str(VENV_BIN / "ray")
        argv = [ray, "start", "--block", "--node-ip-address", node.ip, "--num-cpus", "0",
                "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats",
                "--include-log-monitor", "false",
                "--resources", json.dumps({self.resource: self.head_slots if i == 0 else self.slots}),
                "--labels", f"dlsched.io/node={node.name}"]
        if i == 0:
            argv += ["--head", "--port", str(HEAD_PORT), "--include-dashboard", "false"]
        else:
            argv += ["--address", self.address]
        env = {**os.environ, **RAY_ENV, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}
        env.pop("RAY_ADDRESS", None)
        node.launcher = subprocess.Popen(self._inside(node, argv), env=env, stdout=self._log(f"{node.name}-ray"),
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def run_on(self, i: int, argv: list[str], env: dict[str, str] | None = None, log: str | None = None,
               cwd: str | Path | None = None) -> subprocess.Popen:
        """A process inside node ``i``'s namespaces (a Ray driver there talks to that node's raylet)."""
        node = self.nodes[i]
        full = {**os.environ, **RAY_ENV, **(env or {}), "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}
        p = subprocess.Popen(self._entered(node, argv), env=full, cwd=cwd,
                             stdout=self._log(log or f"{node.name}-proc"), stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(p)
        return p

    def ray_nodes(self) -> list[dict]:
        """``ray.nodes()`` as the head sees it (asked from inside node 0: a driver needs a local raylet)."""
        code = f"import json, ray; ray.init(address={self.address!r}, log_to_driver=False, logging_level='error'); " \
               "print(json.dumps([{k: n[k] for k in ('NodeID', 'NodeManagerAddress', 'Alive', 'Resources')} " \
               "for n in ray.nodes()]))"
        node = self.head
        try:
            p = subprocess.run(self._entered(node, [sys.executable, "-c", code]), capture_output=True, text=True,
                               env={**os.environ, **RAY_ENV}, timeout=60)
        except subprocess.TimeoutExpired:
            return []
        if p.returncode != 0:
            return []
        return json.loads(p.stdout.strip().splitlines()[-1])

    def wait_nodes(self, alive: int) -> list[dict]:
        """Until exactly ``alive`` nodes with the resource (GPU nodes) are alive (bounded; the Ray logs say why if not)."""
        deadline = time.monotonic() + self.ready_timeout_s
        seen: list[dict] = []
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.launcher is not None and node.launcher.poll() is not None and node.index == 0:
                    raise RuntimeError(f"the Ray head exited ({node.launcher.returncode}): {self.log_tail('node0-ray')}")
            seen = [n for n in self.ray_nodes() if n["Alive"] and n["Resources"].get(self.resource)]
            if len(seen) == alive:
                return seen
            time.sleep(0.5)
        raise RuntimeError(f"{len(seen)} of {alive} Ray nodes alive after {self.ready_timeout_s:.0f} s: "
                           f"{self.log_tail('node0-ray')}")

    def log_tail(self, name: str, n: int = 5) -> str:
        try:
            return " | ".join((self.root / f"{name}.log").read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    # -- faults -----------------------------------------------------------------------------------
    def pids(self, i: int) -> list[int]:
        out = _sh("ip", "netns", "pids", self.nodes[i].netns, check=False).stdout
        return [int(x) for x in out.split()]

    def raylet_pid(self, i: int) -> int | None:
        for pid in self.pids(i):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "raylet":
                    return pid
            except OSError:
                pass
        return None

    def kill_raylet(self, i: int) -> int:
        """SIGKILL node ``i``'s raylet: the node's Ray workers (and so its dlsched workers) die with it."""
        pid = self.raylet_pid(i)
        if pid is None:
            raise RuntimeError(f"node {i} has no raylet")
        os.kill(pid, signal.SIGKILL)
        return pid

    def kill_node(self, i: int) -> None:
        """Every process in node ``i``'s namespace, at once (a power cut); the namespace stays for a restart."""
        for _ in range(5):
            pids = self.pids(i)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)

    def link(self, i: int, up: bool) -> None:
        """Cut (or restore) node ``i``'s cable: its host-side veth goes down."""
        _sh("ip", "link", "set", self.nodes[i].veth, "up" if up else "down")

    # -- teardown ---------------------------------------------------------------------------------
    def close(self) -> None:
        for node in self.nodes:
            self.kill_node(node.index)
        for p in [*self.procs, *(n.launcher for n in self.nodes if n.launcher)]:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for node in self.nodes:
            _sh("ip", "netns", "del", node.netns, check=False)
        _sh("ip", "link", "del", self.bridge, check=False)
        keep = os.environ.get("DLSCHED_NETNS_KEEP")     # a directory: the run's logs and shared files go there
        if keep:
            shutil.copytree(self.root, Path(keep) / self.root.name, ignore=shutil.ignore_patterns("shared"),
                            dirs_exist_ok=True)
        shutil.rmtree(self.root, ignore_errors=True)
