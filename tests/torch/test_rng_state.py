"""rng_state: a rank's streams through a checkpoint's weights_only load, and the rank keying of a handover."""
import io
import random

import numpy as np
import torch

from dlsched.torch.rng_state import BATCH, EPOCH, RankStreams, capture, restore


def draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def test_streams_come_back_through_a_weights_only_checkpoint_load():
    torch.rand(5), np.random.rand(5), random.random()   # somewhere along each stream
    buf = io.BytesIO()
    torch.save({"rng": capture()}, buf)
    expected = draws()
    draws()
    restore(torch.load(io.BytesIO(buf.getvalue()), weights_only=True)["rng"])
    assert draws() == expected


def test_a_rank_takes_its_ranks_streams_and_a_new_rank_seeded_ones_where_the_script_gets_there():
    states = []
    for seed in (1, 2):
        torch.manual_seed(seed), np.random.seed(seed), random.seed(seed)
        states.append(capture())
    snap = {"at": EPOCH, "ranks": states}
    streams = RankStreams()
    streams.receive(snap, 1, now=False)
    torch.manual_seed(99)
    streams.apply(BATCH)   # not where it was captured: nothing yet
    assert streams.pending is not None
    streams.apply(EPOCH)
    restore(states[1])
    expected = draws()
    streams.receive(snap, 1, now=True)
    assert draws() == expected

    new = []
    for rank in (2, 3, 2):
        RankStreams().receive(snap, rank, now=True)
        new.append(draws())
    assert new[0] == new[2] and new[0] != new[1] and new[0] != expected   # by rank, reproducibly
