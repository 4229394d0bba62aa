"""Cutting a generation's collective off from peers whose node fell off the network.

A peer whose process dies closes its sockets, so the survivors' all-reduce fails at once. A peer whose node's
link went down closes nothing: the survivors would block in gloo until the process-group timeout (60 s;
gloo's ``abort`` does not interrupt a collective already waiting). So once the coordinator declares workers
lost, it publishes their node IPs (``lost_key``; from ``DIR/logs/worker-<id>.host.json``, minus the
survivors' own IPs), and each survivor's ``CutWatch`` shuts down its TCP sockets to those IPs: gloo sees
"connection closed", the step fails like a crashed peer's, and the shrink goes on from the state held.
"""
from __future__ import annotations

import ipaddress
import json
import os
import socket
import threading
from pathlib import Path

import torch.distributed as dist

from dlsched.train.protocol import lost_key
from dlsched.train.store_client import connect_store

POLL_S = 0.2   # a lost node is declared dead after seconds (Ray's health checks): 0.2 s adds little


def _node_ip(job_dir: Path, wid: int) -> str | None:
    try:
        return json.loads((Path(job_dir) / "logs" / f"worker-{wid}.host.json").read_text()).get("node_ip")
    except (OSError, ValueError, AttributeError):
        return None     # a local worker (no host file): it shares the machine, its death closes its sockets


def publish_lost(store: dist.TCPStore, generation: int, job_dir: Path, dead: list[int], survivors: list[int]) -> None:
    """Tell the survivors of ``generation`` which peer IPs to cut (none on a survivor's own node: that
    node's loopback and raylet connections share its IP)."""
    ips = {_node_ip(job_dir, w) for w in dead} - {_node_ip(job_dir, w) for w in survivors} - {None}
    store.set(lost_key(generation), json.dumps(sorted(ips)))


def shut_sockets_to(ips: set[str]) -> int:
    """Shut down (not close: the fds stay gloo's) this process's TCP sockets whose peer is in ``ips``."""
    want = {ipaddress.ip_address(ip) for ip in ips}
    cut = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=int(name))
        except OSError:
            continue        # closed meanwhile, or not an inet socket
        try:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                peer = ipaddress.ip_address(sock.getpeername()[0])
                peer = getattr(peer, "ipv4_mapped", None) or peer
                if peer in want:
                    sock.shutdown(socket.SHUT_RDWR)
                    cut += 1
        except (OSError, ValueError):
            pass            # not connected
        finally:
            sock.detach()
    return cut


class CutWatch:
    """``with CutWatch(store, generation):`` around a generation's training: a thread on its own store
    connection (the main thread may be inside a store call) that cuts the peers ``lost_key`` names."""

    def __init__(self, store: dist.TCPStore, generation: int):
        self.address, self.key = f"{store.host}:{store.port}", lost_key(generation)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="dlsched-cut-watch", daemon=True)

    def __enter__(self) -> "CutWatch":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join(timeout=2 * POLL_S)   # daemon: a thread stuck connecting cannot hold the worker

    def _watch(self) -> None:
        try:
            store = connect_store(self.address, timeout_s=30)
            while not self.done.wait(POLL_S):
                if store.check([self.key]) and not self.done.is_set():
                    shut_sockets_to(set(json.loads(store.get(self.key))))
                    return
        except (RuntimeError, OSError, ValueError):
            return          # the store is gone: the coordinator ended, the worker exits on its own
