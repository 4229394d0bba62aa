"""The live nodes of a Ray cluster as dlsched names and sees them (labels set by ``ray start --labels``)."""
from __future__ import annotations

import socket

from dlsched.policy.base import NodeView

NODE_LABEL = "dlsched.io/node"          # `ray start --labels "dlsched.io/node=gpu-a"` names a node
GPU_TYPE_LABEL = "dlsched.io/gpu-type"


class RayNodes:
    """Ray's live nodes: their names, the policy's view of those with ``gpu_resource``, their addresses."""

    def __init__(self, ray, gpu_resource: str) -> None:
        self._ray = ray
        self.gpu_resource = gpu_resource

    def alive(self) -> dict[str, dict]:
        return {n["NodeID"]: n for n in self._ray.nodes() if n["Alive"]}

    @staticmethod
    def name(node: dict) -> str:
        return (node.get("Labels") or {}).get(NODE_LABEL) or node["NodeID"][:12]

    def names(self) -> dict[str, str]:
        """Ray node id -> node name, for the live nodes."""
        return {nid: self.name(n) for nid, n in self.alive().items()}

    def views(self) -> tuple[NodeView, ...]:
        """Live nodes that carry the GPU resource, as a policy sees them (the cluster declaration on Ray)."""
        out = []
        for n in self.alive().values():
            res = n.get("Resources", {})
            gpus = int(res.get(self.gpu_resource, 0))
            if gpus > 0:
                gpu_type = (n.get("Labels") or {}).get(GPU_TYPE_LABEL, "generic")
                out.append(NodeView(self.name(n), gpus, gpu_type, int(res.get("CPU", 0))))
        return tuple(sorted(out, key=lambda v: v.name))

    def custom_resources(self) -> list[str]:
        """The resources live nodes declare beyond Ray's own (CPU, GPU, memory, node:..., accelerator_type:...)."""
        own = ("CPU", "GPU", "memory", "object_store_memory")
        return sorted({r for n in self.alive().values() for r in n.get("Resources", {})
                       if r not in own and not r.startswith(("node:", "accelerator_type:"))})

    def raylet_answers(self, node_id: str, timeout_s: float = 1.0) -> bool:
        """Whether the node's raylet accepts a connection: a killed raylet's port refuses at once, long before
        Ray's health checks declare its node dead."""
        node = self.alive().get(node_id)
        if node is None:
            return False
        try:
            socket.create_connection((node["NodeManagerAddress"], int(node["NodeManagerPort"])), timeout_s).close()
        except (OSError, KeyError, ValueError):
            return False
        return True

    def death_detection_s(self) -> float:
        """The longest Ray takes to declare a dead node dead: its health-check settings (the cluster's, which
        ``ray.init`` hands the driver)."""
        try:
            cfg = self._ray._config
            ms = (cfg.health_check_initial_delay_ms() + cfg.health_check_timeout_ms()
                  + cfg.health_check_period_ms() * cfg.health_check_failure_threshold())
        except AttributeError:   # Ray's private config moved: its documented defaults
            ms = 5_000 + 10_000 + 3_000 * 5
        return ms / 1000

    def addresses(self) -> dict[str, str]:
        """node name -> the IP Ray reaches it at, for the live nodes."""
        return {self.name(n): n.get("NodeManagerAddress", "") for n in self.alive().values()}
