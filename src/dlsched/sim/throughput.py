"""Throughput models the simulator gives policies: a trace job's (``perf.pollux``) and a duration job's (Philly,
Gavel), both scaled by the cluster's per-GPU-type speed factors."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from dlsched.perf.pollux import TraceApp, even_placement, packed_placement

GpuSpeeds = tuple[tuple[str, float], ...]   # hashable (speed models key policies' memo tables)


def speed_factor(gpu_speed: Mapping[str, float], gpu_type: str | None, app: str | None = None) -> float:
    """How much faster than the traced GPU a ``gpu_type`` runs ``app``: the ``"TYPE/APP"`` entry when given (Gavel's
    point: speed-ups differ per model), else the ``"TYPE"`` entry, else 1. No type (a policy that does not ask): 1."""
    if gpu_type is None:
        return 1.0
    if app is not None and f"{gpu_type}/{app}" in gpu_speed:
        return float(gpu_speed[f"{gpu_type}/{app}"])
    return float(gpu_speed.get(gpu_type, 1.0))


@dataclass(frozen=True)
class TraceThroughput:
    """ThroughputModel of a trace job at its current epoch: samples/s from the traces, efficiency from the gain.

    ``throughput`` assumes the GPUs are packed ``gpus_per_node`` to a node when ``num_nodes`` allows it, else spread
    evenly; the nominal global batch is what the job processes per step. (The peer's Optimus estimate also makes a
    1-GPU job at the initial batch accumulate twice; on workloads 1-4 that changes no decision, so it is not kept.)
    On a ``gpu_type`` the step is ``speed_factor(gpu_speed, gpu_type, app)`` times faster, as the simulator runs it.
    """

    app: TraceApp
    epoch: int
    gpus_per_node: int = 4
    gpu_speed: GpuSpeeds = ()

    def placement_for(self, num_gpus: int, num_nodes: int) -> tuple[int, ...]:
        packed = packed_placement(num_gpus, self.gpus_per_node)
        if len(packed) == num_nodes or num_nodes <= 0:
            return packed
        return even_placement(num_gpus, min(num_nodes, num_gpus))

    def iteration_time(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float:
        split = self.app.split_batch(global_batch, num_gpus)
        factor = speed_factor(dict(self.gpu_speed), gpu_type, self.app.name) if self.gpu_speed else 1.0
        return self.app.iteration_time(self.placement_for(num_gpus, num_nodes), split) / factor

    def throughput(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float:
        """Samples/s; 0 for a configuration the job cannot run (per-GPU batch below the smallest measured,
        or outside what the traces cover) so that policies probing it simply see no benefit."""
        if num_gpus <= 0 or global_batch / num_gpus < self.app.min_local_bsz:
            return 0.0
        try:
            return global_batch / self.iteration_time(num_gpus, num_nodes, global_batch, gpu_type)
        except ValueError:
            return 0.0

    def efficiency(self, global_batch: int) -> float:
        b = min(max(global_batch, self.app.init_batch_size), self.app.max_batch_size)
        return self.app.efficiency(b, min(self.epoch, self.app.max_epochs - 1))


@dataclass(frozen=True)
class LinearThroughput:
    """ThroughputModel of a duration-driven job (Philly): work in GPU-seconds-at-request, linear in GPUs."""

    requested_gpus: int
    gpu_speed: GpuSpeeds = ()

    def throughput(self, num_gpus: int, num_nodes: int, global_batch: int, gpu_type: str | None = None) -> float:
        factor = speed_factor(dict(self.gpu_speed), gpu_type) if self.gpu_speed else 1.0
        return min(num_gpus, self.requested_gpus) / self.requested_gpus * factor

    def efficiency(self, global_batch: int) -> float:
        return 1.0
