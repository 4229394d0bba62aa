"""What a simulated job tells the policy about its remaining work: one of four named information modes.

* ``oracle`` — the exact iterations left at the current batch (what the Pollux artifact gives Optimus+Oracle);
* ``predicted`` — only what the running job has observed, turned into remaining work by the service's online
  predictor (``service.refit.predict``, via :func:`predicted_rate`): its epoch records so far (progress,
  steps, allocation, measured rate and gradient noise at each epoch end), the epochs it declares (a
  training job's ``--epochs``; the Pollux artifact's application table fixes them per app), and its measured
  throughput and gradient-noise efficiency *now*. It does not know how its efficiency will evolve (it rises as
  the gradient noise grows), nor anything about a job that declares no epochs (duration-only jobs: ``None``);
* ``none`` — nothing (``None``: policies fall back to attained service);
* ``noise:SIGMA`` — the oracle times a seeded log-normal error of sigma SIGMA (a sensitivity check, not a
  prediction).

Pollux itself had none of this: a comparison with its published figures is fair in ``predicted`` or ``none``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from dlsched.errors import UserError

MODES = ("oracle", "predicted", "none", "noise:SIGMA")


@dataclass(frozen=True)
class RemainingMode:
    kind: str            # "oracle" | "predicted" | "none" | "noise"
    sigma: float = 0.0   # log-normal sigma of the noise mode

    def __str__(self) -> str:
        return f"noise:{self.sigma:g}" if self.kind == "noise" else self.kind


def parse_remaining(text: str | RemainingMode) -> RemainingMode:
    """``"oracle"``, ``"predicted"``, ``"none"`` or ``"noise:0.3"``; a UserError naming the value otherwise."""
    if isinstance(text, RemainingMode):
        return text
    kind, _, arg = str(text).strip().partition(":")
    if kind in ("oracle", "predicted", "none") and not arg:
        return RemainingMode(kind)
    if kind == "noise":
        try:
            sigma = float(arg)
            if 0 <= sigma < math.inf:
                return RemainingMode("noise", sigma)
        except ValueError:
            pass
    raise UserError(f"remaining: bad value {text!r}; expected one of {', '.join(MODES)} (SIGMA finite, >= 0)")


def epoch_record(samples: float, steps: float, time: float, workers: int, batch: int, rate: float,
                 grad_sqr: float, grad_var: float) -> dict:
    """One progress record of a trace job at the end of an epoch, in the schema the live runtime reports to the
    service (``service/refit.py``): efficiency-weighted ``samples`` done (AdaptDL's progress: samples at the
    initial batch that make as much progress), optimiser ``step``s, the allocation, the measured
    efficiency-weighted ``samples_per_s`` and the gradient noise measured at the batch. The trace's validation
    metric is not reported: with the epochs declared the service's total work is the declared one, and its curve
    fit (the convergence rule) would only cost time."""
    return {"samples": samples, "step": steps, "time": time, "workers": workers, "batch_size": batch,
            "samples_per_s": rate, "grad_sqr": grad_sqr, "grad_var": grad_var, "noise_batch": batch}


@dataclass(frozen=True)
class Observation:
    """What a running trace job can tell the predictor now, beyond its epoch records: its efficiency-weighted
    progress and declared target (``target_progress`` None: no epochs declared), and the raw samples/s and
    statistical efficiency measured at its current allocation (0 while it waits)."""

    progress: float
    target_progress: float | None
    throughput: float
    efficiency: float
    workers: int
    batch: int
    time: float


class _ModelledRate:
    """The speed model the service would hold for the job at its current allocation: the efficiency-weighted
    samples/s measured there (the predictor falls back to it until three epochs at this allocation give it an
    observed wall-clock rate)."""

    def __init__(self, rate: float):
        self.rate = rate

    def throughput(self, num_gpus: int, num_nodes: int = 1, global_batch: int = 0, gpu_type: str | None = None):
        return self.rate


def predicted_rate(history: list[dict], obs: Observation, since: float | None = None) -> float | None:
    """Efficiency-weighted samples/s the service's predictor (``service.refit.predict``) expects the job to keep
    from its epoch records and the rate measured now; None when it has none (the job waits). ``since``: when the
    job last (re)started; the records before it do not count."""
    from dlsched.service.refit import predict

    if obs.target_progress is None or obs.efficiency <= 0 or obs.throughput <= 0:
        return None
    if history and (history[-1]["workers"], history[-1]["batch_size"]) != (obs.workers, obs.batch):
        history = []    # no epoch has ended at this allocation yet: its rate is the one measured now
    elif since is not None:
        # resumed at the size it was pre-empted from: the wall-clock span from the records before to those after
        # holds the wait and the restart pause. Live, per-step records show that gap and the predictor cuts there
        # (refit._restart_between); epoch records hide a gap shorter than ten epochs, and the deflated rate told a
        # resumed job it had more left than while it waited (two imagenet jobs swapped places every round)
        history = [r for r in history if r["time"] > since]
    prediction, _ = predict(history, obs.time, max(obs.workers, 1), obs.batch, obs.target_progress, obs.progress,
                            speed=_ModelledRate(obs.throughput * obs.efficiency), refit_speed=False)
    return prediction.rate


def predict_remaining(obs: Observation, rate: float | None) -> float | None:
    """Raw samples left at the current batch: the declared work left over the predicted efficiency-weighted rate
    (``predicted_rate``) is the time left, times the raw samples/s measured now. A waiting job has no rate: the
    work left at the current batch's measured efficiency. None when no epochs are declared."""
    if obs.target_progress is None or obs.efficiency <= 0:
        return None
    left = max(0.0, obs.target_progress - obs.progress)
    if not rate or obs.throughput <= 0:
        return left / obs.efficiency
    return left / rate * obs.throughput


def mode_label(mode: RemainingMode, jobs) -> tuple[str, str | None]:
    """What the policies were told, as the comparison names it, and a note when that is less than the mode says:
    ``predicted`` predicts only trace jobs (they declare epochs); a duration-only or ensemble job is told nothing,
    so SRTF on the Philly trace ran as FIFO under a table that read "predicted". ``jobs``: ``WorkloadJob``s."""
    blind = sum(j.app is None for j in jobs)
    if mode.kind != "predicted" or not blind:
        return str(mode), None
    return (f"predicted; none for {blind}/{len(jobs)} jobs",
            f"{blind} of {len(jobs)} jobs are duration-only or ensembles: --remaining predicted has no epochs of "
            f"theirs to predict from, so policies are told no remaining work for them (as --remaining none); "
            f"oracle or noise:SIGMA tells them")
