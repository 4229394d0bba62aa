"""A FLEET ensemble on several Ray nodes: each node's flotillas run in one *node runner* inside one of the job's bundles
on that node, so a flotilla's shared pipeline and its members stay node-local (the ring is shared memory) and the
ensemble uses the slots the scheduler gave it on every node, not only the coordinator's.

The coordinator (``fleet_job.train_ensemble``) plans flotillas node by node (``fleet_job.plan_on_nodes``), then
``run_on_nodes`` starts one runner per node through the job's ``RayLauncher`` (a ``ProcessHost`` actor in a bundle of
that node, ``python -m dlsched.train.launcher --ray-worker dlsched.train.flotilla_nodes``). Hand-over, per run, in the
shared job folder (the Ray backend's contract: every node sees it):

* ``logs/fleet-<run>-<i>.run.json`` (coordinator -> runner i): the ensemble's entry and params (the runner builds the
  members and loads the data itself), its flotillas' member names, each member's workers, each flotilla's producer
  core count, the streams' first batches and the members' shifts, the stop file's path and its report file's;
* ``logs/fleet-<run>-<i>.jsonl`` (runner -> coordinator), one JSON object a line: ``{"report": [...]}`` (the member
  reports ``run_flotillas`` relays), then one of ``{"runs": [...]}`` (done), ``{"lost": [[who, code], ...]}`` (a
  process killed by a signal: every member resumes from its checkpoint) or ``{"error": "...", "no_space": bool}``;
* ``.fleet-<run>.stop`` (coordinator -> every runner): exists = pause every member at its next step (a member left,
  a new share, a stop request, another node's failure); each checkpoints and reports, as on one machine.

A runner dies with its actor (``launcher._worker_under_ray``), its members and producers with it (``share_fate``);
the actors are the coordinator's, so they die with it too.
"""
from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Mapping, Sequence

from dlsched.train.flotilla import LEFT, FlotillaRun, MemberLost
from dlsched.train.no_space import no_space

NODE_MODULE = "dlsched.train.flotilla_nodes"
POLL_S = 0.2


class _Runner:
    """The coordinator's side of one node runner: its handle and the reports it has written so far."""

    def __init__(self, handle, reports: Path, names: Sequence[str]) -> None:
        self.handle, self.reports, self.names = handle, reports, tuple(names)
        self.offset = 0
        self.ended: dict | None = None   # its last record: runs, lost or error

    def read(self) -> list[dict]:
        try:
            with open(self.reports, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        whole = chunk[: chunk.rfind(b"\n") + 1]   # a line still being written is read next time
        self.offset += len(whole)
        return [json.loads(line) for line in whole.splitlines() if line.strip()]


def run_on_nodes(launcher, job_dir: Path, ensemble: Mapping, placed: Sequence[tuple[str, Sequence[Sequence[str]]]],
                 workers: Mapping[str, int], cores: Sequence[Sequence[int]], start_batch: Sequence[int],
                 shift: Mapping[str, int], should_stop: Callable[[], bool],
                 on_report: Callable[[tuple], None]) -> tuple[set[str], list[FlotillaRun]]:
    """``run_flotillas`` across nodes: ``placed`` is (Ray node id, its flotillas' member names) per node; ``cores``,
    ``start_batch`` per flotilla in the order ``placed`` lists them; ``ensemble``: ``entry``, ``params``, ``seed``,
    ``ckpt_dir``. Same return and errors as ``run_flotillas``."""
    run = uuid.uuid4().hex[:8]
    logs = job_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stop = job_dir / f".fleet-{run}.stop"
    runners: list[_Runner] = []
    k = 0
    try:
        for i, (node, groups) in enumerate(placed):
            names = [n for g in groups for n in g]
            reports, spec = logs / f"fleet-{run}-{i}.jsonl", logs / f"fleet-{run}-{i}.run.json"
            spec.write_text(json.dumps({
                **ensemble, "groups": [list(g) for g in groups], "workers": {n: workers.get(n, 1) for n in names},
                "cores": [len(c) for c in cores[k: k + len(groups)]], "start_batch": list(start_batch[k: k + len(groups)]),
                "shift": {n: shift.get(n, 0) for n in names}, "stop": str(stop), "reports": str(reports)}))
            k += len(groups)
            handle = launcher.start(["--job-dir", str(job_dir), "--worker-id", str(i), "--run", str(spec)],
                                    logs / f"fleet-node-{i}.log", "", module=NODE_MODULE, node=node)
            runners.append(_Runner(handle, reports, names))
        return _follow(runners, stop, should_stop, on_report, [list(g) for _, gs in placed for g in gs])
    finally:
        for r in runners:
            if r.handle.poll() is None:
                r.handle.kill()
        stop.unlink(missing_ok=True)


def _follow(runners: list[_Runner], stop: Path, should_stop: Callable[[], bool], on_report: Callable[[tuple], None],
            groups: list[list[str]]) -> tuple[set[str], list[FlotillaRun]]:
    converged: set[str] = set()
    runs: list[FlotillaRun] = []
    lost: list[tuple[str, int]] = []
    errors: list[dict] = []
    while True:
        live = [r for r in runners if r.handle.poll() is None]
        for r in runners:
            for rec in r.read():
                if "report" in rec:
                    msg = tuple(rec["report"])
                    on_report(msg)
                    if msg[1] in LEFT:
                        converged.add(msg[0])
                        stop.touch()   # re-form: every node's members checkpoint at their next step
                    continue
                r.ended = rec
                runs += [FlotillaRun(tuple(m), s, e, tuple(w), c) for m, s, e, w, c in rec.get("runs", [])]
                lost += [tuple(x) for x in rec.get("lost", [])]
                errors += [rec] if "error" in rec else []
        for r in runners:   # ended before this pass read its file, without a last word: killed
            if r not in live and r.ended is None:
                r.ended = {"lost": []}
                lost.append((f"node runner of {'+'.join(r.names)}", r.handle.returncode))
        if lost or errors or should_stop():
            stop.touch()
        if not live and all(r.ended is not None for r in runners):
            break
        time.sleep(POLL_S)
    if errors:
        e = errors[0]
        raise no_space(e["error"]) if e.get("no_space") else RuntimeError(e["error"])
    if lost:
        raise MemberLost(lost, [[_Named(n) for n in g] for g in groups])
    return converged, runs


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


# ----------------------------------------------------------------------------- the runner process

def main(argv: list[str]) -> None:
    """``--job-dir DIR --worker-id I --run FILE`` (started by ``run_on_nodes`` under ``launcher._worker_under_ray``)."""
    import argparse

    ap = argparse.ArgumentParser(prog=NODE_MODULE)
    ap.add_argument("--job-dir", required=True)
    ap.add_argument("--worker-id", type=int, required=True)
    ap.add_argument("--run", required=True)
    a = ap.parse_args(argv)
    run = json.loads(Path(a.run).read_text())
    out = open(run["reports"], "a")

    def put(rec: dict) -> None:
        out.write(json.dumps(rec) + "\n")
        out.flush()

    code = _run_node(Path(a.job_dir), run, put)
    out.close()
    if code:
        sys.exit(code)


def _run_node(job_dir: Path, run: dict, put: Callable[[dict], None]) -> int:
    from dlsched.train.fleet_spec import FleetOptions, load_data
    from dlsched.train.flotilla import CTX, run_flotillas
    from dlsched.train.no_space import is_no_space

    try:
        spec = FleetOptions(job_dir, run["entry"], run["params"], 0).ensemble()
        base = Path(spec.base_dir or ".")
        members = {m.name: m for m in spec.members(base)}
        data, val = load_data(spec, base)
        groups = [[members[n] for n in g] for g in run["groups"]]
        cpus = sorted(os.sched_getaffinity(0))
        cores, i = [], 0
        for c in run["cores"]:   # the planner's c* per flotilla, round-robin over this node's cores
            cores.append([cpus[(i + j) % len(cpus)] for j in range(c)])
            i += c
        gpus = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        devices = {n: [f"cuda:{gpus[r % len(gpus)]}" if gpus else "cpu" for r in range(g)]
                   for n, g in run["workers"].items()}
        converged, runs = run_flotillas(
            groups, data, val, spec.batch_size, spec.convergence_rule(), Path(run["ckpt_dir"]), CTX.Queue(),
            start_batch=run["start_batch"], seed=run["seed"], workers=run["workers"], cores=cores, devices=devices,
            should_stop=lambda: Path(run["stop"]).exists(), on_report=lambda m: put({"report": list(m)}),
            augment=spec.augment(), shift=run["shift"])
    except MemberLost as e:
        put({"lost": [list(x) for x in e.lost]})
        return 1
    except Exception as e:  # noqa: BLE001 - reported to the coordinator, which fails the job with it
        put({"error": str(e) if isinstance(e, RuntimeError) else f"{type(e).__name__}: {e}",
             "no_space": is_no_space(e)})
        return 1
    put({"runs": [[list(r.members), r.start, r.end, list(r.workers), r.producer_cpu_s] for r in runs],
         "converged": sorted(converged)})
    return 0
