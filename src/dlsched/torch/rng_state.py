"""Each rank's random-number streams, checkpointed and handed over with the job, keyed by rank.

The streams: torch's CPU generator, the CUDA one where CUDA is in use, numpy's global one and Python's ``random``
(dropout masks, augmentation draws). Every rank's are captured at once (one ``all_gather_object``, on checkpoint,
stop and regroup steps only) and restored at the point of the script where they were captured, so a restart at the
same number of workers draws what an uninterrupted run draws. Rank r takes rank r's streams whichever process
held them; a rank the capture did not have (a grow) takes streams seeded from rank 0's and its rank. What that
means under a rescale: docs/porting.md, "Random numbers".
"""
from __future__ import annotations

import hashlib
import random
import sys

import torch
import torch.distributed as dist

# where a capture was taken, so where it is restored: as the loader draws its next batch, or as remaining_epochs
# yields an epoch (a step committed after the code below the loader ran: a loop that broke out; the job's start)
BATCH, EPOCH = "batch", "epoch"


def capture() -> dict:
    """This process's streams, in types a ``weights_only`` checkpoint load accepts."""
    state = {"torch": torch.get_rng_state(), "random": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        state["numpy"] = (str(name), keys.tolist(), int(pos), int(has_gauss), float(cached))
    if torch.cuda.is_available() and torch.cuda.is_initialized():   # never initialises CUDA for a CPU job
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore(state: dict) -> None:
    if "seed" in state:   # a rank the capture did not have
        seed = state["seed"]
        torch.manual_seed(seed)   # the CUDA generators too
        random.seed(seed)
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed(seed % 2 ** 32)
        return
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["random"]
    random.setstate((version, tuple(internal), gauss))
    np = sys.modules.get("numpy")
    if np is not None and "numpy" in state:
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():   # a job moved off its GPUs keeps the rest
        torch.cuda.set_rng_state(state["cuda"])


def seeded_for(rank0: dict, rank: int) -> dict:
    """Streams for ``rank``, which the capture did not have: seeded from rank 0's and the rank, so a rerun that
    resizes at the same steps draws the same."""
    basis = rank0["torch"].numpy().tobytes() if "torch" in rank0 else repr(rank0.get("seed")).encode()
    digest = hashlib.blake2b(basis + rank.to_bytes(4, "little"), digest_size=8).digest()
    return {"seed": int.from_bytes(digest, "little") >> 1}


class RankStreams:
    def __init__(self):
        self.states: list[dict] | None = None   # every rank's at the last capture, by rank
        self.at = BATCH
        self.pending: tuple[dict, str] | None = None   # this rank's, restored when the script reaches ``at``

    def gather(self, world: int, at: str) -> None:
        """Capture every rank's streams (every rank of the group calls it at the same step)."""
        mine = capture()
        if world == 1:
            self.states = [mine]
        else:
            states: list = [None] * world
            dist.all_gather_object(states, mine)
            self.states = states
        self.at = at

    def snapshot(self) -> dict | None:
        return {"at": self.at, "ranks": self.states} if self.states else None

    def receive(self, snap: dict | None, rank: int, now: bool) -> None:
        """Take rank ``rank``'s streams from ``snap`` (a checkpoint's, or rank 0's at a regroup): ``now`` for a rank
        that is at the capture's point already (a survivor of a regroup), else where the script gets there."""
        if not snap or not snap.get("ranks"):
            return
        states = snap["ranks"]
        self.states, self.at = states, snap.get("at", BATCH)
        mine = states[rank] if rank < len(states) else seeded_for(states[0], rank)
        if now:
            restore(mine)
            self.pending = None
        else:
            self.pending = (mine, self.at)

    def apply(self, at: str) -> None:
        """The script reached point ``at``: restore what waits for it."""
        if self.pending is not None and self.pending[1] == at:
            restore(self.pending[0])
            self.pending = None
