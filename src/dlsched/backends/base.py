"""What the live loop asks of a backend, and the file side of the job runtime contract.

A backend turns decisions into processes: ``start`` (also resumes: the runtime restarts from the latest
checkpoint in the job directory), ``resize`` (elastic: write ``control.json`` with a higher generation),
``stop`` (preempt or cancel; the checkpoint stays), ``poll`` and ``attach`` (after a service restart), ``release``
(the slots a resize gave back with ``hold_given_back`` may go to other jobs now).
Progress always comes back through ``DIR/progress.jsonl`` and ``DIR/status.json`` (contract in
``dlsched.train``), so reading them is shared here rather than per backend.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping, Protocol

from dlsched.numbers import is_number
from dlsched.policy.base import NodeView
from dlsched.spec import JobSpec
from dlsched.train.files import (appended_lines, atomic_write_json, open_regular, read_regular,  # noqa: F401
                                 read_status, write_control)   # (one implementation, re-exported)
from dlsched.train.progress_log import read_lines, unread_bytes

ProcState = Literal["running", "finished", "failed", "gone"]


@dataclass(frozen=True)
class Launch:
    """Everything a backend needs to (re)start or resize one job (``placement``: node -> workers, empty: the
    backend's choice; ``generation``: the control generation this start or resize is; ``hold_given_back``: the
    slots this resize takes from the job stay booked, to no job, until ``Backend.release``: its processes may still
    use them, after a shrink, a move or a grow given up unconfirmed, ``service/slot_holds.py``)."""

    job_id: int
    spec: JobSpec
    job_dir: Path
    num_gpus: int
    batch_size: int | None
    placement: Mapping[str, int] = field(default_factory=dict)
    generation: int = 0
    hold_given_back: bool = False


@dataclass(frozen=True)
class PollResult:
    state: ProcState
    error: str | None = None
    # node -> workers the job holds now, when that changed without the loop asking (workers lost with a node)
    nodes: Mapping[str, int] | None = None
    # "gone" because an earlier coordinator still held the job folder (train/fence.py): nothing was touched
    fenced: bool = False


class Backend(Protocol):
    name: str

    def start(self, launch: Launch) -> None: ...

    def resize(self, launch: Launch) -> None: ...

    def stop(self, job_id: int, job_dir: Path) -> None: ...

    def poll(self, job_id: int, job_dir: Path) -> PollResult: ...

    def attach(self, job_id: int, job_dir: Path) -> bool: ...

    def shutdown(self) -> None: ...

    def release(self, job_id: int, job_dir: Path) -> None:
        """The job trains at its booked size: slots its resizes held back (``hold_given_back``) are free now. A
        backend whose given-back slots stay reserved until their workers have left by itself (Ray) has none."""
        return None

    def placement(self, job_id: int) -> dict[str, int] | None:
        """node name -> workers the job holds now, in its workers' rank order, where the backend decides that itself
        (Ray: its slots, which differ from those asked for a node that died since the round's view, or a shrink, which
        keeps the runtime's first workers wherever they run); None: where it was asked."""
        return None

    def booked(self, job_id: int) -> dict[str, int] | None:
        """node name -> slots the backend's own books give the job (a re-attached job's come back from its folder);
        None where it keeps none."""
        return self.placement(job_id)

    def nodes(self) -> tuple[NodeView, ...] | None:
        """The live nodes, where the backend knows them (Ray: a lost node vanishes); None: the declared cluster."""
        return None

    def addresses(self) -> dict[str, str]:
        """node name -> the address it is reached at, where the backend knows it (Ray); {}: this machine."""
        return {}


# a step record's numeric fields, as the loop, the store and the refit read them; job code computes some of them
# (total_samples = a make_job's epochs x num_samples: params: {epochs: "abc"} made it a 1 500-character string)
STEP_NUMBERS = ("time", "step", "epoch", "samples", "total_samples", "loss", "samples_per_s", "workers", "batch_size",
                "member_step")


def _bad_numbers(rec: dict) -> list[str]:
    """The fields of a step record that are present but not a number (NaN/inf loss stays: a diverging job), or an
    integer past SQLite's 64 bits (``"step": 1e23`` written as digits raised OverflowError in every round)."""
    return [k for k in STEP_NUMBERS if rec.get(k) is not None
            and (not is_number(rec[k]) or isinstance(rec[k], int) and not -(1 << 63) <= rec[k] < 1 << 63)]


def _untimed(rec: dict) -> bool:
    """A step record without a finite ``time`` (the store's row needs one: NaN is stored as NULL)."""
    t = rec.get("time")
    return not (is_number(t) and math.isfinite(t))


def read_progress(job_dir: Path, offset: int, max_bytes: int = 4 << 20) -> tuple[list[dict], int]:
    """New complete lines of ``progress.jsonl`` from byte ``offset``; returns (records, new offset).

    A partial last line is left for the next read; one longer than ``max_bytes`` is skipped (reported as below,
    its rest too: job code writes it, and waiting for its end stalled the job's progress for good). A line that is not a JSON object is returned as an
    ``{"event": "malformed_progress", ...}`` record so that the loop logs it instead of dropping it silently.
    A step record's field that is not a number (``STEP_NUMBERS``) is read as absent, and the first such field of
    the read is reported as one ``malformed_progress`` record naming it: a string there raised in every scheduling
    round, so the service stopped ending, starting and observing every job. A step record without a finite
    ``time`` is left out, reported so too (its row failed the store's NOT NULL in every round, as above).
    """
    lines, end, skipped = read_lines(job_dir, offset, max_bytes)   # logical offsets, across rotations
    if skipped is not None:   # a rotated segment gone (moved, compressed by hand), or cut by a torn line
        return [{"event": "malformed_progress", "offset": offset,
                 "line": f"bytes {skipped[0]}-{skipped[1]} of the log are in no file (a segment moved or cut), "
                         "skipped"}], end
    if end == offset and max_bytes > 0 and unread_bytes(job_dir, offset) >= max_bytes:
        # one line longer than a read: waiting for its end read it again forever
        return [{"event": "malformed_progress", "offset": offset, "line": f"a line over {max_bytes} bytes, skipped"}], \
            offset + max_bytes
    records, bad_field = [], None
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
        except ValueError:
            rec = {"event": "malformed_progress", "offset": offset, "line": line[:200].decode("utf-8", "replace")}
        if "event" not in rec and _untimed(rec):
            bad_field = bad_field or {"event": "malformed_progress", "offset": offset, "field": "time",
                                      "value": repr(rec.get("time"))[:80], "step": rec.get("step")}
            continue
        bad = _bad_numbers(rec) if "event" not in rec else []
        if bad and not bad_field:
            bad_field = {"event": "malformed_progress", "offset": offset, "field": bad[0],
                         "value": repr(rec[bad[0]])[:80], "step": rec.get("step") if "step" not in bad else None}
        rec.update(dict.fromkeys(bad))
        records.append(rec)
    return records + ([bad_field] if bad_field else []), end


def runtime_command(runtime: list[str], launch: Launch) -> list[str]:
    """The job runtime's start command for a launch (the contract: docs/runtime.md), for every backend."""
    servers = launch.spec.num_servers  # a parameter-server job's slots hold its servers too
    cmd = [*runtime, "--job-dir", str(launch.job_dir), "--workers", str(launch.num_gpus - servers)]
    if launch.spec.entry is not None:
        cmd += ["--entry", launch.spec.entry]
    if servers:
        cmd += ["--strategy", "ps", "--servers", str(servers), "--sync", launch.spec.sync]
        cmd += ["--sparse"] if launch.spec.sparse else []
    if launch.spec.kind == "ensemble":
        cmd += ["--strategy", "fleet"]
    if launch.batch_size is not None:
        cmd += ["--batch-size", str(launch.batch_size)]
    if launch.spec.batch_size is not None:  # the spec's lr (a param) is the LR at the spec's batch_size
        cmd += ["--reference-batch-size", str(launch.spec.batch_size)]
    if launch.spec.checkpoint_uri is not None:  # shared storage every node reaches (docs/storage.md)
        cmd += ["--checkpoint-uri", launch.spec.checkpoint_uri]
    for k, v in launch.spec.params.items():
        cmd += ["--param", f"{k}={v}"]
    if launch.spec.command is not None and launch.spec.max_local_batch is not None:
        cmd += ["--max-local-batch", str(launch.spec.max_local_batch)]   # ElasticDataLoader's default
    if launch.spec.command is not None:
        cmd += ["--", *launch.spec.command]
    return cmd


OUTPUT_TAIL_BYTES = 64 << 10   # a failure's last output lines are found in this much of the output's end


def output_tail(job_dir: Path, n: int = 1) -> str:
    """': <last n non-empty lines of the job's output.log>' (at most 300 chars), or '' — appended to failures."""
    try:   # its end only: a job's output may be gigabytes, and it was read whole into the service's memory
        with open_regular(Path(job_dir) / "output.log") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - OUTPUT_TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [x for x in text.splitlines() if x.strip()]
    return (": " + " | ".join(lines[-n:])[:300]) if lines else ""


def ended_unwatched(job_dir: Path) -> PollResult:
    """A job no live process of this service's backend runs: how its folder says it ended. A failure stands (it
    is not run again); 'gone' (resumed from its checkpoint) where it neither finished nor failed."""
    status = read_status(job_dir) or {}
    if status.get("state") == "failed":
        return PollResult("failed", status.get("error") or "failed" + output_tail(job_dir))
    return PollResult("finished" if status.get("state") == "finished" else "gone")
