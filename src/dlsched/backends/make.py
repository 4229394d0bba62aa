"""Which backend a service runs its jobs on: the one place that turns a cluster declaration into a backend."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from dlsched.backends.base import Backend
from dlsched.spec import ClusterSpec


def make_backend(cluster: ClusterSpec, runtime: Sequence[str] | None = None, workdir: str | Path | None = None,
                 ray_address: str = "auto", gpu_resource: str = "GPU") -> Backend:
    """``cluster.backend``: ``local`` (this machine's GPUs, the declared nodes) or ``ray`` (the Ray cluster at
    ``ray_address``, one ``gpu_resource`` per worker). Ray is imported only when asked for."""
    if cluster.backend == "ray":
        from dlsched.backends.ray import RayBackend

        return RayBackend(address=ray_address, gpu_resource=gpu_resource, runtime=runtime, cwd=workdir)
    from dlsched.backends.local import LocalBackend

    return LocalBackend(runtime=runtime, cwd=workdir, nodes=cluster.nodes)
