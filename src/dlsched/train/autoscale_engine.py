"""The AutoScaling Engine live (Or, Zhang, Freedman, MLSys 2020; algorithms.md §6.1): a job that sizes itself.

No cluster scheduler: ``dlsched train --autoscale`` starts the elastic runtime and reads its progress.jsonl.
Every K steps it averages the aggregate throughput R measured at each worker count tried so far (the first
``warmup_steps`` after each resize are left out, as Or et al. drop the first batch after a restart) and
asks the schedule (``autoscale.next_worker_count``) for the next count: scale out by N while the scaling
efficiency s = (ΔR/Δk)/(R_k/k) of every step taken stays ≥ S and, with a utility and a price given, the
utility gained by finishing sooner exceeds the extra worker cost; otherwise settle on the count before the
first failing step. The decision goes to the runtime as control.json (a stop-free resize); stragglers are
replaced by the runtime itself (its EWMA rule, ``StragglerDetector``). Each decision, with the numbers it
rests on, is one line of DIR/autoscale.jsonl and of the log.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from dlsched.train.autoscale import (DEFAULT_PRICE, LinearUtility, ScheduleConfig, next_worker_count,
                                     passes_utility, scaling_efficiency)
from dlsched.train import preemption
from dlsched.train.parent_death import preexec_dying_with
from dlsched.train.files import read_control, write_control
from dlsched.train.progress_log import ProgressTail

WARMUP_STEPS = 2


@dataclass(frozen=True)
class AutoscaleConfig:
    every_steps: int = 20  # K
    schedule: ScheduleConfig = ScheduleConfig(spawn_size=1, max_workers=8, min_consecutive_passes=1,
                                              min_batches_for_staying=0)
    warmup_steps: int = WARMUP_STEPS
    utility: LinearUtility | None = None  # condition 2 only when given
    price_per_worker_s: float = DEFAULT_PRICE


@dataclass
class AutoscaleEngine:
    """Pure bookkeeping over progress records; ``step(records)`` returns a decision dict or None."""

    cfg: AutoscaleConfig
    started: float = field(default_factory=time.time)
    rates: dict[int, list[float]] = field(default_factory=dict)  # workers -> measured aggregate samples/s
    since_change: int = 0
    workers: int | None = None
    pending: int | None = None  # a decided count the runtime has not reached yet
    cost_past: float = 0.0

    def observe(self, rec: dict) -> None:
        n = rec["workers"]
        if n != self.workers:
            self.workers, self.since_change = n, 0
        if n == self.pending:
            self.pending = None
        self.since_change += 1
        if self.since_change > self.cfg.warmup_steps:
            self.rates.setdefault(n, []).append(rec["samples_per_s"])
        if rec.get("samples_per_s"):
            self.cost_past += n * rec["batch_size"] / rec["samples_per_s"] * self.cfg.price_per_worker_s

    def event(self, rec: dict) -> None:
        """A resize the runtime gave up (``resize_abandoned``) will never reach the pending count: without this the
        engine waited for it, and decided nothing more for the rest of the run."""
        if rec.get("event") == "resize_abandoned":
            self.pending = None

    def decide(self, rec: dict) -> dict | None:
        """Every K measured steps at the current count: the schedule's target, with its numbers."""
        measured = self.since_change - self.cfg.warmup_steps
        if self.pending is not None or measured <= 0 or measured % self.cfg.every_steps:
            return None
        observed = {n: (float(np.mean(r)), len(r)) for n, r in self.rates.items() if r}
        pairs: list[dict] = []

        def condition(k: int, rk: float, kd: int, rkd: float) -> bool:
            s = scaling_efficiency(rk, rkd, k, kd - k)
            ok = s > self.cfg.schedule.threshold
            pair = {"from": k, "to": kd, "efficiency": round(s, 4), "passes_efficiency": ok}
            if self.cfg.utility is not None and rec.get("total_samples"):
                remaining = max(0, rec["total_samples"] - rec["samples"]) / rec["batch_size"]
                t_old, t_new = rec["batch_size"] / rk, rec["batch_size"] / rkd
                util_ok = passes_utility(self.cfg.utility, time.time() - self.started, int(remaining), t_old, k, t_new,
                                         kd, self.cost_past, self.cfg.price_per_worker_s)
                pair.update(passes_utility=util_ok, remaining_batches=int(remaining), step_s=[t_old, t_new])
                ok = ok and util_ok
            pairs.append(pair)
            return ok

        target = next_worker_count(observed, self.cfg.schedule, condition)
        self.pending = target if target != self.workers else None
        return {"event": "autoscale", "step": rec["step"], "workers": self.workers, "target": target,
                "action": "grow" if target > self.workers else "shrink" if target < self.workers else "stay",
                "throughput": {n: round(r, 2) for n, (r, _) in observed.items()},
                "threshold": self.cfg.schedule.threshold, "pairs": pairs, "cost_so_far": round(self.cost_past, 6)}


def run_autoscaled(runtime_cmd: list[str], job_dir: Path, cfg: AutoscaleConfig,
                   log: Callable[[str], None] = print, poll_s: float = 0.2) -> int:
    """Start the runtime, steer its worker count by the engine until it exits; its exit code."""
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    engine = AutoscaleEngine(cfg)
    control = read_control(job_dir)
    generation = control.generation if control else 0
    # a SIGTERM to this process alone (`kill PID` of `dlsched train --autoscale`) killed it and left the runtime
    # training on, unsteered: it is passed on to the runtime, which stops at its next safe point (exit 143)
    preemption.install()
    # this run's records only: a re-run replayed the earlier runs' steps, deciding on their rates (another host load,
    # other workers) and resizing the new runtime from them at its first poll
    tail, forwarded = ProgressTail(job_dir, from_end=True), False
    with preemption.sigterm_blocked():   # the runtime's start-up holds a stop until its handler is in (runtime.md)
        # dies with this engine: a SIGKILLed engine left its runtime training on, unsteered and orphaned
        proc = subprocess.Popen(runtime_cmd, preexec_fn=preexec_dying_with(os.getpid()))
    try:
        with open(job_dir / "autoscale.jsonl", "a", buffering=1) as out:
            while True:
                if preemption.requested() and not forwarded:
                    proc.send_signal(signal.SIGTERM)
                    forwarded = True
                running = proc.poll() is None
                records = tail.read()
                for rec in records:
                    if "event" in rec or "workers" not in rec:
                        engine.event(rec)
                        continue
                    engine.observe(rec)
                    decision = engine.decide(rec)
                    if decision is None:
                        continue
                    out.write(json.dumps(decision) + "\n")
                    log(_describe(decision))
                    if decision["target"] != decision["workers"] and running and not forwarded:
                        generation += 1
                        write_control(job_dir, decision["target"], None, generation)
                if not running:
                    return proc.returncode
                time.sleep(poll_s)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait()


def _describe(d: dict) -> str:
    pairs = ", ".join(f"{p['from']}->{p['to']}: s={p['efficiency']:+.3f}" +
                      ("" if "passes_utility" not in p else f" utility {'ok' if p['passes_utility'] else 'fails'}")
                      for p in d["pairs"])
    rates = ", ".join(f"{n} workers {r:,.0f}/s" for n, r in sorted(d["throughput"].items()))
    return (f"autoscale step {d['step']}: {d['action']} {d['workers']} -> {d['target']} workers "
            f"(S={d['threshold']}; {rates}; {pairs or 'one count tried: scale out by N'})")
