"""Checkpoint storage at a path or URI (dlsched.train.storage): real fsspec file systems, real trainer runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import fsspec
import pytest
import torch

from dlsched.errors import UserError
from dlsched.train import storage
from dlsched.train.data import committed_sample_ids
from dlsched.train.progress_log import read_progress

from .helpers import MLP, REPO, events, finish, start_job, wait_for_step


@pytest.fixture
def memory_uri():
    uri = f"memory://dlsched-test-{uuid.uuid4().hex}/ckpts"
    yield uri
    fs = fsspec.filesystem("memory")
    fs.rm(uri.replace("memory://", "/").rsplit("/", 1)[0], recursive=True)


def _round_trip(location) -> None:
    store = storage.CheckpointStore(location)
    assert store.list() == [] and store.newest_valid("mlp")[:2] == (None, None)
    for step in (5, 10, 15):
        store.save("mlp", step, {"w": torch.full((3,), float(step)), "step": step})
    names = store.list()
    assert len(names) == 2 and names[-1] == store.latest() and "000000015" in names[-1]   # keeps two
    name, state, skipped = store.newest_valid("mlp")
    assert name == names[-1] and state["step"] == 15 and torch.equal(state["w"], torch.full((3,), 15.0))
    assert not skipped and storage.load(names[0], "mlp")["step"] == 10


def test_local_path_round_trip(tmp_path):
    _round_trip(tmp_path / "ckpts")
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == ["step-000000010.ckpt", "step-000000015.ckpt"]


def test_file_uri_round_trip(tmp_path):
    _round_trip(f"file://{tmp_path}/ckpts")
    assert len(list((tmp_path / "ckpts").glob("step-*.ckpt"))) == 2


def test_memory_uri_round_trip_keeps_only_the_newest_two_objects(memory_uri):
    _round_trip(memory_uri)
    fs, root = fsspec.core.url_to_fs(memory_uri)
    assert len(fs.ls(root, detail=False)) == 4   # two manifests + their data, nothing older


def test_data_without_manifest_is_never_read(memory_uri):
    store = storage.CheckpointStore(memory_uri)
    store.save("mlp", 10, {"step": 10})
    fs, root = fsspec.core.url_to_fs(memory_uri)
    fs.pipe_file(f"{root}/step-000000020.ckpt.{'0' * 64}", b"half an upload")   # the writer died before its manifest
    name, state, skipped = store.newest_valid("mlp")
    assert state["step"] == 10 and not skipped


def test_manifest_with_wrong_hash_is_skipped_for_the_previous_valid_one(memory_uri):
    store = storage.CheckpointStore(memory_uri)
    store.save("mlp", 10, {"step": 10})
    newest = store.save("mlp", 20, {"step": 20})
    fs, key = fsspec.core.url_to_fs(newest)
    manifest = json.loads(fs.cat_file(key))
    data = f"{key.rsplit('/', 1)[0]}/{manifest['data']}"
    fs.pipe_file(data, fs.cat_file(data)[:-7])   # the data the manifest names was cut short
    with pytest.raises(storage.ckpt.TornCheckpoint, match="hash mismatch"):
        storage.load(newest, "mlp")
    name, state, skipped = store.newest_valid("mlp")
    assert state["step"] == 10 and [s for s, _ in skipped] == [newest]
    assert fs.exists(key + ".torn") and store.list() == [name]   # kept for a post-mortem, never read again


def test_foreign_checkpoint_on_object_store_stops_the_resume(memory_uri):
    storage.CheckpointStore(memory_uri).save("resnet20", 10, {"step": 10})
    with pytest.raises(UserError, match="foreign checkpoint"):
        storage.CheckpointStore(memory_uri).newest_valid("mlp")


def test_unknown_protocol_is_one_line_naming_the_field():
    with pytest.raises(UserError, match="checkpoint_uri='nosuchproto://x'"):
        storage.CheckpointStore("nosuchproto://x")


def test_a_job_folder_is_a_path_or_a_file_uri_and_nothing_else(tmp_path):
    assert storage.job_folder(f"file://{tmp_path}/job", "--job-dir") == tmp_path / "job"
    assert storage.job_folder("runs/job", "--job-dir") == storage.job_folder(Path("runs/job"), "f")
    for bad, why in (("s3://bucket/job", "POSIX"), ("memory://job", "POSIX"), ("file://host/job", "no host"),
                     ("", "a folder path")):
        with pytest.raises(UserError, match=why) as e:
            storage.job_folder(bad, "--jobs-dir")
        assert str(e.value).startswith(f"--jobs-dir={bad!r}: ") and "\n" not in str(e.value)


@pytest.mark.parametrize("argv", [["train", "--job-dir", "s3://bucket/job", MLP],
                                  ["serve", "--jobs-dir", "memory://jobs", "--port", "1"]])
def test_a_job_folder_on_an_object_store_is_one_line_naming_the_option(argv):
    p = subprocess.run([sys.executable, "-m", "dlsched.cli", *argv], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().count("\n") == 0 and f"{argv[1]}={argv[2]!r}: " in p.stderr, p.stderr


def _stop_and_check_checkpoint_at_uri(job_dir, ckpts, proc, step: int) -> None:
    """SIGTERM the run after ``step``: its stop checkpoint is at the URI's folder, none in the job folder."""
    wait_for_step(job_dir, step, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out
    at = events(job_dir, "stopped")[0]["step"]
    assert (ckpts / f"step-{at:09d}.ckpt").exists() and not (job_dir / "ckpt").exists()


def test_train_with_file_uri_checkpoints_there_and_resumes_exactly_once(tmp_path):
    job_dir, ckpts = tmp_path / "job", tmp_path / "ckpts"
    args = ("--param", "num_samples=480", "--param", "batch_size=12", "--ckpt-every", "7", "--record-samples",
            "--checkpoint-uri", f"file://{ckpts}")
    proc = start_job(job_dir, 2, *args, "--param", "throttle_s=0.05", new_session=True)
    _stop_and_check_checkpoint_at_uri(job_dir, ckpts, proc, 9)

    finish(start_job(job_dir, 2, *args))
    steps = [r["step"] for r in read_progress(job_dir) if "event" not in r]
    assert steps == list(range(1, 41)), "resumed at the stop step from the URI: no step redone, none skipped"
    assert committed_sample_ids(job_dir) == Counter(range(480))
    assert all(str(ckpts) in e["path"] for e in events(job_dir, "checkpoint"))


def _cli(*args: str):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.Popen([sys.executable, "-m", "dlsched.cli", "train", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def test_dlsched_train_spec_checkpoint_uri_resumes_from_there_once(tmp_path):
    job_dir, ckpts, spec = tmp_path / "job", tmp_path / "ckpts", tmp_path / "job.yaml"
    spec.write_text(f"name: mlp\nentry: {MLP}\ngpus: 1\ncheckpoint_uri: file://{ckpts}\n"
                    "params: {num_samples: 320, batch_size: 16, throttle_s: 0.05}\n")
    proc = _cli("--spec", str(spec), "--job-dir", str(job_dir), "--ckpt-every", "5")
    _stop_and_check_checkpoint_at_uri(job_dir, ckpts, proc, 7)

    spec.write_text(spec.read_text().replace("throttle_s: 0.05", "throttle_s: 0.0"))
    finish(_cli("--spec", str(spec), "--job-dir", f"file://{job_dir}", "--ckpt-every", "5"))   # the same folder
    steps = [r["step"] for r in read_progress(job_dir) if "event" not in r]
    assert steps == list(range(1, steps[-1] + 1)) and events(job_dir, "finished"), "each step trained once"
