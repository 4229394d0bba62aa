"""The worker-launch seam: which launcher a runtime picks, and its one-line errors.

The local launcher's behaviour is exercised by every coordinator test (tests/train); the Ray launcher by
tests/backends/test_ray.py against a real local Ray cluster."""
from __future__ import annotations

import pytest

from dlsched.errors import UserError
from dlsched.train.coordinator import Options
from dlsched.train.launcher import RAY_ADDRESS_ENV, LocalLauncher, default_launcher, make_launcher


def test_runtime_forks_locally_unless_the_ray_backend_gave_it_a_cluster(monkeypatch, tmp_path):
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    assert default_launcher() == "local"
    assert Options(job_dir=tmp_path, entry="x.py:make_job", workers=1).launcher == "local"
    assert isinstance(make_launcher("local", tmp_path), LocalLauncher)
    monkeypatch.setenv(RAY_ADDRESS_ENV, "10.0.0.1:6379")
    assert default_launcher() == "ray"


def test_ray_launcher_turns_straggler_replacement_off(tmp_path):
    """A replacement would need a bundle while the straggler still holds its own."""
    assert Options(job_dir=tmp_path, entry="x.py:make_job", workers=2, launcher="ray").replace_stragglers is False
    assert Options(job_dir=tmp_path, entry="x.py:make_job", workers=2, launcher="local").replace_stragglers is True


def test_bad_launcher_choices_are_one_line_errors(monkeypatch, tmp_path):
    with pytest.raises(UserError, match="launcher 'slurm': expected 'local' or 'ray'"):
        make_launcher("slurm", tmp_path)
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    with pytest.raises(UserError, match=f"needs the Ray cluster address in \\${RAY_ADDRESS_ENV}"):
        make_launcher("ray", tmp_path)
