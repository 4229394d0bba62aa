"""A client connection to a job's TCPStore (the coordinator hosts it; workers, user scripts and their watch
threads connect). One place for the address format and the timeout."""
from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

CONNECT_TIMEOUT_S = 60.0


def connect_store(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> dist.TCPStore:
    """``address`` is ``host:port``; an IPv6 host may contain colons, so the port is after the last one."""
    host, port = address.rsplit(":", 1)
    return dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=timeout_s))
