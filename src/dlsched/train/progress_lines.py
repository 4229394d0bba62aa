"""Human lines for the records a job writes to progress.jsonl: what ``dlsched logs -f`` and ``dlsched train``
show. Step lines are throttled (at most one per ``every_s``, plus the first), checkpoint lines to one per
``checkpoint_every_s``; other events always print.
In a terminal a rich progress bar replaces the step lines; piped, every line is plain text."""
from __future__ import annotations

import sys
import time
from typing import IO

from dlsched.display import human_duration
from dlsched.numbers import is_number
from dlsched.perf.efficiency import GradientNoise

_EVENTS = {
    "metrics": lambda r: f"epoch {r.get('epoch')} step {r.get('step')}: "
                         + " ".join(f"{k} {_num(v)}" for k, v in (r.get("metrics") or {}).items()),
    "epoch_end": lambda r: f"epoch {r.get('epoch')} done"   # no mean where no step reported a loss
                           + (f": mean loss {_num(r['mean_loss'])}" if r.get("mean_loss") is not None else ""),
    "checkpoint": lambda r: f"checkpoint at step {r.get('step')}",
    "checkpoint_skipped": lambda r: f"checkpoint skipped: {r.get('reason') or r.get('checkpoint')}",
    "resized": lambda r: f"resized to {r.get('workers')} worker(s), batch {r.get('batch_size')}"
                         + (f" in {r['stall_s']:.2f}s" if isinstance(r.get("stall_s"), (int, float)) else ""),
    "batch_size": lambda r: f"batch {r.get('from_batch')} -> {r.get('to_batch')} at {r.get('workers')} worker(s): "
                            f"goodput {_num(r.get('from_goodput'))} -> {_num(r.get('goodput'))} "
                            f"(samples/s {_num(r.get('throughput'))}, efficiency {_num(r.get('efficiency'))}, "
                            f"noise scale {_num(r.get('noise_scale'))})",
    "lr_rule": lambda r: f"LR x{_num(r.get('factor'))} ({r.get('rule')} rule, batch {r.get('from_batch')} -> "
                         f"{r.get('to_batch')}" + (f", over {r['ramp_steps']} steps" if r.get("ramp_steps") else "")
                         + ")",
    "resize_abandoned": lambda r: f"resize abandoned: {r.get('reason')}",
    "resize_failed": lambda r: f"resize failed: {r.get('error') or r.get('reason')}",
    # a ps job's worker slow again after its replacement is kept (``train.ps_stragglers``): not "replaced"
    "straggler": lambda r: f"straggler worker(s) {r.get('workers')} "
                           + ("replaced" if r.get("replaced", True) else f"kept: {r.get('reason')}"),
    "resumed": lambda r: (f"resumed from the checkpoint of step {r.get('restored_step')}" if r.get("checkpoint")
                          else "restarted from the beginning (no checkpoint)")
                         + f" (generation {r.get('new_generation')})"
                         + (f" at batch {r['batch_size']} (the checkpoint's: {r['from_batch_size']})"
                            if r.get("from_batch_size") not in (None, r.get("batch_size")) else ""),
    "worker_lost": lambda r: _lost(r) + " lost" + _restart(r),
    "shrunk": lambda r: f"worker(s) {r.get('workers_lost')} lost: {r.get('workers')} train on from step "
                        f"{r.get('step')}",
    "rejoined": lambda r: f"back to {r.get('workers')} worker(s) after worker(s) {r.get('workers_lost')} lost"
                          + (f" in {r['stall_s']:.2f}s" if isinstance(r.get("stall_s"), (int, float)) else ""),
    "stopped": lambda r: f"stopped at step {r.get('step')}",
    "servers_changed": lambda r: f"servers {r.get('from_servers')} -> {r.get('servers')}: the committed round's "
                                 f"parameters re-sharded",   # was the bare word 'servers_changed'

    "control_rejected": lambda r: f"control.json rejected: {r.get('error')}",
    # a FLEET ensemble's (train/fleet_job.py): were bare kind names, and its steps named no member
    "profiled": lambda r: "profiled (samples/s on 1 slot): " + ", ".join(
        f"{p.get('member')} {_num((p.get('rates') or [None])[0])}" for p in r.get("profiles") or []),
    "flotillas": lambda r: f"planned on {r.get('share')} slot(s): flotillas " + (" | ".join(
        "+".join(f"{m}:{g}" for m, g in (f.get("members") or {}).items()) for f in r.get("flotillas") or []) or "none")
                           + (f"; waiting {', '.join(r['waiting'])}" if r.get("waiting") else ""),
    "member_converged": lambda r: f"member {r.get('member')} "
                                  + {"max_epochs": "stopped at max_epochs", "cancelled": "cancelled"}.get(
                                      r.get("reason"), "converged")
                                  + f" at epoch {r.get('epoch')}: best val acc {_num(r.get('best_acc'))}"
                                  + (f", weights {r['best_checkpoint']}" if r.get("best_checkpoint") else ""),
}


def _lost(r: dict) -> str:
    """'worker(s) [1]'; a ps job's loss may be of servers too: 'server(s) [0]', 'server(s) [0] and worker(s) [1]'."""
    parts = [f"server(s) {r['servers_lost']}"] if r.get("servers_lost") else []
    if r.get("workers_lost") or not parts:
        parts.append(f"worker(s) {r.get('workers_lost')}")
    return " and ".join(parts)


def _restart(r: dict) -> str:
    """Where the group restarts: the step records that follow go back to it (was: the line said only 'lost')."""
    if "checkpoint" not in r:   # a ps job's: its committed step (its exit_codes name ranks)
        return f": restarting from step {r['restored_step']}" if "restored_step" in r else ""
    codes = ", ".join(f"killed by signal {-c}" if c < 0 else f"exit {c}" for c in r.get("exit_codes") or [])
    where = (f"the checkpoint of step {r.get('restored_step')}" if r.get("checkpoint") else "the beginning")
    redo = f", {r['lost_steps']} step(s) to redo" if r.get("lost_steps") else ""
    return (f" ({codes})" if codes else "") + f": restarting from {where}{redo}"


def _num(x) -> str:
    return f"{x:.4g}" if is_number(x) else "-"


def step_line(r: dict) -> str:
    """Step, epoch, loss, speed, size, LR, what the user's script reported and the gradient noise scale."""
    total = r.get("total_samples")
    pct = f" ({100 * r['samples'] / total:.1f}%)" if total and isinstance(r.get("samples"), (int, float)) else ""
    shown = {"lr": r.get("lr"), **(r.get("metrics") or {})}
    noise = r.get("grad_noise")
    if noise and noise.get("sqr", 0) > 0:
        shown["noise_scale"] = GradientNoise(noise["sqr"], noise["var"]).noise_scale(noise["reference_batch"])
    extra = "".join(f" {k} {_num(v)}" for k, v in shown.items() if v is not None)
    if r.get("member"):   # an ensemble's: the member's own step, epoch and loss; the rest counts all its members
        return (f"member {r['member']} step {r.get('member_step', '-')} epoch {r.get('epoch')} loss "
                f"{_num(r.get('loss'))} | ensemble: step {r.get('step')} samples/s {_num(r.get('samples_per_s'))} "
                f"workers {r.get('workers')} batch {r.get('batch_size')} samples {int(r.get('samples') or 0)}")
    return (f"step {r.get('step')} epoch {r.get('epoch')} loss {_num(r.get('loss'))} "
            f"samples/s {_num(r.get('samples_per_s'))} workers {r.get('workers')} batch {r.get('batch_size')}"
            f"{extra} samples {int(r.get('samples') or 0)}{pct}")


def event_line(r: dict, started: float | None) -> str | None:
    kind = r.get("event")
    if kind == "finished":
        took = f" after {human_duration(time.time() - started)}" if started else ""
        if r.get("step") is None:   # was "finished at step None": a script that never trained a dlsched.torch step
            return f"finished{took} without a training step (the script never reached dlsched.torch's loop)"
        return f"finished at step {r.get('step')}{took}"
    render = _EVENTS.get(kind)
    return render(r) if render else (f"{kind}" if kind else None)


class HumanProgress:
    """Echoes progress records to ``stream`` as human lines (see the module docstring)."""

    def __init__(self, stream: IO[str] | None = None, every_s: float = 1.0, checkpoint_every_s: float = 30.0):
        self.stream = stream or sys.stdout
        self.every_s, self.checkpoint_every_s = every_s, checkpoint_every_s
        self.last_step_at = self.last_checkpoint_at = -1e9
        self.started = time.time()
        self.step_keys: set[str] = set()   # the metrics the last step record carried
        self.bar = None
        if getattr(self.stream, "isatty", lambda: False)():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                                TimeRemainingColumn(), console=Console(file=self.stream), transient=False)
            self.task = self.bar.add_task("training", total=None)
            self.bar.start()

    def __call__(self, rec: dict) -> None:
        if "event" in rec:
            if rec["event"] == "checkpoint":
                now = time.monotonic()
                if now - self.last_checkpoint_at < self.checkpoint_every_s:
                    return
                self.last_checkpoint_at = now
            line = event_line(rec, self.started)
            if line is None:
                return
            if self.bar is not None:
                self.bar.console.print(line)
                if rec["event"] in ("finished", "stopped"):
                    self.bar.stop()
            else:
                self._print(line)
            return
        evaluated = self._evaluated(rec)
        if self.bar is not None:
            self.bar.update(self.task, completed=rec.get("samples") or 0, total=rec.get("total_samples"),
                            description=f"step {rec.get('step')} loss {_num(rec.get('loss'))} "
                                        f"{_num(rec.get('samples_per_s'))} samples/s x{rec.get('workers')}")
            if evaluated:
                self.bar.console.print(step_line(rec))
            return
        now = time.monotonic()
        if now - self.last_step_at >= self.every_s or evaluated:
            self.last_step_at = now
            self._print(step_line(rec))

    def _evaluated(self, rec: dict) -> bool:
        """The step carries a metric the step before it did not (an evaluation every N steps inside the loop): its
        line is shown, not throttled away (only a step that happened to print showed its val_accuracy)."""
        keys = set(rec.get("metrics") or {})
        new, self.step_keys = keys - self.step_keys, keys
        return bool(new)

    def output(self, line: str) -> None:
        """A line of the script's own output, as it is (no stamp, no markup)."""
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
            return
        try:
            self.stream.write(f"{line}\n")
            self.stream.flush()
        except (OSError, ValueError):   # a closed or broken stdout must never stop training
            pass

    def _print(self, line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        try:
            self.stream.write(f"{stamp} {line}\n")
            self.stream.flush()
        except (OSError, ValueError):   # a closed or broken stdout must never stop training
            pass

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
