"""Service commands, shaped after Slurm/kubectl habits: ``serve``, ``submit FILE``, ``status`` (squeue-like,
``--watch``), ``show ID``, ``cancel ID`` (scancel), ``logs ID [-f]``, ``events``, ``nodes`` (sinfo). Clients talk to the REST API
at ``--server`` / ``$DLSCHED_SERVER`` with the bearer token ``serve`` generated (``service.auth.client_token``:
``$DLSCHED_TOKEN``, ``$DLSCHED_TOKEN_FILE`` or ``dlsched-state/token``)."""
from __future__ import annotations

import json
import logging
import math
import os
import re
import shlex
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import quote

import httpx
import typer
import yaml
from rich.markup import escape

from dlsched.display import (Column, human_duration, local_clock, make_table, print_json, readable_numbers, table,
                             with_iso_times)
from dlsched.errors import UserError
from dlsched.service.fleet_status import summary
from dlsched.service.store import ACTIVE, FINISHED, TERMINAL

DEFAULT_SERVER = "http://127.0.0.1:8642"
# how long the CLI retries a 503 + Retry-After (nothing was done): a restarting service taking up its jobs, a
# database another process holds locked
RETRY_S = 120.0
STATE_STYLE = {"queued": "yellow", "running": "green", "rescaling": "cyan", "finished": "blue", "failed": "red",
               "cancelled": "magenta"}


class ServiceError(UserError):
    """The service answered with an error: ``status``, and its JSON answer (``{"error": ..., ...}``) in ``answer``."""

    def __init__(self, message: str, status: int, answer: dict):
        super().__init__(message)
        self.status, self.answer = status, answer


def _answer(r: httpx.Response) -> dict:
    """An error answer's JSON object; its text (on one line, cut short: a proxy's HTML page) as ``error`` where it is
    none."""
    answer = _dlsched_answer(r)
    return answer if answer is not None else {"error": " ".join(r.text.split())[:200]}


def _dlsched_answer(r: httpx.Response) -> dict | None:
    """The service's error answer (``{"error": ...}``, JSON), else None: another server answered."""
    try:
        answer = r.json()
    except ValueError:
        return None
    return answer if isinstance(answer, dict) and "error" in answer else None


class Client:
    """Thin HTTP client; every failure becomes one ``UserError`` line (``ServiceError`` where the service answered)."""

    def __init__(self, server: str | None = None, token: str | None = None, timeout: float = 10.0,
                 write_timeout: float | None = None):
        from dlsched.service.auth import client_token
        from dlsched.service.store import BUSY_TIMEOUT_S

        # a write waits up to BUSY_TIMEOUT_S for the database's lock, then answers 503 (nothing stored): a client
        # that gave up at 10 s said "cannot reach" while the job was stored after all, and a retry submitted it twice
        self.write_timeout = write_timeout if write_timeout is not None else max(timeout, BUSY_TIMEOUT_S + 15)

        self.base = (server or os.environ.get("DLSCHED_SERVER") or DEFAULT_SERVER).rstrip("/")
        token = token or client_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:   # an unparsable URL (http://256.1.1.1) was an InvalidURL traceback, not an HTTPError
            self.http = httpx.Client(base_url=self.base, headers=headers, timeout=timeout)
        except httpx.InvalidURL as e:
            raise UserError(f"--server {self.base!r}: not a service URL ({e}); expected e.g. {DEFAULT_SERVER}") from None

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        if method != "GET":
            kw.setdefault("timeout", httpx.Timeout(self.http.timeout.connect, read=self.write_timeout,
                                                   write=self.write_timeout, pool=self.http.timeout.pool))
        try:
            r = self.http.request(method, path, **kw)
            # a restarting service answers 503 + Retry-After before doing anything (``api.after_recovery``): waited
            # for here, as a user would, not an error on the first `dlsched status` after a restart
            give_up = time.monotonic() + RETRY_S
            if r.status_code == 503 and "retry-after" in r.headers:
                # said: a locked database's retries waited 2.5 min without a word
                print(f"{method} {path}: HTTP 503: {_answer(r).get('error', r.text)}; retrying for up to "
                      f"{RETRY_S:g} s", file=sys.stderr, flush=True)
            while r.status_code == 503 and "retry-after" in r.headers and time.monotonic() < give_up:
                time.sleep(1.0)
                r = self.http.request(method, path, **kw)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as e:   # 'host:8642' with no http://: no service to ask after
            raise UserError(f"--server {self.base!r}: not a service URL ({e}); expected e.g. {DEFAULT_SERVER}") from None
        except httpx.TransportError as e:
            # sent, unanswered: timed out, or the service died before answering (kill -9 mid-submit); a write may
            # have been stored: "cannot reach" sent the user to submit the job a second time
            if isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout)):   # never sent
                raise UserError(f"cannot reach the dlsched service at {self.base}: {e} (is `dlsched serve` "
                                "running?)") from None
            if method != "GET":
                waited = f" within {self.write_timeout:g} s" if isinstance(e, httpx.TimeoutException) else f" ({e})"
                raise UserError(f"the dlsched service at {self.base} did not answer {method} {path}{waited}: it may "
                                "have carried it out; check `dlsched status` before retrying") from None
            raise UserError(f"the dlsched service at {self.base} did not answer {method} {path}: {e}") from None
        except httpx.HTTPError as e:
            raise UserError(f"cannot reach the dlsched service at {self.base}: {e} (is `dlsched serve` running?)") from None
        if r.status_code >= 400 and r.status_code not in (500, 502, 503, 504) and _dlsched_answer(r) is None:
            # another server on that address (a web server on the port): its bare 404 read as "no such job" (a 500
            # is the service's own crash; 502-504 a proxy's word that the service behind it is down)
            raise UserError(f"the server at {self.base} answered {method} {path} with HTTP {r.status_code} but not as "
                            "a dlsched service does; is --server (or $DLSCHED_SERVER) the service's address?")
        if r.status_code >= 400:
            answer = _answer(r)
            hint = (" (the token is in the service's STATE_DIR/token: set DLSCHED_TOKEN_FILE to it)"
                    if r.status_code == 401 else "")
            raise ServiceError(f"{method} {path}: HTTP {r.status_code}: {answer.get('error', r.text)}{hint}",
                               r.status_code, answer)
        return r

    def get(self, path: str, **kw):
        return self.request("GET", path, **kw).json()

    def submit(self, body: bytes, fmt: str) -> dict:
        ctype = "application/json" if fmt == "json" else "application/yaml"
        return self.request("POST", "/jobs", content=body, headers={"content-type": ctype}).json()

    def submit_all(self, specs: list, sources: list[str]) -> list[dict]:
        """Submit ``specs`` all or none (``POST /jobs/batch``): the service checks every one before it stores any. A
        spec it refuses is one line naming its ``sources`` entry (the file), as the CLI's own checks name it."""
        from dlsched.spec import to_json

        body = '{"jobs": [' + ", ".join(to_json(s) for s in specs) + "]}"
        try:
            r = self.request("POST", "/jobs/batch", content=body.encode(), headers={"content-type": "application/json"})
        except ServiceError as e:
            i = e.answer.get("index")
            if e.status != 422 or type(i) is not int or not 0 <= i < len(sources):
                raise
            raise UserError(f"{sources[i]}: {str(e.answer.get('error', '')).removeprefix(f'jobs[{i}]: ')}") from None
        return r.json()["jobs"]


JOB_COLUMNS = [Column("ID", "right"), Column("NAME"), Column("STATE"), Column("GPUS", "right"),
               Column("BATCH", "right", drop_rank=2), Column("DONE", "right"), Column("LOSS", "right", drop_rank=1),
               Column("SAMPLES/S", "right", drop_rank=3), Column("FINISH"), Column("LEFT", "right", drop_rank=2),
               Column("REASON", drop_rank=1), Column("TARGET", drop_rank=3)]


NODE_COLUMNS = [Column("NODE"), Column("ADDRESS"), Column("SLOTS", "right"), Column("USED", "right"),
                Column("HEALTH"), Column("SINCE", drop_rank=1), Column("TYPE", drop_rank=2), Column("JOBS")]
HEALTH_STYLE = {"up": "green", "lost": "bold red"}


def node_rows(nodes: list[dict]) -> list[list[str]]:
    """One row per node, like ``sinfo -N``: a lost node stays listed, marked, with the time it went."""
    return [[escape(n["name"]), n["address"] or "-", str(n["slots"]), str(n["used"]),
             f"[{HEALTH_STYLE.get(n['health'], '')}]{n['health']}[/]", local_clock(n["since"]), escape(n["gpu_type"]),
             ",".join(map(str, n["jobs"])) or "-"] for n in nodes]


def _finish_cell(j: dict) -> str:
    """Predicted finish for live jobs; the real one for finished jobs; none for failed or cancelled ones."""
    if j["state"] == "finished":
        return local_clock(j.get("end_time"))
    if j["state"] in TERMINAL:
        return "-"
    return local_clock(j.get("predicted_finish")) if j.get("predicted_finish") else "-"


def _left_cell(j: dict, now: float) -> str:
    """Time to the predicted finish, and in brackets where it spreads by a tenth or more, the same at the fast and the
    slow end of the job's recent speed (``predicted_finish_range``); a live job past it is ``overdue`` (``-0s`` read as
    a job that had ended), or ``ending`` once it trained every sample (its last evaluation, checkpoint and exit)."""
    ts = j.get("predicted_finish")
    if j["state"] in TERMINAL:
        return "-"
    if (j.get("fraction_done") or 0) >= 1:
        return "ending"
    if not ts:
        return "-"
    if ts - now < 0.5:
        return "overdue"
    span = j.get("predicted_finish_range")   # at the fast and the slow end of its recent speed
    return human_duration(ts - now) + (f" ({human_duration(max(0.0, span[0] - now))}-{human_duration(span[1] - now)})"
                                       if span and span[1] - span[0] >= 0.1 * (ts - now) and span[1] > now else "")


def _hold(j: dict, unit: str = "") -> str:
    """A ``dlsched resize`` hold: '2', 'batch 64', '2, batch 64' (``unit`` after the workers); '' for none."""
    workers, batch = j.get("requested_workers"), j.get("requested_batch")
    return ", ".join(([f"{workers}{unit}"] if workers is not None else [])
                     + ([f"batch {batch}"] if batch is not None else []))


def _reason(j: dict) -> str:
    if j["state"] == "failed":
        return j.get("error") or "failed"
    if j["state"] == "cancelled":
        return j.get("error") or "cancelled by request"
    if j["state"] in TERMINAL:   # a finished job showed 'held at 2 by resize': nothing holds an ended job
        return ""
    # an operator's hold outlives the incident it was set for: say it, or the policy seems not to size the job
    held = f"held at {_hold(j)} by resize" if _hold(j) else ""
    if j["state"] == "queued":   # its folder's disk full: it said "waiting for GPUs" while they were free
        waiting = f"waiting for {j.get('waiting_for') or 'GPUs'}"
        return f"{held}; {waiting}" if held else waiting
    if j.get("stalled_since"):   # its processes live, its steps stopped (service/stalls.py)
        return f"no progress since {local_clock(j['stalled_since'])}"
    return held


def _reason_cell(j: dict) -> str:
    """The reason, and for a queued job the forecast's start: the service computed it (the API and dashboard show
    it) but the table said only "waiting for GPUs", so an operator could not see when the queue moves."""
    start = j.get("predicted_start") if j["state"] == "queued" else None
    return _reason(j) + (f"; starts ~{local_clock(start)}" if start else "")


def _gpus_cell(j: dict) -> str:
    """The GPUs a job trains on; while it rescales, the target too (``4->2``)."""
    target = j.get("target_gpus")
    return f"{j['num_gpus']}->{target}" if target is not None and target != j["num_gpus"] else str(j["num_gpus"])


def _batch_cell(j: dict) -> str:
    """The global batch the scheduler runs the job at, else the one its runtime reports (a script's own)."""
    return str(j.get("batch_size") or j.get("trained_batch") or "-")


def _target_cell(j: dict) -> str:
    """A job's stated target (``prediction.target`` or ``target_loss``): when it gets there at today's rate (the
    step while it does not train), its 80 % band in brackets, and the chance it does by the budget; one past the
    predicted final value, that value and the budget's time; once reached, when."""
    t, pending = j.get("target"), j.get("target_pending")
    # a stated target of a reported metric not predicted yet (the why: `dlsched show ID`'s target_pending); beside
    # a target loss that is (``finish_times.stated_targets``)
    waiting = None if not pending else escape(f"{pending['metric']} {pending['value']:g}: no prediction yet")
    if j["state"] in TERMINAL:   # it showed "-" once the job ended: did it get there?
        return _outcome_cell(j, t) if t else "-"
    if not t:
        return waiting or "-"
    return _reach_cell(t) + ("" if waiting is None else f"; {waiting}")


def _outcome_cell(j: dict, t: dict) -> str:
    """An ended job's stated target: when it got there, else not, with the value it ended at where it trained to its
    budget (its last refit's final, fitted on every point)."""
    if t.get("reached"):
        return _reach_cell(t)
    ended = j["state"] == FINISHED and (j.get("fraction_done") or 0) >= 1 and t.get("final") is not None
    return escape(f"{t['metric']} {t['value']:g}: not reached" + (f", ended at {t['final']:.4g}" if ended else ""))


def _reach_cell(t: dict) -> str:
    if t.get("reached"):   # a fact: where (when) the log got there; no chance to give
        at = local_clock(t["time"]) if t.get("time") is not None else f"step {t['step']:,.0f}"
        return escape(f"{t['metric']} {t['value']:g}: reached {at}")
    if t["step"] is None:
        when = "not by the budget"
    elif t.get("time") is not None:
        band = t.get("time_80")
        when = local_clock(t["time"]) + ("" if band is None else f" [{local_clock(band[0])}–{local_clock(band[1])}]")
    else:
        band = t.get("step_80")
        when = f"step {t['step']:,.0f}" + ("" if band is None else f" [{band[0]:,.0f}–{band[1]:,.0f}]")
    if t.get("beyond"):   # the time is the budget's: "val_accuracy 0.93: 20:40:35 (35 %)" read as a prediction
        when = f"predicted to end at {t['final']:.4g}; by the budget, {when}, only if it does better"
    # "[20:39–20:41] (80 %)" read as the band's 80 %
    chance = f", chance {100 * t['chance']:.0f} %" if t.get("chance") is not None else ""
    return escape(f"{t['metric']} {t['value']:g}: {when}{chance}")


def _loss_cell(j: dict) -> str:
    """The job's newest loss; an ensemble's: its best member's (``service.member_losses``), said so as the dashboard
    says it."""
    if j.get("last_loss") is None:
        return "-"
    return ("best " if j.get("ensemble") else "") + f"{j['last_loss']:.4g}"


def job_rows(jobs: list[dict], now: float | None = None) -> list[list[str]]:
    now = time.time() if now is None else now
    rows = []
    for j in jobs:
        frac = j.get("fraction_done")
        style = STATE_STYLE.get(j["state"], "")
        name = escape(j["name"]) + (f"\n[dim]{escape(summary(j['ensemble']))}[/]" if j.get("ensemble") else "")
        rows.append([str(j["id"]), name, f"[{style}]{j['state']}[/]", _gpus_cell(j),
                     _batch_cell(j), f"{100 * frac:.1f}%" if frac is not None else "-",
                     _loss_cell(j),
                     f"{j['samples_per_s']:.0f}" if j.get("samples_per_s") else "-",
                     _finish_cell(j), _left_cell(j, now), escape(_reason_cell(j)), _target_cell(j)])
    return rows


def watch_piped(fetch: Callable[[], list[dict]], interval: float, wide: bool) -> None:
    """``status -w`` into a pipe or file, like ``kubectl get -w``: the table of ``fetch()``'s jobs once, then each
    job whose state, GPUs, batch or reason changed, as it changes (progress alone is not news), until interrupted."""
    seen: dict[str, tuple] = {}
    try:
        while True:
            jobs = fetch()
            rows = job_rows(jobs)
            # ID -> STATE, GPUS, BATCH, REASON; a queued job's forecast start moves each round: not news either
            now = {r[0]: (r[2], r[3], r[4], _reason(j)) for r, j in zip(rows, jobs)}
            changed = [r for r in rows if seen.get(r[0]) != now[r[0]]]
            if changed:
                print_jobs(changed, "dlsched jobs" if not seen else None, wide)
            seen.update(now)
            time.sleep(interval)
    except KeyboardInterrupt:
        pass


def _as_option(message: str, stated) -> str:
    """A script job's spec error (``command line: field prediction.target_loss: ...``) as the option that set it."""
    for flag, field in (("--gpus", "gpus"), ("--min-gpus", "min_gpus"), ("--max-gpus", "max_gpus"),
                        *((f, f"prediction.{field}") for f, field, _ in stated)):
        if message.startswith(prefix := f"command line: field {field}: "):
            return f"{flag}: {message[len(prefix):]}"
    return message


def metric_target(target: str | None, kind: str | None) -> dict | None:
    """``submit --target METRIC=VALUE --metric KIND`` as the spec's ``prediction.target`` (the spec checks the name,
    the number and the kind)."""
    if target is None:
        if kind is not None:
            raise UserError(f"--metric {kind}: the kind of a --target METRIC=VALUE, which is not given")
        return None
    name, eq, value = target.rpartition("=")
    if not eq or not name:
        raise UserError(f"--target {target}: expected METRIC=VALUE (val_accuracy=0.93)")
    if kind is None:   # as its name says (``perf.metric_names``), where it does
        from dlsched.perf.metric_names import metric_from_name

        if (kind := metric_from_name(name)) is None:
            raise UserError(f"--target {target}: say what {name} is: --metric accuracy (higher is better) | error | "
                            "loss")
        typer.echo(f"note: --metric {kind}, from the metric's name {name!r} (give --metric to choose)", err=True)
    try:
        number = float(value)
    except ValueError:
        raise UserError(f"--target {target}: {value!r} is not a number") from None
    if not math.isfinite(number):   # was "command line: NaN is not a number JSON allows", naming no option
        raise UserError(f"--target {target}: {value!r} is not a finite number")
    from pydantic import ValidationError

    from dlsched.spec import STATED, MetricTarget

    try:   # the spec's rules, said of the option (was "field prediction.target.value: ...", a field not typed)
        MetricTarget.model_validate({"metric": name, "kind": kind, "value": number}, context=STATED)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        why = first["msg"].removeprefix("Value error, ")
        if first["loc"] and first["loc"][0] == "kind":   # the kind is --metric's value, not --target's
            raise UserError(f"--metric {kind}: {why} (got {kind!r})") from None
        raise UserError(f"--target {target}: {why}") from None
    return {"metric": name, "value": number, "kind": kind}


def only_jobs(jobs: list[dict], ids: list[int] | None, all_jobs: bool) -> list[dict]:
    """``jobs`` cut to ``ids`` (all where none); an id the service does not list is one line naming it."""
    missing = [i for i in ids or [] if i not in {j["id"] for j in jobs}]
    if missing:
        raise UserError(f"job {missing[0]}: " + ("no such job" if all_jobs else "not queued or running (--active)"))
    return [j for j in jobs if not ids or j["id"] in ids]


def print_jobs(rows: list[list[str]], title: str | None, wide: bool) -> None:
    """Rows of ``job_rows`` as the jobs table, flushed (``status -w`` into a pipe shows each change at once)."""
    table(JOB_COLUMNS, rows, title=title, wide=wide, show_all=SHOW_ALL)
    sys.stdout.flush()


def jobs_table(jobs: list[dict], title: str = "dlsched jobs", width: int = 80, wide: bool = False):
    """The jobs table as a renderable, for live views (``status --watch``, the demo)."""
    return make_table(JOB_COLUMNS, job_rows(jobs), title=title, wide=wide, width=width, show_all=SHOW_ALL)


def parse_since(value: str | None) -> float | None:
    """``30m``, ``2h``, ``1d`` ago, or an ISO 8601 date/time."""
    if not value:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if value[-1:] in units and value[:-1].replace(".", "", 1).isdigit():
        return time.time() - float(value[:-1]) * units[value[-1]]
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise UserError(f"--since {value!r}: expected a duration such as 30m, 2h, 1d or an ISO date") from None
    return dt.timestamp()


def spec_with_overrides(path: Path, name: str | None, gpus: int | None, params: list[str]):
    """The file's spec with the command line's overrides applied, validated again as a whole."""
    from dlsched.entry_check import parse_params
    from dlsched.spec import load_job_spec, load_job_spec_file

    spec = load_job_spec_file(path)
    update: dict = {}
    if name is not None:   # --name "$UNSET" submitted under the file's name without a word: the spec checks it
        update["name"] = name
    if gpus is not None:
        update["gpus"] = gpus
    if params:
        update["params"] = {**spec.params, **parse_params(params)}
        # total_samples written as num_samples x epochs follows an override of either: it stayed the file's, and the
        # queue's forecast planned the old amount of work until the job's runtime reported the real total
        old, new = (tuple(p.get(k) for k in ("num_samples", "epochs")) for p in (spec.params, update["params"]))
        if (new != old and all(isinstance(v, int) and not isinstance(v, bool) for v in (*old, *new))
                and spec.total_samples == old[0] * old[1]):
            update["total_samples"] = new[0] * new[1]
    if spec.user is None:
        update["user"] = _current_user()
    if not update:
        return spec
    doc = spec.model_dump(mode="json", exclude_none=True) | update
    return load_job_spec(yaml.safe_dump(doc, sort_keys=False), f"{path} (with command-line overrides)")


def _current_user() -> str | None:
    """The submitting OS user, when it is a valid spec ``user`` (else the job records none)."""
    import getpass

    from dlsched.spec import NAME_PATTERN

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        return None
    return user if re.match(NAME_PATTERN, user) else None


NOISY_EVENTS = frozenset({"job_checkpoint"})   # the runtime's "checkpoint", as the loop stores it


def event_rows(rows: list[dict]) -> list[list[str]]:
    """Plain lines' cells, not a rich table's: no markup escaping (it printed a worker's ``[rank0]`` as ``\\[rank0]``)."""
    return [[local_clock(e["time"]), str(e["job_id"]) if e["job_id"] is not None else "-", e["kind"],
             json.dumps(readable_numbers(with_iso_times(e["detail"])), separators=(", ", ": "))] for e in rows]


def filter_events(rows: list[dict], kinds: list[str], since: float | None, with_noisy: bool) -> tuple[list[dict], dict]:
    """Events matching the filters, and the count per job of noisy events left out (summarised instead)."""
    out, hidden = [], {}
    for e in rows:
        if kinds and e["kind"] not in kinds:
            continue
        if since is not None and e["time"] < since:
            continue
        if e["kind"] in NOISY_EVENTS and not with_noisy and not kinds:
            hidden[e["job_id"]] = hidden.get(e["job_id"], 0) + 1
            continue
        out.append(e)
    return out, hidden


SERVER_OPT = typer.Option(None, "--server", help=f"service URL (default $DLSCHED_SERVER or {DEFAULT_SERVER})")
JSON_OPT = typer.Option(False, "--json", help="machine-readable output (times as ISO 8601)")
WIDE_OPT = typer.Option(False, "--wide", "-o", help="all columns, whatever the terminal width")
SHOW_ALL = "--wide shows all"


def gpu_devices_present() -> bool:
    """Whether the machine shows a GPU's device nodes (NVIDIA's, or ROCm's /dev/kfd, which torch.cuda also drives):
    without them CUDA finds no device, so torch need not be loaded to look."""
    import glob

    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd") or os.path.isdir("/proc/driver/nvidia"))


def local_cluster_spec():
    """The machine itself as a one-node cluster: its GPUs where torch sees some, else one slot per CPU core."""
    import socket

    from dlsched.spec import ClusterSpec

    gpus, gpu_type = 0, "slot"
    try:
        if not gpu_devices_present():
            raise LookupError("no GPU device nodes")   # importing torch to find none cost every serve ~1.4 CPU-s
        import torch

        if torch.cuda.is_available():
            gpus = torch.cuda.device_count()
            gpu_type = "".join(c if c.isalnum() else "-" for c in torch.cuda.get_device_name(0))[:60].strip("-") or "gpu"
    except Exception:   # noqa: BLE001 - no usable torch/CUDA: fall back to CPU slots
        gpus = 0
    if gpus == 0:
        gpus, gpu_type = max(1, os.cpu_count() or 1), "slot"
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:60].strip("-.") or "local"
    return ClusterSpec.model_validate({"nodes": [{"name": name, "gpus": gpus, "gpu_type": gpu_type}]})


def stopped_note(active: list, state_dir: str, argv: list[str] | None = None) -> str:
    """What a stopped service leaves: its jobs run on and a restart re-attaches them (Ctrl-C said nothing).

    The restart named is the command that ran (``argv``, from ``serve`` on): it said ``dlsched serve --state-dir S``
    alone, and a service restarted so scheduled onto this machine instead of the ``--cluster`` file, stopping every
    job placed on a node the file declared (off_cluster.py), under the default policy and workdir."""
    if not active:
        return "dlsched service stopped"
    running = ", ".join(str(j.id) for j in active if j.state != "queued")
    queued = ", ".join(str(j.id) for j in active if j.state == "queued")
    left = "; ".join(x for x in (running and f"job(s) {running} keep running", queued and f"job(s) {queued} stay queued") if x)
    args = argv[argv.index("serve"):] if argv and "serve" in argv else ["serve", "--state-dir", str(state_dir)]
    return (f"dlsched service stopped; {left}: `{shlex.join(['dlsched', *args])}` takes them up again "
            "(cancel them there to stop them)")


def reach_url(host: str, port: int) -> str:
    """The URL a client uses for a service bound to ``host``: this machine's name for a bind to every interface
    (``http://0.0.0.0:P`` reaches nothing from another host), an IPv6 address in brackets (RFC 3986 3.2.2)."""
    import socket

    name = socket.gethostname() if host in ("0.0.0.0", "::", "") else f"[{host}]" if ":" in host else host
    return f"http://{name}:{port}"


def started_note(host: str, port: int, token_from: str | Path | None, what: str) -> str:
    """What ``serve`` prints at start: where to reach it and how a client or a browser authenticates (the dashboard
    needs ``#token=``: the printed URL alone showed only 'HTTP 401'), and, bound beyond loopback, that the token
    crosses the network in clear. Never the token itself: the output goes to logs others may read."""
    from dlsched.service.api import is_loopback

    url = reach_url(host, port)
    auth = "no authentication (--no-auth)" if token_from is None else f"token in {token_from}"
    lines = [f"dlsched service: API {url}  dashboard {url}/dashboard/", f"  {what}, {auth}"]
    if token_from is None:
        lines.append(f"  clients: export DLSCHED_SERVER={url}")
    elif token_from == "$DLSCHED_TOKEN":
        lines.append(f"  clients: export DLSCHED_SERVER={url} DLSCHED_TOKEN=<the same token>; the dashboard: "
                     f"{url}/dashboard/#token=<the token>")
    else:
        lines.append(f"  clients: export DLSCHED_SERVER={url} DLSCHED_TOKEN_FILE={token_from}; the dashboard: "
                     f"{url}/dashboard/#token=<the token in {token_from}>")
    if not is_loopback(host):
        lines.append(f"  bound to {host} over plain HTTP: the token crosses the network in clear; beyond a trusted "
                     "network put TLS in front (a reverse proxy) or reach it through an SSH tunnel (docs/security.md)")
    return "\n".join(lines)


def bind_refusal(host: str, port: int) -> str | None:
    """Why ``serve`` cannot listen on ``host:port`` (one line naming the option at fault), None when it can. Only a
    busy port is the port's fault: an address this machine lacks, or a name that does not resolve, was reported as
    'already in use (another dlsched serve?)'."""
    import errno
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return (f"--port {port}: {host}:{port} is already in use (another dlsched serve?); "
                        f"choose another with --port")
            if e.errno == errno.EACCES:
                return f"--port {port}: binding {host}:{port} is not permitted (ports below 1024 need root)"
            why = e.strerror or str(e)
            return f"--host {host}: cannot listen on {host}:{port} ({why}); expected an address of this machine"
    return None


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(cluster: Optional[Path] = typer.Option(None, "--cluster", "-c",
                                                     help="cluster declaration (YAML/JSON); default: this machine "
                                                          "(its GPUs, else one slot per CPU core)"),
              state_dir: str = typer.Option("dlsched-state", help="SQLite store (and the job folders unless --jobs-dir):"
                                            " a path or file:// URI"),
              jobs_dir: Optional[str] = typer.Option(None, help="job folders, a path or file:// URI every node "
                                                     "reaches (a shared mount; docs/storage.md); default STATE_DIR/jobs"),
              host: str = typer.Option("127.0.0.1", help="bind address; non-loopback needs a token"),
              port: int = typer.Option(8642, help="API and dashboard port (0: one the OS picks, printed at the start)"),
              token_file: Optional[Path] = typer.Option(None, help="bearer token file, created 0600 if absent "
                                                        "(else $DLSCHED_TOKEN, else STATE_DIR/token)"),
              no_auth: bool = typer.Option(False, "--no-auth", help="no token (single-user laptop; loopback only)"),
              entry_root: list[Path] = typer.Option([], help="directory job files may come from (repeatable; "
                                                     "default: --workdir)"),
              entry_module: list[str] = typer.Option([], help="importable module/package jobs may name (repeatable; "
                                                      "default: only dlsched's ensemble loader)"),
              allow_host: list[str] = typer.Option([], help="extra Host name a loopback-bound service answers to"),
              runtime: Optional[str] = typer.Option(None, help="job runtime command prefix (default: python -m dlsched.train.run)"),
              workdir: Optional[Path] = typer.Option(None, help="where job entries like examples/mlp.py resolve (default: cwd)"),
              policy: Optional[str] = typer.Option(None, help="override the cluster file's policy"),
              backend: Optional[str] = typer.Option(None, help="local | ray (default: the cluster file's 'backend')"),
              address: str = typer.Option("auto", help="Ray cluster address for --backend ray: auto, HOST:6379 or ray://HOST:10001"),
              gpu_resource: str = typer.Option("GPU", help="Ray resource one worker needs (--backend ray)")) -> None:
        """Run the scheduler service (API + live loop + dashboard) in the foreground."""
        from dlsched.policy.base import make_policy
        from dlsched.service.auth import check_token, load_or_create_token
        from dlsched.service.job_folders import check_jobs_dir
        from dlsched.spec import load_cluster_spec_file

        from dlsched.train.storage import job_folder

        # absolute: each job's folder is stored, and a restart from another working directory must find it
        state_dir = job_folder(state_dir, "--state-dir").absolute()
        jobs_dir = job_folder(jobs_dir, "--jobs-dir").absolute() if jobs_dir is not None else None
        if jobs_dir is not None:
            check_jobs_dir(jobs_dir)
        if not 0 <= port <= 65535:
            raise UserError(f"--port {port}: expected 1..65535, or 0 for one the OS picks")
        if backend and backend not in ("local", "ray"):
            raise UserError(f"--backend {backend!r}: expected 'local' or 'ray'")
        spec = load_cluster_spec_file(cluster) if cluster else local_cluster_spec()
        if policy:
            spec = spec.model_copy(update={"policy": policy})
        if backend:
            spec = spec.model_copy(update={"backend": backend})
        # every option is checked before anything is created (the state folder, its database, token and jobs/)
        try:
            scheduler = make_policy(spec.policy, **dict(spec.policy_args))
        except (ValueError, TypeError) as e:   # an unknown name, arguments it does not take
            where = f"--policy {policy}" if policy else f"--cluster {cluster}: field policy" if cluster else "policy"
            raise UserError(f"{where}: {e}") from None
        if why := bind_refusal(host, port):   # after the options: a bad option is reported as itself
            raise UserError(why)
        # the service and its backends (scipy, pandas: ~1 CPU-s) once every option is checked: a refusal was 1.9 s
        from dlsched.backends.make import make_backend
        from dlsched.service.server import Service

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        rt = shlex.split(runtime or os.environ.get("DLSCHED_RUNTIME", "")) or None
        be = make_backend(spec, runtime=rt, workdir=workdir, ray_address=address, gpu_resource=gpu_resource)
        token = None
        if token_file and not no_auth:
            token = load_or_create_token(token_file)
        elif os.environ.get("DLSCHED_TOKEN") and not no_auth:
            token = check_token(os.environ["DLSCHED_TOKEN"], "$DLSCHED_TOKEN")
        svc = Service(spec, state_dir, host=host, port=port, token=token, runtime=rt, workdir=workdir, backend=be,
                      policy=scheduler, auth=not no_auth, token_file=token_file, extra_hosts=tuple(allow_host),
                      entry_roots=tuple(entry_root), entry_modules=tuple(entry_module), jobs_dir=jobs_dir)
        token_from = None if svc.token is None else token_file or ("$DLSCHED_TOKEN" if token else svc.token_file)
        slots = sum(n.gpus for n in spec.nodes)
        kind = "CPU slot" if spec.nodes[0].gpu_type == "slot" else f"{spec.nodes[0].gpu_type} GPU"   # local_cluster_spec
        where = f"{cluster}" if cluster else f"this machine, {slots} {kind}{'' if slots == 1 else 's'}"
        print(started_note(host, svc.port, token_from, f"cluster {where}, policy {spec.policy}, state in {state_dir}"),
              flush=True)
        # uvicorn re-raises the signal it stopped on after its shutdown: SIGTERM killed the process before anything
        # below ran, and a re-raised SIGINT's KeyboardInterrupt was once seen lost under load (exit 0, not 130)
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, lambda sig, _: sys.exit(128 + sig))
        try:
            svc.run()
        finally:
            print(stopped_note(svc.store.jobs(states=ACTIVE), state_dir, sys.argv), flush=True)

    @app.command()
    def submit(files: list[str] = typer.Argument(None, help="job spec files (YAML or JSON), or after '--' a "
                                                         "dlsched.torch script: -- python train.py --epochs 10"),
               name: Optional[str] = typer.Option(None, "--name", help="override the spec's name (one file only)"),
               gpus: Optional[int] = typer.Option(None, "--gpus", help="override the spec's GPU count"),
               min_gpus: Optional[int] = typer.Option(None, "--min-gpus", help="a script job: elastic from"),
               max_gpus: Optional[int] = typer.Option(None, "--max-gpus", help="a script job: elastic up to"),
               param: list[str] = typer.Option([], "--param", "-P", help="override a spec file's param: KEY=VALUE (repeatable)"),
               schedule: Optional[str] = typer.Option(None, "--schedule", help="a script job: its LR schedule in "
                                                      "steps, for predictions (SPEC of `predict curve`; default: the LR it logs)"),
               target_loss: Optional[float] = typer.Option(None, "--target-loss", help="a script job: predict when "
                                                           "it reaches this loss"),
               target: Optional[str] = typer.Option(None, "--target", help="a script job: predict when a metric it "
                                                    "reports reaches a value: METRIC=VALUE (val_accuracy=0.93; an "
                                                    "accuracy in 0-1 or 10-100 %)"),
               metric: Optional[str] = typer.Option(None, "--metric", help="--target's kind: accuracy (higher is "
                                                    "better) | error | loss; default: as METRIC's name says (acc, top1, "
                                                    "mAP, f1: accuracy; err, wer: error; loss, mse: loss)"),
               dataset: Optional[str] = typer.Option(None, "--dataset", help="a script job: what it trains on; jobs "
                                                     "of the same dataset that finished here set where its loss and "
                                                     "target end"),
               depth: Optional[int] = typer.Option(None, "--depth", help="a script job: its model's depth (its "
                                                   "prior leans on finished jobs of the same)"),
               regime: Optional[str] = typer.Option(None, "--regime", help="a script job: scratch (from random "
                                                    "weights) | finetune (from pretrained): the prior's pool"),
               server: Optional[str] = SERVER_OPT, as_json: bool = JSON_OPT) -> None:
        """Submit jobs (like sbatch / kubectl apply, or ray job submit -- python x.py); checked here, then by the
        service. Several files are all or none: one refused (named in the error) submits none of them."""
        from dlsched.spec import load_job_spec
        from dlsched.train.script import script_name

        files = files or []
        # (flag, field of the spec's prediction, value): what a script job states on the command line
        stated = (("--schedule", "schedule", schedule), ("--target-loss", "target_loss", target_loss),
                  ("--target", "target", target), ("--metric", "target.kind", metric), ("--dataset", "dataset", dataset),
                  ("--depth", "depth", depth), ("--regime", "regime", regime))
        if "--" in sys.argv:  # everything after it is the script's command line
            if param:   # was dropped without a word: the job ran with the script's defaults
                raise UserError(f"--param {param[0]}: a script job takes its settings as the script's own arguments "
                                "after '--' (-- python train.py --epochs 2)")
            # --gpus 0 was `0 or min_gpus or 1`: a 1-GPU job, exit 0; it is the spec's range error now
            doc = {"name": script_name(files) if name is None else name, "command": files,
                   "gpus": gpus if gpus is not None else (min_gpus or 1)}
            doc.update({k: v for k, v in (("min_gpus", min_gpus), ("max_gpus", max_gpus), ("user", _current_user()))
                        if v is not None})
            facts = {field: metric_target(target, metric) if field == "target" else value
                     for _, field, value in stated if field != "target.kind"}
            facts = {k: v for k, v in facts.items() if v is not None}
            if facts:
                doc["prediction"] = facts
            try:
                specs = [load_job_spec(json.dumps(doc), "command line", "json")]
            except UserError as e:   # said of the option typed, not of a spec field the user never wrote
                raise UserError(_as_option(str(e), stated)) from None
            sources = ["command line"]
        else:
            if not files:
                raise UserError("give job spec files, or a script after '--' (dlsched submit -- python train.py)")
            for flag, field, value in (("--min-gpus", "min_gpus", min_gpus), ("--max-gpus", "max_gpus", max_gpus),
                                       *((f, f"prediction.{field}", v) for f, field, v in stated)):
                if value is not None:   # were ignored for a spec file
                    raise UserError(f"{flag} {value}: for a script after '--'; a spec file sets {field}")
            if name is not None and len(files) > 1:
                raise UserError("--name: applies to one spec file, got several")
            # one clear line for a bad file before any network traffic; the service then checks the entry and
            # params against its own working directory and runtime
            specs = [spec_with_overrides(Path(f), name, gpus, param) for f in files]
            sources = list(files)
        # all or none: a file only the service can refuse (its entry missing or outside the allowed directories, a
        # param its function lacks, more GPUs than the cluster) leaves none of the others submitted
        client = Client(server)
        out = client.submit_all(specs, sources)
        if as_json:
            print_json(out)
        else:
            for r in out:
                print(f"submitted job {r['id']} ({r['name']})")
        note_unused_range(client, specs)

    def note_unused_range(client: Client, specs: list) -> None:
        """One line on stderr where a job asks for a GPU range the cluster's policy never uses: under fifo a
        `--max-gpus 2` job ran on 1 of 2 free GPUs for its whole run, and nothing said why."""
        ranged = [s.name for s in specs if s.max_gpus is not None and s.max_gpus > (s.min_gpus or s.gpus or 1)]
        if not ranged:
            return
        info = client.request("GET", "/cluster").json()
        if info.get("policy_rigid"):
            print(f"note: the cluster's policy {info['policy']} runs a job at its request, never within its GPU range "
                  f"({', '.join(ranged)}); an elastic policy uses it (dlsched serve --policy elastic, goodput, "
                  "optimus)", file=sys.stderr)

    @app.command()
    def status(job_ids: Optional[list[int]] = typer.Argument(None, help="only these jobs (like squeue -j)"),
               server: Optional[str] = SERVER_OPT, watch: bool = typer.Option(False, "--watch", "-w", help="refresh until Ctrl-C (piped: print each change)"),
               interval: float = typer.Option(1.0, help="--watch refresh (s)"),
               all_jobs: bool = typer.Option(True, "--all/--active", help="include ended jobs"),
               limit: int = typer.Option(50, "--limit", "-n", help="ended jobs shown, the newest (0: all; "
                                         "`history` lists them with their outcome)"),
               as_json: bool = JSON_OPT, wide: bool = WIDE_OPT) -> None:
        """Jobs with state, GPUs, progress and predicted finish (like squeue / kubectl get [-w]): every active job,
        and the newest --limit ended ones."""
        from dlsched.commands.job_lists import newest_jobs, note_unshown

        if watch and not (interval > 0 and math.isfinite(interval)):   # -1 and nan were a sleep() traceback
            raise UserError(f"--interval {interval}: expected a positive number of seconds")
        if limit < 0:
            raise UserError(f"--limit {limit}: expected 0 (all) or a positive number of ended jobs")
        client = Client(server)
        ids = {"id": ",".join(map(str, job_ids))} if job_ids else {}

        def fetch() -> tuple[list[dict], int]:   # -w: a job named that ended under --active leaves the table, not the watch
            active, _ = newest_jobs(client, {**ids, "state": ",".join(ACTIVE)})
            if not all_jobs:
                return active, 0
            ended, older = newest_jobs(client, {**ids, "state": ",".join(TERMINAL)}, 0 if job_ids else limit)
            # read after the active ones: a job that ended between the two reads is listed once, as ended
            return sorted({j["id"]: j for j in active + ended}.values(), key=lambda j: j["id"]), older

        jobs, older = fetch()
        jobs = only_jobs(jobs, job_ids, all_jobs)   # an id not listed: one line, once
        note_unshown(older, "ended jobs", "--limit 0 shows them all (`dlsched history` lists them too)")
        if as_json:
            print_json(jobs)
            return
        if not watch:
            print_jobs(job_rows(jobs), "dlsched jobs", wide)
            return
        from rich.console import Console
        from rich.live import Live

        con = Console()
        if not con.is_terminal:   # piped, Live drew once at exit (nothing when killed): print what changes instead
            return watch_piped(lambda: fetch()[0], interval, wide)
        with Live(console=con, refresh_per_second=4) as live:
            try:
                while True:
                    live.update(jobs_table(fetch()[0], width=con.width, wide=wide))
                    time.sleep(interval)
            except KeyboardInterrupt:
                pass

    @app.command()
    def history(state: Optional[str] = typer.Option(None, "--state", help="finished, failed, cancelled (comma-separated)"),
                since: Optional[str] = typer.Option(None, "--since", help="ended after: 30m, 2h, 1d or an ISO date"),
                user: Optional[str] = typer.Option(None, "--user", "-u", help="submitted by this user"),
                limit: int = typer.Option(100, "--limit", "-n", help="the newest this many (0: all)"),
                server: Optional[str] = SERVER_OPT, as_json: bool = JSON_OPT, wide: bool = WIDE_OPT) -> None:
        """Ended jobs with their outcome and durations (like sacct), the newest --limit."""
        from dlsched.commands.job_lists import newest_jobs, note_unshown

        states = state.split(",") if state else list(TERMINAL)
        bad = [s for s in states if s not in TERMINAL]
        if bad:
            raise UserError(f"--state {bad[0]!r}: expected one of {', '.join(TERMINAL)}")
        if limit < 0:
            raise UserError(f"--limit {limit}: expected 0 (all) or a positive number of jobs")
        after = parse_since(since)
        keep = None if after is None and user is None else \
            lambda j: ((after is None or (j.get("end_time") or 0) >= after)
                       and (user is None or j.get("spec", {}).get("user") == user))
        jobs, older = newest_jobs(Client(server), {"state": ",".join(states)}, limit, keep)   # keep None: a count
        note_unshown(older, "jobs", "--limit 0 lists them all")
        if as_json:
            print_json(jobs)
            return
        cols = [Column("ID", "right"), Column("NAME"), Column("USER", drop_rank=2), Column("STATE"),
                Column("GPU-TIME", "right"), Column("WAITED", "right", drop_rank=1), Column("RAN", "right"),
                Column("ENDED"), Column("REASON", drop_rank=1)]
        rows = [[str(j["id"]), escape(j["name"]), escape(j.get("spec", {}).get("user") or "-"), j["state"],
                 # GPU-seconds held; num_gpus (what it holds now) is 0 for every ended job
                 human_duration(j["attained_service"]) if j.get("start_time") else "-",
                 human_duration((j["start_time"] - j["submit_time"]) if j.get("start_time") else None),
                 human_duration((j["end_time"] - j["start_time"]) if j.get("start_time") and j.get("end_time") else None),
                 local_clock(j.get("end_time")), escape(_reason(j) if j["state"] != "finished" else "")] for j in jobs]
        table(cols, rows, title="dlsched history", wide=wide, show_all=SHOW_ALL)

    @app.command()
    def show(job_id: int, server: Optional[str] = SERVER_OPT) -> None:
        """Everything the service knows about one job (JSON, times as ISO 8601)."""
        print_json(Client(server).get(f"/jobs/{job_id}"))

    @app.command()
    def cancel(job_ids: list[int] = typer.Argument(...),
               member: Optional[str] = typer.Option(None, "--member", help="cancel only this member of one ensemble "
                                                    "job: it leaves at its next step, the others train on"),
               server: Optional[str] = SERVER_OPT) -> None:
        """Cancel jobs (like scancel / kubectl delete). Every id gets its line, in order (the cancelled on stdout, the
        refused on stderr), and each job is cancelled whatever became of the others. A job that already ended is an
        error (exit 1; the API answers 409), an unknown id too (exit 2, which wins over 1)."""
        client = Client(server)
        if member is not None:
            if len(job_ids) != 1:
                raise UserError(f"cancel --member {member!r}: give one ensemble job id, got {len(job_ids)}")
            try:
                r = client.request("POST", f"/jobs/{job_ids[0]}/members/{quote(member, safe='')}/cancel").json()
            except ServiceError as e:
                if e.status not in (404, 409):
                    raise
                print(f"error: {e.answer.get('error')}", file=sys.stderr, flush=True)
                raise typer.Exit(2 if e.status == 404 else 1) from None
            print(f"job {job_ids[0]}: member {member}: cancel requested ({r['state']})", flush=True)
            return
        code = 0
        for j in job_ids:
            try:
                r = client.request("POST", f"/jobs/{j}/cancel").json()
            except ServiceError as e:
                if e.status not in (404, 409):   # the service or the token: the same for every id
                    raise
                print(f"error: job {j}: no such job" if e.status == 404 else f"error: {e.answer.get('error')}",
                      file=sys.stderr, flush=True)
                code = max(code, 2 if e.status == 404 else 1)
                continue
            state = "cancelled" if r["state"] == "cancelled" else f"cancel requested ({r['state']})"
            print(f"job {j}: {state}", flush=True)
        if code:
            raise typer.Exit(code)

    @app.command()
    def resize(job_id: int, workers: Optional[int] = typer.Option(None, "--workers", "--gpus", "-n",
                                                        help="workers (GPU slots) to hold the job at; --gpus as in submit"),
               batch: Optional[int] = typer.Option(None, "--batch", "--batch-size",
                                                   help="global batch size to hold it at (the spec's batch_size; "
                                                        "not an ensemble's: its YAML's)"),
               release: bool = typer.Option(False, "--release", help="end the hold: the policy sizes the job again"),
               server: Optional[str] = SERVER_OPT) -> None:
        """Resize a queued or running job by hand (like scontrol update) within its spec's min_gpus..max_gpus and
        min_batch_size..max_batch_size (its batch_size where no range); the next round applies it. --batch alone
        holds the batch and leaves the workers to the policy (--workers alone: the batch). The job stays
        held there (status's REASON says so) until `resize --release`: a hold at more workers than it has and the
        cluster has free stops a running job until that many slots are free (it is preempted, then started at N)."""
        if release == (workers is not None or batch is not None):
            raise UserError("resize: give --workers N and/or --batch B to hold the job, or --release alone")
        if release:
            r = Client(server).request("DELETE", f"/jobs/{job_id}/resize").json()
            print(f"job {job_id}: released, the policy sizes it ({r['state']})")
            return
        body = ({"workers": workers} if workers is not None else {}) | ({"batch_size": batch} if batch is not None else {})
        r = Client(server).request("POST", f"/jobs/{job_id}/resize", json=body).json()
        print(f"job {job_id}: held at {_hold(r, ' worker(s)')} ({r['state']})")

    @app.command()
    def logs(job_id: int, follow: bool = typer.Option(False, "--follow", "-f", help="keep streaming until the job ends "
                                                      "(a queued job: from its start)"),
             tail: Optional[int] = typer.Option(None, "--tail", help="start with the last N lines"),
             worker: Optional[int] = typer.Option(None, "--worker", help="worker K's own log instead of the job's"),
             server: Optional[str] = SERVER_OPT) -> None:
        """A job's output: training progress, resizes, checkpoints, the result (like kubectl logs -f --tail N)."""
        if tail is not None and tail < 0:
            raise UserError(f"--tail {tail}: expected >= 0")
        client = Client(server)
        query: dict = {} if worker is None else {"worker": worker}
        r = client.request("GET", f"/jobs/{job_id}/logs", params=query | ({"tail": tail} if tail is not None else {}))
        if not r.text and client.get(f"/jobs/{job_id}")["state"] == "queued":   # printed nothing: as if it had none
            print(f"job {job_id} is queued and has no output yet; "
                  + ("waiting for it to start" if follow else f"dlsched logs -f {job_id} waits for it to start"),
                  file=sys.stderr, flush=True)
        printed = False
        while True:
            sys.stdout.write(r.text)
            sys.stdout.flush()
            printed |= bool(r.text)
            offset = int(r.headers.get("X-Next-Offset", 0))
            if not follow:
                if not r.text:   # to the end as it is now: a log over a read (1 MiB) printed its first MiB only
                    break
            elif not r.text:
                if client.get(f"/jobs/{job_id}")["state"] in TERMINAL:
                    rest = client.request("GET", f"/jobs/{job_id}/logs", params=query | {"offset": offset}).text
                    sys.stdout.write(rest)
                    printed |= bool(rest)
                    break
                time.sleep(0.5)
            r = client.request("GET", f"/jobs/{job_id}/logs", params=query | {"offset": offset})
        if not printed:   # a job cancelled while queued ended `logs -f` with nothing at all, exit 0
            job = client.get(f"/jobs/{job_id}")
            if job["state"] in TERMINAL and job.get("start_time") is None:
                print(f"job {job_id} was {job['state']} before it started: it has no output", file=sys.stderr)

    @app.command()
    def nodes(server: Optional[str] = SERVER_OPT, as_json: bool = JSON_OPT, wide: bool = WIDE_OPT) -> None:
        """Nodes (like sinfo): address, GPU slots and those in use, health (up / lost), the jobs on each."""
        rows = Client(server).get("/nodes")["nodes"]
        if as_json:
            print_json(rows)
        else:
            table(NODE_COLUMNS, node_rows(rows), title="dlsched nodes", wide=wide, show_all=SHOW_ALL)

    @app.command()
    def events(job_id: Optional[int] = typer.Argument(None, help="only this job's events"),
               job: Optional[int] = typer.Option(None, "--job", help="only this job's events"),
               kind: list[str] = typer.Option([], "--type", "-t", help="only events of this type (repeatable)"),
               since: Optional[str] = typer.Option(None, "--since", help="30m, 2h, 1d or an ISO date"),
               follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new events"),
               everything: bool = typer.Option(False, "--all", help="list checkpoint events one by one too"),
               limit: int = typer.Option(100, "--limit", "-n", help="the newest this many (0: every one, from the "
                                         "first)"),
               server: Optional[str] = SERVER_OPT, as_json: bool = JSON_OPT) -> None:
        """Scheduler events: submissions, starts, resizes, preemptions, completions (checkpoints summarised); the
        newest --limit, then (-f) each new one."""
        from dlsched.commands.event_lists import every_event, newest_events
        from dlsched.commands.job_lists import note_unshown
        from dlsched.service.event_kinds import EVENT_KINDS

        unknown = [k for k in kind if k not in EVENT_KINDS]
        if unknown:   # printed nothing, as for a type with no events yet
            raise UserError(f"--type {unknown[0]!r}: not an event type; expected one of {', '.join(EVENT_KINDS)}")
        if job is not None and job_id is not None and job != job_id:   # the positional one was dropped unsaid
            raise UserError(f"job {job_id} and --job {job}: give one job")
        if limit < 0:
            raise UserError(f"--limit {limit}: expected 0 (all) or a positive number of events")
        client = Client(server)
        jid = job if job is not None else job_id
        path = f"/jobs/{jid}/events" if jid is not None else "/events"
        after_ts = parse_since(since)
        query = {"kind": ",".join(kind)} if kind else {}   # the newest of those kinds, not of every kind
        if limit:
            rows, older = newest_events(client, path, query, limit,
                                        lambda e: bool(filter_events([e], kind, after_ts, everything or as_json)[0]),
                                        after_ts)
            note_unshown(older, "events", "--limit 0 lists them all")
        else:
            rows = every_event(client, path, query)
        last = 0
        summarised: set = set()   # -f: jobs whose left-out checkpoints were said once (not again at every poll)
        while True:
            if rows is None:
                rows = client.get(path, params={"after": last, **query})
            if rows:
                last = rows[-1]["id"]
            shown, hidden = filter_events(rows, kind, after_ts, everything or as_json)
            if as_json:
                if shown or not follow:
                    print_json(shown)
            else:
                for r in event_rows(shown):
                    print("  ".join(r))
                for j, n in sorted(hidden.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
                    if j in summarised:
                        continue
                    more = "; later ones are left out too" if follow else ""
                    print(f"(job {j if j is not None else '-'}: {n} checkpoint event(s) not shown{more}; "
                          "--all lists them)")
                    summarised.add(j)
            sys.stdout.flush()
            if not follow:
                return
            rows = None
            time.sleep(1.0)
