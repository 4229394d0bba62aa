"""Jobs whose books name a node the cluster does not have.

A service restarted with a cluster file that no longer declares a node a running job sits on crashed every
scheduling round and every forecast (``KeyError: 'n0'`` in the policies' per-node counts): new jobs stayed queued
for good, without a word at startup. Two rules:

* at a restart (``recovery``), a re-attached job placed on a node the declaration lacks, or on one it now gives fewer
  slots than the jobs re-attached before it and this one hold there (``over_booked``), is stopped at a checkpoint
  and re-queued: it resumes where there are slots. The ``queued`` event and the service's log name the nodes;
* no round or forecast ever hands a policy such a job (``hold_out``): it is left as it is for that round (its GPUs
  on the nodes the view has stay taken), and the log says so once. With the Ray backend the view is the live nodes,
  and a job's books name a lost node until the next poll shrinks them (``LiveLoop.round``'s order); with the local
  backend ``recovery`` has already re-queued it.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Iterable, Mapping, Sequence

from dlsched.policy.base import ClusterView
from dlsched.service.store import JobRecord

log = logging.getLogger("dlsched.service")


def unknown_nodes(job: JobRecord, known: Iterable[str]) -> list[str]:
    """The nodes of ``job``'s placement not in ``known``, in name order."""
    return sorted(set(job.placement) - set(known))


def over_booked(job: JobRecord, slots: Mapping[str, int], used: Mapping[str, int]) -> list[str]:
    """The nodes where ``job``'s workers and those of the jobs kept before it (``used``) exceed the slots the
    declaration gives now, in name order: a restart with fewer slots on a node than its jobs held there failed every
    round and forecast (``allocation over-subscribes nodes``), and no queued job ever started."""
    return sorted(n for n, k in job.placement.items() if n in slots and used.get(n, 0) + k > slots[n])


def hold_out(view: ClusterView, jobs: Sequence[JobRecord]) -> tuple[list[JobRecord], ClusterView, dict[int, list[str]]]:
    """(the jobs a round may decide on, ``view`` less the GPUs the others hold on its nodes, the others' unknown
    nodes by job id): the others are the jobs placed on a node ``view`` lacks."""
    names = {n.name for n in view.nodes}
    out = {j.id: bad for j in jobs if (bad := unknown_nodes(j, names))}
    if not out:
        return list(jobs), view, {}
    held: dict[str, int] = {}
    for j in jobs:
        if j.id in out:
            for node, k in j.placement.items():
                held[node] = held.get(node, 0) + k
    view = dataclasses.replace(view, nodes=tuple(
        dataclasses.replace(n, num_gpus=max(0, n.num_gpus - held.get(n.name, 0))) for n in view.nodes))
    return [j for j in jobs if j.id not in out], view, out


class HeldOut:
    """``hold_out`` for the live rounds: the log says once which job is held out and why (again if its nodes change)."""

    def __init__(self) -> None:
        self.jobs: dict[int, list[str]] = {}   # the last round's: job id -> its unknown nodes

    def __call__(self, view: ClusterView, jobs: Sequence[JobRecord]) -> tuple[list[JobRecord], ClusterView]:
        kept, view, out = hold_out(view, jobs)
        for job_id, nodes in out.items():
            if self.jobs.get(job_id) != nodes:
                log.warning("job %d is placed on node(s) %s, which the cluster does not have: left as it is, out of "
                            "the scheduling rounds, until its books change", job_id, ", ".join(nodes))
        self.jobs = out
        return kept, view
