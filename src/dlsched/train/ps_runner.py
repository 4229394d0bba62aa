"""Supervisor of a parameter-server job: generations of processes, committed rounds, recovery and resize.

Same job-folder contract as the all-reduce coordinator (``dlsched.train``: control.json in, progress.jsonl
and status.json out), plus ``ps/state.json`` (the committed rounds) and ``ps/records/`` (per-batch sample
ids, clocks and versions). A generation is P servers + W workers forked from here; it runs rounds until
the job is done or control.json asks for another worker count, which applies at the next round boundary by
ending the generation (Optimus resizes through a checkpoint too, algorithms.md §1.1). The server count is
fixed per run; a re-run with another ``--servers`` re-shards the last committed round's parameters. A process that dies
(e.g. SIGKILL) ends its generation: the rest are killed and the next one replays the uncommitted round.
SIGTERM stops at once and exits 143; a re-run resumes at the last committed round, as after a crash.

Under the Ray backend (``DLSCHED_RAY_ADDRESS`` set) every rank, servers included, runs in its own bundle of
the job's reservation (``launcher.RayLauncher``, module ``dlsched.train.ps_process``): the servers hold slots
like the workers, on the nodes the scheduler granted. This supervisor then hosts each generation's TCPStore
at its node's address, and the generation is handed over in ``ps/generation-N.json``.
"""
from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import socket
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from dlsched.errors import JobFailed, UserError
from dlsched.train import preemption
from dlsched.train.files import (ControlWatch, appended_lines, atomic_write_json, job_program, read_status,
                                 write_status)
from dlsched.train.forking import inheriting_no_garbage, load_lazy_training_modules
from dlsched.train.progress_log import ProgressLog
from dlsched.train.job import build_job
from dlsched.train.launcher import default_launcher, make_launcher
from dlsched.train.no_space import EXIT_NO_SPACE, exits_no_space, no_space
from dlsched.train.parent_death import die_with
from dlsched.train.progress_lines import HumanProgress
from dlsched.train.ps import (Generation, SyncMode, num_rounds, records_path, restore_flat, round_span, run_rank,
                              server_lr, total_samples)
from dlsched.train.ps_sparse import TABLES
from dlsched.train.ps_stragglers import flag, needs_replacing, round_rates

STOPPED = 143


@dataclass(frozen=True)
class PSOptions:
    job_dir: Path
    entry: str
    params: dict
    workers: int
    servers: int
    mode: SyncMode
    batch_size: int | None = None
    ckpt_every: int = 10  # global batches per round
    max_restarts: int = 3
    throttle: dict = field(default_factory=dict)  # worker index (str) -> extra seconds per step
    sparse: bool = False  # push/pull only the embedding rows each batch reads
    launcher: str = field(default_factory=default_launcher)  # "local" (forked here) or "ray" (a bundle per rank)
    reference_batch: int | None = None  # the global batch the job's lr is given at (the spec's); None = the job's
    replace_stragglers: bool = True  # sync/SSP: replace a worker computing at under half the median's speed


def _state_path(job_dir: Path) -> Path:
    return Path(job_dir) / "ps" / "state.json"


def read_state(job_dir: Path) -> dict | None:
    try:
        return json.loads(_state_path(job_dir).read_text())
    except FileNotFoundError:
        return None


def generation_path(job_dir: Path, number: int) -> Path:
    return Path(job_dir) / "ps" / f"generation-{number:04d}.json"


def read_generation(job_dir: Path, number: int) -> Generation:
    fields = json.loads(generation_path(job_dir, number).read_text())
    return Generation(**{**fields, "mode": SyncMode.parse(fields["mode"])})


def rank_log(job_dir: Path, rank: int) -> Path:
    return Path(job_dir) / "logs" / f"ps-rank-{rank}.log"


def _run_logged(rank: int, gen: Generation, supervisor: int) -> None:
    """A forked rank's body with its stderr in its log: a failing rank's traceback, and its peers' (failing at their
    next collective), went to the terminal, ~50 lines per restart. stdout stays: rank 0 echoes the step lines."""
    # a SIGKILLed `dlsched train --strategy ps` left its ranks training on as orphans, committing rounds into the
    # folder a re-run's ranks then wrote too (all-reduce workers watch their parent; rank 0 hosts the ps store)
    die_with(supervisor)
    fd = os.open(rank_log(Path(gen.job_dir), rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, f"{GENERATION_MARK}{gen.number}\n".encode())   # a last line from an earlier generation is no cause
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)
    with exits_no_space():
        run_rank(rank, gen, commit_round)


class _ForkedRank:
    """A rank forked from this supervisor, seen as a ``launcher.WorkerHandle``."""

    def __init__(self, ctx, rank: int, gen: Generation):
        self._p = ctx.Process(target=_run_logged, args=(rank, gen, os.getpid()), daemon=True)
        self._p.start()
        self.pid = self._p.pid

    def poll(self) -> int | None:
        return self._p.exitcode

    def kill(self) -> None:
        self._p.kill()

    def wait(self) -> int:
        self._p.join()
        return self._p.exitcode


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# records file -> bytes already read by this process (rank 0, which commits its generation's rounds in order)
_records_read: dict[Path, int] = {}


def _round_records(job_dir: Path, generation: int, workers: int, r: int) -> list[dict]:
    """Round r's records: at its commit (quiescent) they are what the workers appended since the last commit. Each
    commit re-read the generation's whole files: 0.14 s a worker at 25 000 records, every round, training stalled."""
    out = []
    for w in range(workers):
        path = records_path(job_dir, generation, w)
        lines, _records_read[path] = appended_lines(path, _records_read.get(path, 0))
        out += [rec for rec in map(json.loads, lines) if rec["round"] == r]
    return out


def commit_round(job_dir: Path, gen: Generation, r: int, rounds: int) -> bool:
    """Rank 0, after every server saved round r: mark it committed, log it; False ends the generation."""
    state = read_state(job_dir)
    state["round_generation"] = state["round_generation"][:r] + [gen.number]
    state["ckpt_servers"] = gen.servers
    now = time.time()
    recs = _round_records(job_dir, gen.number, gen.workers, r)
    samples = sum(len(x["ids"]) for x in recs)
    start, end = round_span(gen, state["total_samples"], r)
    state["steps"] = committed_steps(state) + math.ceil((end - start) / gen.global_batch)
    state["position"] = end
    done_samples = state.get("samples", 0) + samples
    state["samples"] = done_samples
    since = state.get("last_commit", now)
    if r == gen.first_round and recs and all("done" in x for x in recs):
        # a generation's first round: from its first batch, not from before its processes started and joined
        # (the round's rate came out ~40x low on every start, resize and restart)
        since = max(since, min(x["done"] - x["time"] for x in recs))
    elapsed = max(now - since, 1e-9)
    per_worker = Counter()
    for x in recs:
        per_worker[x.get("worker", 0)] += len(x["ids"])
    job_samples = state["num_samples"]
    log = ProgressLog(job_dir, echo=HumanProgress())   # the round's step line, also as a human line in the job's log
    log.write({
        "time": now, "step": state["steps"], "round": r, "epoch": (done_samples - 1) // job_samples,
        "samples": done_samples, "loss": sum(x["loss_sum"] for x in recs) / max(samples, 1),
        "samples_per_s": samples / elapsed,
        "per_worker_samples_per_s": [per_worker[w] / elapsed for w in range(gen.workers)], "workers": gen.workers,
        "servers": gen.servers, "sync": str(gen.mode),
        "batch_size": gen.global_batch, "lr": state.get("lr"), "generation": gen.number,
        "total_samples": state["total_samples"],
        # the request this generation answers: one that resizes ends it right after it is read (below), one that
        # changes nothing the ps runtime acts on (a move: its ranks use no GPU) is answered as it stands
        "control_generation": state["control_generation"], "strategy": "ps"})
    state["last_commit"] = now
    watch = ControlWatch(job_dir, lambda error: log.write({"event": "control_rejected", "error": error, "time": now}),
                         state["control_generation"], state.get("rejected_control"))
    control = watch.poll()
    if control is not None and control.workers <= gen.servers:   # was ignored without a word
        if state.get("rejected_generation") != control.generation:   # once, not at every round while it stands
            log.write({"event": "control_rejected", "time": now, "error": f"workers={control.workers}: a ps job's "
                       f"slots hold its {gen.servers} server(s) and at least one worker"})
        state["rejected_generation"], control = control.generation, None
    slow = _stragglers(log, state, gen, recs, now)
    log.close()
    state["rejected_control"] = watch.rejected_digest
    fresh = control is not None
    # control.json counts the job's slots, as the scheduler does: servers + workers
    workers = control.workers - gen.servers if fresh else gen.workers
    resize = fresh and workers != gen.workers
    if fresh:
        state["control_generation"] = control.generation
        state["workers"] = workers
        if control.batch_size:
            state["global_batch"] = control.batch_size
            resize = resize or control.batch_size != gen.global_batch
    atomic_write_json(_state_path(job_dir), state)
    return r + 1 < rounds and not resize and not slow


def _stragglers(log: ProgressLog, state: dict, gen: Generation, recs: list[dict], now: float) -> bool:
    """Whether this commit ends the generation to replace a straggler (``ps_stragglers``); each decision is a
    ``straggler`` event."""
    if not gen.replace_stragglers or not needs_replacing(gen.mode.staleness, gen.workers):
        return False
    fresh, again, ewma = flag(state, gen.number, round_rates(recs, gen.workers))
    if again:
        log.write({"event": "straggler", "time": now, "workers": again, "ewma": [ewma[w] for w in again],
                   "replaced": False, "reason": "slow again after its replacement: its slot, not its process; kept"})
    if fresh:
        log.write({"event": "straggler", "time": now, "workers": fresh, "ewma": [ewma[w] for w in fresh],
                   "replaced": True, "new_generation": gen.number + 1})
    return bool(fresh)


def committed_position(state: dict) -> int:
    """Global sample position the committed rounds reached (state files before it was kept: their samples)."""
    return state.get("position", state["samples"])


def committed_steps(state: dict) -> int:
    """Global batches the committed rounds trained, each round at its own batch."""
    return state.get("steps", math.ceil(state["samples"] / state["global_batch"]))


def _fresh_state(opts: PSOptions, job) -> dict:
    return {"servers": opts.servers, "sync": str(opts.mode), "workers": opts.workers,
            "global_batch": opts.batch_size or job.batch_size, "round_batches": opts.ckpt_every,
            "round_generation": [], "generation": -1, "control_generation": -1, "samples": 0, "position": 0, "steps": 0,
            "num_samples": job.num_samples, "total_samples": job.num_samples * job.epochs, "restarts": 0}


def has_embedding_table(job) -> bool:
    """Whether the job's model has a table ``--sparse`` sends by rows; built on the meta device (no memory: a
    sparse model's tables are its bulk), True where it cannot be built there."""
    try:
        with torch.device("meta"):
            model = job.make_model()
    except Exception:
        return True
    return any(isinstance(m, TABLES) for m in model.modules())


class PSRunner:
    def __init__(self, opts: PSOptions):
        if opts.workers < 1 or opts.servers < 1:
            raise UserError(f"servers={opts.servers}, workers={opts.workers}: both must be >= 1")
        if opts.ckpt_every < 1:
            raise UserError(f"ckpt_every={opts.ckpt_every}: a parameter-server round needs >= 1 global batch")
        self.opts = opts
        self.job = build_job(opts.entry, opts.params)
        if opts.sparse and not has_embedding_table(self.job):   # trained dense without a word
            raise UserError(f"--sparse: {opts.entry}'s model has no embedding table (nn.Embedding or EmbeddingBag), "
                            "whose rows alone would travel; drop --sparse")
        self.job_dir = Path(opts.job_dir)
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self.progress = ProgressLog(self.job_dir, echo=HumanProgress(), first=True)
        self.launcher = make_launcher("ray", self.job_dir) if opts.launcher == "ray" else None

    def _start_ranks(self, gen: Generation) -> tuple[Generation, list, object]:
        """The generation's P + W processes (servers first), the generation as started, and the TCPStore
        this supervisor hosts for it (None: rank 0 hosts it)."""
        (self.job_dir / "logs").mkdir(exist_ok=True)
        if self.launcher is None:
            ctx = mp.get_context("fork")  # no re-import of torch and the job per process
            load_lazy_training_modules()
            with inheriting_no_garbage():
                return gen, [_ForkedRank(ctx, rank, gen) for rank in range(gen.servers + gen.workers)], None
        host = self.launcher.store_host
        store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=120))
        gen = replace(gen, port=store.port, store_host=host)
        atomic_write_json(generation_path(self.job_dir, gen.number), {**asdict(gen), "mode": str(gen.mode)})
        ranks = [self.launcher.start(["--job-dir", str(self.job_dir), "--worker-id", str(rank),
                                      "--generation", str(gen.number)],
                                     rank_log(self.job_dir, rank), "", module="dlsched.train.ps_process")
                 for rank in range(gen.servers + gen.workers)]
        return gen, ranks, store

    def _status(self, state: str, workers: int, error: str | None = None, **extra) -> None:
        # program and strategy: what this folder trains, so another job or an all-reduce run is refused on it
        write_status(self.job_dir, state, os.getpid(), workers, error, program=job_program(self.opts.entry, None),
                     strategy="ps", **extra)

    def _state(self) -> dict:
        state = read_state(self.job_dir)
        if state is None:
            state = _fresh_state(self.opts, self.job)
            _state_path(self.job_dir).parent.mkdir(parents=True, exist_ok=True)
        else:  # a re-run: other workers, or other servers (the checkpoint is re-sharded when loaded)
            if state["servers"] != self.opts.servers:
                self.progress.write({"event": "servers_changed", "from_servers": state["servers"],
                                     "servers": self.opts.servers, "round": len(state["round_generation"])})
                state["servers"] = self.opts.servers
            state["workers"] = self.opts.workers
            state["restarts"] = 0   # --max-restarts bounds this run's losses, as all-reduce's (was: the job's, ever)
            state["total_samples"] = total_samples(self.job)   # a re-run with more epochs trains them
            asked = self.opts.batch_size
            if asked and asked != state["global_batch"]:   # was silently trained on at the earlier run's batch
                print(f"{self.job_dir}: resuming at step {committed_steps(state)} with batch {asked} (the earlier "
                      f"run's: {state['global_batch']})", flush=True)
                state["steps"], state["global_batch"] = committed_steps(state), asked
        state["sync"] = str(self.opts.mode)
        state["last_commit"] = time.time()
        atomic_write_json(_state_path(self.job_dir), state)
        return state

    def _generation(self, state: dict) -> Generation:
        return Generation(self.opts.entry, self.opts.params, self.opts.servers, state["workers"], self.opts.mode,
                          state["global_batch"], state["round_batches"], state["generation"] + 1,
                          len(state["round_generation"]), str(self.job_dir), _free_port(), self.opts.throttle,
                          state.get("ckpt_servers", state["servers"]), sparse=self.opts.sparse,
                          first_position=committed_position(state), reference_batch=self.opts.reference_batch,
                          replace_stragglers=self.opts.replace_stragglers)

    def run(self) -> int:
        # `dlsched train` runs this in-process, past run.py's own install: without it a SIGTERM killed the
        # supervisor alone and its forked ranks trained on unsupervised (status "running", no "stopped")
        preemption.install()
        state = self._state()
        if ((read_status(self.job_dir) or {}).get("state") == "finished"   # wrote a second `finished`, a new loss
                and committed_position(state) >= state["total_samples"]):
            print(f"{self.job_dir}: already finished at step {committed_steps(state)}; nothing to train (--param "
                  f"epochs=N over {self.job.epochs} trains on)", flush=True)
            return 0
        if state["round_generation"]:   # a re-run said nothing of where it went on (all-reduce's says it)
            self.progress.write({"event": "resumed", "time": time.time(), "new_generation": state["generation"] + 1,
                                 "restored_step": committed_steps(state), "strategy": "ps",
                                 "checkpoint": f"round {len(state['round_generation']) - 1}"})
        while True:
            gen = self._generation(state)
            if gen.first_round >= num_rounds(gen, self.job):
                return self._finish()
            state["generation"] = gen.number
            state["lr"] = server_lr(gen, self.job)   # for the step records (commit_round)
            atomic_write_json(_state_path(self.job_dir), state)
            gen, procs, store = self._start_ranks(gen)
            self._status("running", gen.workers, servers=gen.servers, generation=gen.number,
                         server_pids=[p.pid for p in procs[:gen.servers]],
                         worker_pids=[p.pid for p in procs[gen.servers:]])
            lost = self._wait(procs)
            if self.launcher is not None:  # end the ranks' actors: the next generation's ranks need their bundles
                for p in procs:
                    p.kill()
            del store  # the generation's group is gone
            if lost and lost != STOPPED and EXIT_NO_SPACE in lost.values():   # no rank lost: the job stops (run.py)
                full = {r: c for r, c in lost.items() if c == EXIT_NO_SPACE}
                raise no_space(f"{_ranks(full, gen.servers)}: {_last_lines(self.job_dir, full)[min(full)]}")
            state = read_state(self.job_dir)
            if lost == STOPPED:
                self.progress.write({"event": "stopped", "round": len(state["round_generation"]),
                                     "step": committed_steps(state), "time": time.time()})
                self._status("stopped", gen.workers)
                return STOPPED
            if lost:
                state["restarts"] += 1
                lost, cause = _lost_ranks(self.job_dir, lost)
                self.progress.write({"event": "worker_lost", "exit_codes": lost, "new_generation": gen.number + 1,
                                     "servers_lost": [r for r in lost if r < gen.servers],
                                     "workers_lost": [r - gen.servers for r in lost if r >= gen.servers],
                                     "restored_round": len(state["round_generation"]),
                                     "restored_step": committed_steps(state), "error": cause})
                if state["restarts"] > self.opts.max_restarts:
                    error = (f"{_ranks(lost, gen.servers)} died; gave up after {self.opts.max_restarts} restarts: "
                             f"{cause} (rank logs in {self.job_dir / 'logs'})")
                    self._status("failed", gen.workers, error)
                    raise JobFailed(error)
            elif state["workers"] != gen.workers or state["global_batch"] != gen.global_batch:
                self.progress.write({"event": "resized", "from_workers": gen.workers, "workers": state["workers"],
                                     "batch_size": state["global_batch"], "round": len(state["round_generation"])})
            atomic_write_json(_state_path(self.job_dir), state)

    def _wait(self, procs) -> dict | int:
        """{rank: exit code} of processes that failed (the rest killed), {} when all ended well, or STOPPED."""
        while True:
            codes = {i: p.poll() for i, p in enumerate(procs)}
            failed = {i: c for i, c in codes.items() if c not in (None, 0)}
            if failed or preemption.requested():
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                for p in procs:
                    p.wait()
                return STOPPED if preemption.requested() and not failed else failed
            if all(c == 0 for c in codes.values()):
                return {}
            time.sleep(0.05)

    def _finish(self) -> int:
        state = read_state(self.job_dir)
        loss = final_loss(self.job_dir, self.opts.entry, self.opts.params, state)
        self.progress.write({"event": "finished", "step": committed_steps(state), "round": len(state["round_generation"]),
                             "final_loss": loss, "time": time.time()})   # when it ended (service/recovery.py)
        print(f"parameter server ({state['sync']}, {state['servers']} servers): final loss over the dataset {loss:.4f}")
        self._status("finished", state["workers"], final_loss=loss)
        return 0


def _ranks(lost: dict, servers: int) -> str:
    return ", ".join(f"server {r}" if r < servers else f"worker {r - servers}" for r in sorted(lost))


# a rank whose peer died fails at its next exchange with gloo's transport error, naming no cause of its own; or at
# its next store request, when the peer was rank 0, which hosts the generation's TCPStore (a stress run: a killed
# server 0 was reported with worker 0, whose last line was the store's, not gloo's)
PEER_LOST = ("gloo/transport/tcp", "Connection reset by peer", "Connection closed by peer", "Broken pipe",
             "failed to recv", "DistNetworkError", "TCPStore")
GENERATION_MARK = "--- dlsched ps generation "


def _last_lines(job_dir: Path, lost: dict) -> dict:
    """{rank: what ended it}: a signal, else its log's last line in this generation."""
    out = {}
    for r, code in sorted(lost.items()):
        try:
            tail = [x for x in rank_log(job_dir, r).read_text(errors="replace").splitlines() if x.strip()]
        except OSError:
            tail = []
        last = tail[-1] if tail and not tail[-1].startswith(GENERATION_MARK) else f"exit {code}"
        out[r] = f"killed by signal {-code}" if code < 0 else last
    return out


def _lost_ranks(job_dir: Path, lost: dict) -> tuple[dict, str]:
    """The ranks lost, not the peers their loss then failed at the next exchange (all, where none is told apart),
    and the first one's cause."""
    lines = _last_lines(job_dir, lost)
    own = {r: lost[r] for r, x in lines.items() if not any(m in x for m in PEER_LOST)} or lost
    return own, lines[min(own)]


def final_model(job_dir: Path, entry: str, params: dict, state: dict) -> torch.nn.Module:
    """The trained model, assembled from the servers' shards of the last committed round."""
    job = build_job(entry, params)
    flat, _, _ = restore_flat(Path(job_dir), job, state.get("ckpt_servers", state["servers"]),
                              len(state["round_generation"]) - 1)
    model = job.make_model()
    torch.nn.utils.vector_to_parameters(flat, model.parameters())
    return model


def final_loss(job_dir: Path, entry: str, params: dict, state: dict, batch: int = 1024) -> float:
    """Mean loss of the trained model over the whole dataset (the figure to compare modes by)."""
    job = build_job(entry, params)
    model = final_model(job_dir, entry, params, state)
    total = 0.0
    with torch.no_grad():
        for lo in range(0, job.num_samples, batch):
            ids = torch.arange(lo, min(lo + batch, job.num_samples))
            x, y = job.get_batch(ids)
            total += float(job.loss_fn(model(x), y)) * len(ids)
    return total / job.num_samples


def committed_samples(job_dir: Path) -> Counter:
    """Multiset of sample ids trained into the final model: each round's records from the generation that
    committed it (an uncommitted round's records were replayed by the next generation)."""
    state = read_state(job_dir)
    seen: Counter = Counter()
    for r, g in enumerate(state["round_generation"]):
        for path in sorted((Path(job_dir) / "ps" / "records").glob(f"gen-{g:04d}-worker-*.jsonl")):
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                if rec["round"] == r:
                    seen.update(rec["ids"])
    return seen


def staleness_gaps(job_dir: Path) -> np.ndarray:
    """clock − slowest active clock at each SSP/async reply, over every committed record."""
    state = read_state(job_dir)
    gaps = []
    rounds = state["round_generation"]
    for g in sorted(set(rounds)):
        for path in sorted((Path(job_dir) / "ps" / "records").glob(f"gen-{g:04d}-worker-*.jsonl")):
            # a generation lost mid-round left records of a round the next one replayed: not committed, not counted
            gaps += [rec["clock"] - rec["slowest"] for rec in map(json.loads, path.read_text().splitlines())
                     if "clock" in rec and rec["round"] < len(rounds) and rounds[rec["round"]] == g]
    return np.asarray(gaps)
