"""Stragglers of a parameter-server job: which worker to replace at a round's commit.

Whether one matters depends on the mode (measured in docs/ps.md): a sync step waits for every gradient and SSP holds
the others within its staleness of the slowest, so sync and SSP jobs replace a straggler, as all-reduce ones do; an
async worker claims fewer batches from the cursor and holds no one back, so an async job has none to replace.

The rule is all-reduce's (``autoscale.StragglerDetector``: an EWMA of each worker's speed over the median) taken per
round, not per step: each worker's samples over the seconds it computed in the round (its records' ``compute``:
the batch's read, forward and backward, not the waits that a straggler imposes on everyone), so that one batch
descheduled on a busy host flags no one. A worker whose EWMA is under half the median's after two rounds of its
generation is replaced: the generation ends at the commit (as a resize does) and the next one starts every rank
afresh. A worker flagged again in a later generation is slow in its slot, not in its process: it is kept, and that
is said once."""
from __future__ import annotations

import math
import statistics

ALPHA = 0.5         # weight of a round's ratio: two slow rounds flag a worker, one noisy round does not
THRESHOLD = 0.5     # of the median worker's speed
MIN_ROUNDS = 2      # rounds of its generation a worker is measured before it may be flagged


def round_rates(recs: list[dict], workers: int) -> dict[int, float]:
    """Each worker's samples per second of computing in a round's records (those that carry ``compute``)."""
    samples, seconds = [0] * workers, [0.0] * workers
    for x in recs:
        w, c = x.get("worker"), x.get("compute")
        if isinstance(w, int) and 0 <= w < workers and isinstance(c, (int, float)) and c > 0:
            samples[w] += len(x["ids"])
            seconds[w] += c
    return {w: samples[w] / seconds[w] for w in range(workers) if seconds[w] > 0 and samples[w]}


def needs_replacing(mode_staleness: float | None, workers: int) -> bool:
    """Sync and SSP steps wait for the slowest worker; async ones do not."""
    return workers > 1 and not (mode_staleness is not None and math.isinf(mode_staleness))


def flag(state: dict, generation: int, rates: dict[int, float]) -> tuple[list[int], list[int], dict[int, float]]:
    """(workers to replace, workers to keep, their EWMAs) after a round with ``rates``; the EWMAs of this
    ``generation`` (a new one's processes start afresh), the workers replaced and kept so far in this run are in
    ``state`` (ps/state.json), which this updates."""
    ewma_of = state.get("straggler_ewma") or {}
    if ewma_of.get("generation") != generation:
        ewma_of = {"generation": generation, "ewma": {}, "rounds": {}}
    ewma, rounds = ewma_of["ewma"], ewma_of["rounds"]
    if len(rates) >= 2:
        median = statistics.median(rates.values())
        for w, r in rates.items():
            ewma[str(w)] = (1 - ALPHA) * ewma.get(str(w), 1.0) + ALPHA * r / median
            rounds[str(w)] = rounds.get(str(w), 0) + 1
    state["straggler_ewma"] = ewma_of
    kept = state.setdefault("stragglers_kept", [])
    replaced = state.setdefault("stragglers_replaced", [])
    slow = [int(w) for w, v in ewma.items() if v < THRESHOLD and rounds[w] >= MIN_ROUNDS and int(w) not in kept]
    again = sorted(w for w in slow if w in replaced)
    fresh = sorted(w for w in slow if w not in replaced)
    kept += again
    replaced += fresh
    return fresh, again, {w: round(ewma[str(w)], 3) for w in slow}
