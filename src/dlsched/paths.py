"""Where the shared real data lives. ``DLSCHED_SHARED_DATA`` overrides; else ``<repo>/../shared/data``."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SRC = str(Path(__file__).resolve().parents[1])   # .../src: child processes find dlsched without an install


def pythonpath_with_src(existing: str | None) -> str:
    """``PYTHONPATH`` for a child process (runtime, guard, Ray worker): this checkout's src first (once: a worker's
    is its runtime's, itself the backend's; the Ray node's server is chosen by it, ``runtime_forkserver``)."""
    rest = [p for p in (existing or "").split(os.pathsep) if p and p != str(SRC)]
    return os.pathsep.join([str(SRC), *rest])


def shared_data() -> Path:
    env = os.environ.get("DLSCHED_SHARED_DATA")
    p = Path(env) if env else REPO_ROOT.parent / "shared" / "data"
    if not p.is_dir():
        raise FileNotFoundError(f"shared data folder not found at {p} (set DLSCHED_SHARED_DATA)")
    return p
