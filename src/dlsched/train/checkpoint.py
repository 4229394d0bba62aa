"""Atomic, self-checking checkpoints.

File layout: one JSON header line ``{"format": "dlsched-checkpoint", "version": 1, "job": NAME,
"step": S, "bytes": N, "sha256": H}`` followed by N bytes of ``torch.save`` payload. Written to a
temp file in the same folder, fsynced, then ``os.replace``d, so a reader sees the old file or the
new one, never half. A file that is truncated or altered (unreadable header, size/hash mismatch) is
*torn*; one with another format's header or made for another job is *foreign*. Loading refuses both with
a one-line error. Resuming (``storage.CheckpointStore.newest_valid``) skips torn files, newest first, renaming each to
``*.torn`` (kept for a post-mortem, never read or counted again), and falls back to the newest valid one:
a torn file holds no state, and the older checkpoint's state is exactly what the job had at its step.
A foreign file stops the resume instead: resuming from another job's state would lose or repeat samples.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

from dlsched.errors import UserError
from dlsched.train.files import atomic_file

FORMAT = "dlsched-checkpoint"
VERSION = 1
_NAME = re.compile(r"^step-(\d{9})\.ckpt$")


def checkpoint_path(ckpt_dir: Path, step: int) -> Path:
    return Path(ckpt_dir) / f"step-{step:09d}.ckpt"


def encode_checkpoint(job_name: str, step: int, state: dict[str, Any]) -> bytes:
    """The checkpoint file's bytes: header line + ``torch.save`` payload (see the module doc)."""
    import torch  # here, not at the top: the service and the CLI's checks reach this module and never need torch

    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    header = {"format": FORMAT, "version": VERSION, "job": job_name, "step": step,
              "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    return json.dumps(header).encode() + b"\n" + payload


def save_checkpoint(ckpt_dir: Path, job_name: str, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` atomically as the checkpoint of ``step``; keep the newest ``keep`` files."""
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(ckpt_dir, step)
    with atomic_file(final, "wb") as f:
        f.write(encode_checkpoint(job_name, step, state))
    for old in list_checkpoints(ckpt_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return final


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Checkpoint files (temp files excluded), oldest first."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    return sorted(p for p in ckpt_dir.iterdir() if _NAME.match(p.name))


class TornCheckpoint(UserError):
    """A checkpoint cut short or altered: it holds no usable state."""


def load_checkpoint(path: Path, job_name: str) -> dict[str, Any]:
    """Read and verify one checkpoint; raise UserError (``TornCheckpoint`` when torn) naming the file and defect."""
    return decode_checkpoint(Path(path).read_bytes(), str(path), job_name)


def decode_checkpoint(blob: bytes, where: str, job_name: str) -> dict[str, Any]:
    """Verify and unpack a checkpoint's bytes; errors name ``where`` (its file or URI)."""
    cut = blob.find(b"\n", 0, 4096)
    line, payload = (blob[:cut + 1], blob[cut + 1:]) if cut >= 0 else (blob[:4096], b"")
    try:
        header = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        if not line or line.startswith(b'{"format"'):   # ours, cut short before or inside its header
            raise TornCheckpoint(f"{where}: torn checkpoint (header cut short)") from None
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise UserError(f"{where}: foreign checkpoint (no {FORMAT} header)")
    if header.get("version") != VERSION:
        raise UserError(f"{where}: field version={header.get('version')!r}, this runtime reads version {VERSION}")
    if header.get("job") != job_name:
        raise UserError(f"{where}: foreign checkpoint, field job={header.get('job')!r} but this job is {job_name!r}")
    if len(payload) != header.get("bytes") or hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise TornCheckpoint(f"{where}: torn checkpoint ({len(payload)} of {header['bytes']} payload bytes, or hash mismatch)")
    import torch

    return torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")  # restores on a GPU-less worker too
