"""One simulated job's mutable state: how its progress advances over virtual time and what work it has left
(internal to the simulator; policies only ever see ``JobView``). Semantics: ``sim/engine.py`` (the Pollux artifact's Job.step)."""
from __future__ import annotations

from dlsched.perf.pollux import TraceApp
from dlsched.policy.base import JobView
from dlsched.sim.remaining import Observation, RemainingMode, epoch_record, predict_remaining, predicted_rate
from dlsched.sim.throughput import TraceThroughput
from dlsched.sim.workload import WorkloadJob


class SimJob:
    """Mutable simulation state of one job (internal; policies only ever see ``JobView``)."""

    __slots__ = ("spec", "idx", "app", "batch", "nodes", "ptuple", "ngpus", "speed", "split", "epoch", "progress",
                 "rescale_left", "attained", "run_time", "finish", "start", "restarts", "work_left", "last_t",
                 "version", "noise", "max_gpus", "view", "steps", "history", "rate_key", "predicted_rate",
                 "ensemble", "changed")

    def __init__(self, spec: WorkloadJob, idx: int, app: TraceApp | None, noise: float):
        self.spec, self.idx, self.app = spec, idx, app
        self.batch = spec.batch_size
        self.nodes: dict[str, int] = {}
        self.ptuple: tuple[int, ...] = ()
        self.ngpus = 0
        self.speed = 1.0
        self.split = None
        self.epoch = 0
        self.progress = 0.0
        self.rescale_left = 0.0
        self.attained = 0.0
        self.run_time = 0.0
        self.finish: float | None = None
        self.start: float | None = None
        self.restarts = -1
        self.changed: tuple[float, float] | None = None   # (when its node map last changed, the pause it cost)
        self.ensemble = spec.ensemble.progress() if spec.ensemble is not None else None
        self.work_left = spec.duration if self.lazy else None
        self.last_t = 0.0
        self.version = 0
        self.noise = noise
        self.max_gpus = spec.requested_gpus
        self.view: JobView | None = None   # cached snapshot while waiting (nothing about it changes then)
        self.steps = 0.0                   # optimiser steps taken
        self.history: list[dict] = []      # one progress record per epoch end (``sim.remaining.epoch_record``)
        self.rate_key: tuple | None = None  # (records, GPUs, batch) the predicted rate was computed for
        self.predicted_rate: float | None = None
        if app is not None:
            # The most GPUs the application can use at all: its largest traced batch at the smallest profiled
            # per-GPU batch (capped where the peer caps it). Not the user's batch: elastic policies grow the batch
            # with the GPUs; policies that keep the user's batch see 0 samples/s beyond batch // min_local_bsz
            # (TraceThroughput), so Optimus and elastic-gpu-only stop there as before.
            by_batch = app.max_batch_size // app.min_local_bsz
            self.max_gpus = max(1, min(by_batch, app.max_gpus or by_batch))

    def hold_attrs(self) -> dict:
        """What ``policy.restart_hold`` reads of a running job: when its last (re)start was and when its pause ends."""
        if not self.ngpus or self.changed is None:
            return {}
        return {"changed_at": self.changed[0], "settled_at": self.changed[0] + self.changed[1]}

    @property
    def lazy(self) -> bool:
        """A duration job: its finish time follows from its rate, so it is advanced only when something changes."""
        return self.app is None and self.ensemble is None

    def advance_ensemble(self, t: float, seconds: float, share) -> None:
        """An ensemble job from time t on the share it holds: its members train (and restart) in flotillas."""
        self.run_time += seconds
        self.attained += seconds * self.ngpus
        self.finish = self.ensemble.advance(t, seconds, share)

    def advance_trace(self, t: float, seconds: float) -> None:
        """The peer's Job.step from time t: restart delay first, then epochs at the current goodput."""
        gpus = self.ngpus
        self.run_time += seconds
        delay = min(self.rescale_left, seconds)
        cur = t + delay
        self.attained += delay * gpus
        self.rescale_left -= delay
        seconds -= delay
        app, last = self.app, self.app.max_epochs - 1
        factor = self.speed
        split = self.split
        batch = split.global_batch(gpus)
        step, sync = app.step_time(self.ptuple, split.atomic)
        per_step = (step + (step - sync) * split.accum_steps) / factor
        while seconds > 0 and self.finish is None:
            goodput = app.gain(batch, self.epoch) / per_step
            nxt = app.epoch_end[self.epoch + 1]
            if self.progress + goodput * seconds < nxt:
                self.progress += goodput * seconds
                self.attained += seconds * gpus
                self.steps += seconds / per_step
                seconds = 0
            else:
                self.epoch += 1
                delta = round(float((nxt - self.progress) / goodput))
                if self.epoch > last:
                    self.finish = cur + delta
                self.progress = nxt
                cur += delta
                self.attained += delta * gpus
                self.steps += delta / per_step
                seconds -= delta
                init = app.init_batch_size
                self.history.append(epoch_record(nxt * init, self.steps, cur, gpus, self.batch, goodput * init,
                                                 *app.grad_stats(batch, self.epoch - 1)))

    def rate(self) -> float:
        """Work per second of a duration job: the share of its request it holds, times the GPUs' speed."""
        return min(self.ngpus, self.spec.requested_gpus) / self.spec.requested_gpus * self.speed

    def sync_lazy(self, t: float) -> None:
        """Bring a duration job's work, service and run time up to time t."""
        dt = t - self.last_t
        if dt > 0 and self.ngpus and self.finish is None:
            delay = min(self.rescale_left, dt)
            self.rescale_left -= delay
            self.work_left = max(0.0, self.work_left - (dt - delay) * self.rate())
            self.attained += dt * self.ngpus
            self.run_time += dt
        self.last_t = t

    def remaining(self, mode: RemainingMode, t: float, speed: TraceThroughput | None = None) -> float | None:
        """Remaining samples as a policy is told them under ``mode`` (``sim/remaining.py``)."""
        if mode.kind == "none":
            return None
        if mode.kind == "predicted":
            return self._predicted(t, speed) if self.app is not None else None   # ensembles: no predictor here
        if self.ensemble is not None:
            left = self.ensemble.work_left()
        elif self.app is None:
            left = self.work_left
        else:
            left = self.app.remaining_iterations(self.batch, self.epoch) * self.batch
        return left * self.noise

    def _predicted(self, t: float, speed: TraceThroughput) -> float | None:
        """What the job's own observations predict (``sim/remaining.py``): its epoch records, progress in samples at
        the initial batch, the declared epochs, and the throughput and gradient-noise efficiency measured now.
        The service's predictor runs again only when a record arrives or the allocation changes."""
        app = self.app
        init = app.init_batch_size
        throughput = (self.split.global_batch(self.ngpus) * self.speed / app.iteration_time(self.ptuple, self.split)
                      if self.ngpus else 0.0)
        obs = Observation(progress=self.progress * init, target_progress=app.target_progress * init,
                          throughput=throughput, efficiency=speed.efficiency(self.batch), workers=self.ngpus,
                          batch=self.batch, time=t)
        since = self.changed[0] if self.ngpus and self.changed is not None else None   # its last (re)start
        key = (len(self.history), self.ngpus, self.batch, since)
        if key != self.rate_key:
            self.rate_key, self.predicted_rate = key, predicted_rate(self.history, obs, since)
        return predict_remaining(obs, self.predicted_rate)
