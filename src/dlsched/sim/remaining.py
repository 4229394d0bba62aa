"""What a simulated job tells the policy about its remaining work: one of four named information modes.

* ``oracle`` — the exact iterations left at the current batch (what the Pollux artifact gives Optimus+Oracle);
* ``predicted`` — only what the running job has observed, turned into remaining work by the service's online
  predictor (:func:`predict_remaining`): its efficiency-weighted progress so far, the epochs it declares (a
  training job's ``--epochs``; the Pollux artifact's application table fixes them per app), and its measured
  throughput and gradient-noise efficiency *now*. It does not know how its efficiency will evolve (it rises as
  the gradient noise grows), nor anything about a job that declares no epochs (duration-only jobs: ``None``);
* ``none`` — nothing (``None``: policies fall back to attained service);
* ``noise:SIGMA`` — the oracle times a seeded log-normal error of sigma SIGMA (a sensitivity check, not a
  prediction).

Pollux itself had none of this: a comparison with its published figures is fair in ``predicted`` or ``none``.
"""
from __future__ import annotations

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
            if sigma >= 0:
                return RemainingMode("noise", sigma)
        except ValueError:
            pass
    raise UserError(f"remaining: bad value {text!r}; expected one of {', '.join(MODES)} (SIGMA >= 0)")


@dataclass(frozen=True)
class Observation:
    """What a running trace job has seen by now, in the units its training loop counts.

    ``progress`` and ``target_progress`` are efficiency-weighted samples (AdaptDL's progress: samples at the
    initial batch that make as much progress); ``target_progress`` is None when the job declares no epochs.
    ``throughput`` is the raw samples/s measured at the current allocation and ``efficiency`` the statistical
    efficiency of the current batch measured from the gradient noise now."""

    progress: float
    target_progress: float | None
    throughput: float
    efficiency: float
    workers: int
    batch: int
    time: float


class _EquivalentRate:
    """The throughput the service predictor sees: efficiency-weighted samples/s at the job's allocation."""

    def __init__(self, obs: Observation):
        self.rate = obs.throughput * obs.efficiency

    def throughput(self, num_gpus: int, num_nodes: int = 1, global_batch: int = 0, gpu_type: str | None = None):
        return self.rate


def predict_remaining(obs: Observation) -> float | None:
    """Raw samples left at the current batch, predicted from the observation alone (None if unknowable).

    The one seam to the online predictor: today the service's (``service/refit.py``) — total work from the
    declared epochs, time left at the measured rate; remaining samples = time left × raw throughput."""
    from dlsched.service.refit import predict

    if obs.target_progress is None or obs.efficiency <= 0:
        return None
    record = {"samples": obs.progress, "step": None, "workers": obs.workers, "batch_size": obs.batch,
              "samples_per_s": obs.throughput * obs.efficiency, "time": obs.time}
    prediction, _ = predict([record], obs.time, max(obs.workers, 1), obs.batch, obs.target_progress, obs.progress,
                            speed=_EquivalentRate(obs), refit_speed=False)
    if prediction.remaining_s is None:
        # not running (no rate yet): the same work in samples at the current batch's efficiency
        return max(0.0, obs.target_progress - obs.progress) / obs.efficiency
    return prediction.remaining_s * obs.throughput
