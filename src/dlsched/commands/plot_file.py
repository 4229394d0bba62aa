"""The ``--plot PATH`` of the predict commands: checked before the fit, written with one clear error line.

An unwritable path (a missing folder, a folder itself, a file as folder) was an ``OSError`` traceback, exit 1,
after the prediction had printed."""
from __future__ import annotations

import os
from pathlib import Path

from dlsched.errors import UserError


def check_plot_path(path: Path) -> None:
    folder = path.parent
    if path.is_dir():
        raise UserError(f"--plot {str(path)!r}: is a folder; give a file name such as {str(path / 'plot.png')!r}")
    if not folder.is_dir():
        why = "is a file, not a folder" if folder.exists() else "does not exist"
        raise UserError(f"--plot {str(path)!r}: {str(folder)!r} {why}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"--plot {str(path)!r}: folder {str(folder)!r} is not writable")


def save_figure(fig, path: Path, dpi: int) -> None:
    try:
        fig.savefig(path, dpi=dpi)
    except OSError as e:
        raise UserError(f"--plot {str(path)!r}: cannot write: {e.strerror or e}") from None
