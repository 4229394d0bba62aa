"""Cutting the sockets to lost peers (dlsched.train.peer_cut): real loopback sockets, a real TCPStore."""
from __future__ import annotations

import json
import socket
from datetime import timedelta

import torch.distributed as dist

from dlsched.train import peer_cut
from dlsched.train.files import atomic_write_json
from dlsched.train.protocol import lost_key

from tests.waiting import wait_until


def _pair(ip: str) -> tuple[socket.socket, socket.socket, socket.socket]:
    server = socket.create_server((ip, 0))
    client = socket.create_connection(server.getsockname(), timeout=10)
    accepted, _ = server.accept()
    return server, client, accepted


def test_only_the_sockets_to_the_lost_ips_are_shut_and_stay_open_fds():
    lost, kept = _pair("127.0.0.2"), _pair("127.0.0.1")
    try:
        assert peer_cut.shut_sockets_to({"127.0.0.2"}) >= 1
        assert lost[1].recv(1) == b"" and lost[1].fileno() >= 0        # shut: EOF, yet the fd is still ours
        kept[2].sendall(b"x")
        assert kept[1].recv(1) == b"x"                                 # another peer's link is untouched
    finally:
        for s in (*lost, *kept):
            s.close()


def test_the_coordinator_names_the_lost_nodes_ips_but_never_a_survivors(tmp_path):
    (tmp_path / "logs").mkdir()
    for wid, ip in ((0, "10.9.0.1"), (1, "10.9.0.2"), (2, "10.9.0.3"), (3, "10.9.0.1")):
        atomic_write_json(tmp_path / "logs" / f"worker-{wid}.host.json", {"worker_id": wid, "node_ip": ip})
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=10))
    peer_cut.publish_lost(store, 4, tmp_path, dead=[2, 3, 7], survivors=[0, 1])   # 7: a local worker, no file
    assert json.loads(store.get(lost_key(4))) == ["10.9.0.3"]


def test_a_watch_cuts_once_the_lost_key_appears():
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=10))
    server, client, accepted = _pair("127.0.0.3")
    try:
        with peer_cut.CutWatch(store, 2):
            client.settimeout(0.5)
            store.set(lost_key(2), json.dumps(["127.0.0.3"]))
            def cut():
                try:
                    return client.recv(1) == b""
                except TimeoutError:
                    return False
            wait_until(cut, 60, "the socket to the lost peer shut")
    finally:
        for s in (server, client, accepted):
            s.close()
