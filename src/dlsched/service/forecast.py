"""When will each active job start and finish *under the scheduling policy*: the live policy rolled forward on
a virtual clock, through the same round as the live loop and the simulator (``dlsched.round.schedule``), each
job advancing at the rate its fitted speed model gives for the allocation it would get. A job without remaining
work or a rate gets a start but no finish. An ensemble whose members are known (``with_members``) is rolled forward
member by member: FLEET plans flotillas of the still-training members inside the GPUs it would get (one pool of
slots, as the runtime plans; producer cores not limiting: the service does not know the runtime's), each member
leaves at its own end, and the ensemble then asks for fewer GPUs; its finish is its last member's. Pure: ``now`` and
the policy are inputs.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from dlsched.policy.base import FINISHED_SHOWN, ClusterView, JobView, NodeView, Policy
from dlsched.policy.fleet import ModelProfile, Preprocessing
from dlsched.policy.placement import consolidated
from dlsched.round import Preempt, Resize, Start, schedule
from dlsched.sim.ensemble_job import EnsembleThroughput
from dlsched.sim.fleet import EnsembleProgress, Member, fleet_planner


# seconds of no progress charged for a (re)start and for a resize until the live loop has measured its own
# (the local runtime's, measured by bench/ray_latency.py and bench/runtime_resize.py)
START_S = 5.0
RESIZE_S = 2.0


@dataclass(frozen=True)
class Forecast:
    start: Mapping[str, float | None]     # job id -> (re)start time; None: not started before the forecast ended
    finish: Mapping[str, float | None]    # job id -> completion time; None: unknown or beyond the forecast
    decisions: int                        # policy calls made
    cut_short: bool                       # stopped by max_decisions / horizon / budget, not because nothing
                                          # more could be predicted


@dataclass
class _State:
    view: JobView
    left: float | None                    # samples
    gpus: int = 0
    batch: int | None = None
    nodes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    pause: float = 0.0                    # seconds of restart/resize left before progress resumes
    rate: float | None = None             # samples/s at the current allocation
    attained: float = 0.0
    run_time: float = 0.0
    start: float | None = None
    finish: float | None = None
    snap: tuple | None = None             # (state key, JobView) of the last decision
    members: EnsembleProgress | None = None   # an ensemble's still-training members
    changed: tuple[float, float] | None = None   # (when, pause) of its last forecast start or resize: restart_hold


def with_members(view: JobView, members: Sequence[tuple[str, Sequence[float], float]]) -> JobView:
    """An ensemble's view carrying its still-training members as (name, samples/s on 1..m slots, samples left)
    (``service.fleet_status.members_left``), so the forecast runs each to its own end."""
    if not members:
        return view
    return dataclasses.replace(view, remaining_samples=sum(m[2] for m in members),
                               attrs={**view.attrs, "members": tuple(members)})


def members_speed(profiles: Sequence[ModelProfile]) -> EnsembleThroughput:
    """An ensemble's speed model from its still-training members' profiles: their summed samples/s of the FLEET plan
    on g slots of one pool (as the forecast and the runtime plan them; producer cores not limiting), so a policy sees
    the speed-up the flotillas would get, whichever members ran last (``sim.ensemble_job``: the simulator's)."""
    return EnsembleThroughput(tuple(profiles), Preprocessing(), max(1, sum(p.max_gpus for p in profiles)))


def on_members(view: JobView, profiles: Sequence[ModelProfile], at_least: int = 0) -> JobView:
    """An ensemble as its still-training members' ``profiles`` give it: asking for no more GPUs than they can use
    (each its ``max_gpus``; at least ``at_least``), so the slots of members that left go to the other jobs, at the
    speed of their FLEET plan (``members_speed``) where any is left."""
    useful = max(at_least, sum(p.max_gpus for p in profiles))
    view = dataclasses.replace(view, requested_gpus=min(view.requested_gpus, useful),
                               min_gpus=min(view.min_gpus, useful), max_gpus=min(view.max_gpus or useful, useful))
    return dataclasses.replace(view, speed=members_speed(profiles)) if profiles else view


def _members(view: JobView) -> EnsembleProgress | None:
    members = view.attrs.get("members") if view.kind == "ensemble" else None
    if not members:
        return None
    # the runtime re-plans every still-training member at each departure and share change (reform="event")
    return EnsembleProgress([Member(ModelProfile(n, tuple(r)), w) for n, r, w in members], fleet_planner(reform="event"))


def _slots(gpus: int) -> ClusterView:
    return ClusterView((NodeView("share", gpus),))


def _snapshot(s: _State) -> JobView:
    """The job as the policy sees it now; a waiting job's view does not change, so it is rebuilt only on change.
    An ensemble asks for no more GPUs than its still-training members can use, at the speed their profiles give."""
    left = len(s.members.remaining) if s.members is not None else 0
    key = (s.left, s.batch, s.attained, s.run_time, tuple(s.nodes.items()), left, s.changed)
    if s.snap is None or s.snap[0] != key:
        view = s.view
        if s.members is not None:
            view = on_members(view, [m.profile for m in s.members.remaining])
        if s.changed is not None:   # its own change, not the live one the view was made with
            view = dataclasses.replace(view, attrs={**view.attrs, "changed_at": s.changed[0],
                                                    "settled_at": s.changed[0] + s.changed[1]})
        s.snap = (key, dataclasses.replace(view, placement=s.nodes, current_batch_size=s.batch,
                                           remaining_samples=s.left, attained_service=s.attained, run_time=s.run_time))
    return s.snap[1]


def rate_for(view: JobView, gpus: int, nodes: int, batch: int | None, observed: float | None) -> float | None:
    """Samples/s of ``view`` on ``gpus`` GPUs over ``nodes`` nodes at global ``batch``.

    The job's speed model gives the shape; where the job is running, its observed wall-clock rate calibrates
    the model (a model fitted on per-step times misses what happens between steps). Without a model, the
    observed rate is taken to scale linearly with GPUs (the simulator's assumption for duration-only jobs)."""
    if gpus <= 0:
        return 0.0
    cur = view.num_gpus
    b = batch or view.current_batch_size or view.batch_size or 0
    model = view.speed
    if model is not None:
        try:
            r = float(model.throughput(gpus, max(nodes, 1), int(b)))
            if observed and cur > 0:
                here = float(model.throughput(cur, max(len(view.placement), 1),
                                              int(view.current_batch_size or view.batch_size or b)))
                if here > 0:
                    r *= observed / here
            return r if r > 0 and math.isfinite(r) else None
        except (ValueError, ZeroDivisionError):
            pass
    if observed and cur > 0:
        return observed * gpus / cur
    return None


def forecast(views: Sequence[JobView], cluster: ClusterView, policy: Policy, now: float, *,
             observed: Mapping[str, float] | None = None, step_s: float = 30.0, start_s: float = START_S,
             resize_s: float = RESIZE_S, max_decisions: int = 400, horizon_s: float = 30 * 86400.0,
             budget_s: float | None = None) -> Forecast:
    """Roll ``policy`` forward from ``now`` until every job finished or no running job can finish (its work or
    rate unknown): then the jobs still waiting have no predicted start.

    Decisions are made at ``now`` and at every forecast completion; a policy that is not ``event_driven`` is also
    re-asked every ``max(step_s, 10 % of the look-ahead)`` between them (the live loop decides more often;
    policies whose decision depends on elapsed service see it change at this granularity).
    A job pays ``start_s`` of no progress when it (re)starts and ``resize_s`` when its GPUs or batch change.
    ``budget_s`` bounds the wall time (the result is then marked incomplete); ``max_decisions`` bounds it
    deterministically."""
    observed = observed or {}
    states = {v.id: _State(v, v.remaining_samples, v.num_gpus, v.current_batch_size, dict(v.placement),
                           attained=v.attained_service, run_time=v.run_time,
                           start=now if v.num_gpus > 0 else None, members=_members(v)) for v in views}
    for s in states.values():
        s.rate = rate_for(s.view, s.gpus, len(s.nodes), s.batch, observed.get(s.view.id)) if s.gpus else 0.0
    t, decisions, t_wall = now, 0, time.perf_counter()
    finished = cluster.finished   # the live ones, then each job as it finishes here (as the simulator shows them)
    cut_short = True
    while decisions < max_decisions and t - now < horizon_s:
        active = [s for s in states.values() if s.finish is None]
        if not active:
            cut_short = False
            break
        if budget_s is not None and time.perf_counter() - t_wall > budget_s:
            break
        decision = schedule(policy, [_snapshot(s) for s in active], ClusterView(cluster.nodes, t, finished),
                            consolidated)
        decisions += 1
        for a in decision.actions:
            s = states[a.job_id]
            if isinstance(a, Start):
                s.pause = start_s
                s.start = t if s.start is None else s.start
            elif isinstance(a, Resize):
                s.pause = resize_s
            elif isinstance(a, Preempt):
                s.pause = 0.0
            if isinstance(a, (Start, Resize)):   # what restart_hold reads of it from now on
                s.changed = (t, s.pause)
        for s in active:
            a = decision.allocation.jobs.get(s.view.id)
            n = a.num_gpus if a else 0
            b = (a.batch_size if a and a.batch_size else None) or _snapshot(s).kept_batch   # as round.diff
            nodes = decision.nodes(s.view.id) if n > 0 else {}
            if (n, b, dict(nodes)) != (s.gpus, s.batch, dict(s.nodes)) or s.rate is None:
                s.rate = rate_for(s.view, n, len(nodes), b, observed.get(s.view.id))
            s.gpus, s.batch, s.nodes = n, b, nodes
        # next event: a completion, or the next periodic decision; once nothing can complete, nothing is learnt
        ends = [t + s.pause + (s.members.next_departure(_slots(s.gpus)) if s.members is not None else s.left / s.rate)
                for s in active if s.gpus > 0 and (s.members is not None or (s.left is not None and s.rate))]
        ends = [e for e in ends if e < math.inf]
        if not ends:
            cut_short = False
            break
        # an event-driven policy changes its mind only when a job finishes; the others are re-asked at a period
        # that grows with the look-ahead (a forecast hours out is coarse anyway), so the cost stays near one
        # decision per completion
        periodic = math.inf if policy.event_driven else t + max(step_s, 0.1 * (t - now))
        t_next = min([periodic, *ends])
        dt = max(t_next - t, 1e-6)
        for s in active:
            if s.gpus <= 0:
                continue
            s.attained += dt * s.gpus
            s.run_time += dt
            work_s = max(0.0, dt - s.pause)
            s.pause = max(0.0, s.pause - dt)
            if s.members is not None:
                s.finish = s.members.advance(t + dt - work_s, work_s, _slots(s.gpus))
                s.left = s.members.work_left()
            elif s.left is not None and s.rate:
                if s.left <= work_s * s.rate * (1 + 1e-9):
                    s.finish, s.left = t + (dt - work_s) + s.left / s.rate, 0.0
                else:
                    s.left -= work_s * s.rate
            if s.finish is not None:
                finished = (finished + (_snapshot(s),))[-FINISHED_SHOWN:]
        t = t_next
    return Forecast({k: s.start for k, s in states.items()}, {k: s.finish for k, s in states.items()},
                    decisions, cut_short)
