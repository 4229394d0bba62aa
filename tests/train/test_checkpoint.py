from pathlib import Path

import pytest
import torch

from dlsched.errors import UserError
from dlsched.train.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from dlsched.train.storage import CheckpointStore


def test_round_trip_keeps_newest_and_leaves_no_temp_files(tmp_path):
    for step in (5, 10, 15):
        save_checkpoint(tmp_path, "mlp", step, {"w": torch.full((3,), float(step)), "step": step})
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000000010.ckpt", "step-000000015.ckpt"]
    assert not list(tmp_path.glob(".*.tmp"))
    state = load_checkpoint(list_checkpoints(tmp_path)[-1], "mlp")
    assert state["step"] == 15 and state["w"].tolist() == [15.0] * 3


def test_torn_checkpoint_is_refused(tmp_path):
    path = save_checkpoint(tmp_path, "mlp", 1, {"w": torch.zeros(1000)})
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(UserError, match="torn checkpoint"):
        load_checkpoint(path, "mlp")


def test_foreign_checkpoints_are_refused(tmp_path):
    path = save_checkpoint(tmp_path, "mlp", 1, {"w": torch.zeros(1)})
    with pytest.raises(UserError, match="job='mlp' but this job is 'resnet20'"):
        load_checkpoint(path, "resnet20")
    other = tmp_path / "step-000000002.ckpt"
    torch.save({"w": torch.zeros(1)}, other)
    with pytest.raises(UserError, match="foreign checkpoint"):
        load_checkpoint(other, "mlp")


def test_resume_skips_torn_checkpoints_for_the_newest_valid_one(tmp_path):
    for step in (5, 10):
        save_checkpoint(tmp_path, "mlp", step, {"step": step}, keep=3)
    newest = save_checkpoint(tmp_path, "mlp", 15, {"step": 15}, keep=3)
    newest.write_bytes(newest.read_bytes()[:30])            # cut inside its header
    path, state, skipped = CheckpointStore(tmp_path).newest_valid("mlp")
    assert Path(path).name == "step-000000010.ckpt" and state["step"] == 10
    assert [(Path(p).name, "torn checkpoint" in why) for p, why in skipped] == [("step-000000015.ckpt", True)]
    assert (tmp_path / "step-000000015.ckpt.torn").exists()   # kept for a post-mortem, never read again
    save_checkpoint(tmp_path, "mlp", 20, {"step": 20})
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000000010.ckpt", "step-000000020.ckpt"]
    (tmp_path / "step-000000030.ckpt").write_bytes(b"")     # created, never written
    assert CheckpointStore(tmp_path).newest_valid("mlp")[1]["step"] == 20
    other = tmp_path / "step-000000040.ckpt"
    torch.save({"w": torch.zeros(1)}, other)                 # not ours: refusing beats resuming from it
    with pytest.raises(UserError, match="foreign checkpoint"):
        CheckpointStore(tmp_path).newest_valid("mlp")
