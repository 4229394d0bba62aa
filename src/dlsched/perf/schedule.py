"""Learning-rate schedules as the user names them (``--schedule SPEC``), and the two LR areas a
schedule-aware loss model needs.

SPEC grammar (units are the curve's x, e.g. steps or epochs; LR values are relative, only the shape matters):

* ``constant``
* ``step:M1,M2,...:F``             multiply by F at each milestone (``step:30,60,80:0.1``)
* ``cosine[:warmup=W]``            half-cosine from the peak to 0 at the budget
* ``onecycle[:pct=P]``             torch ``OneCycleLR`` (cos, div 25, final div 1e4), peak at P·budget (0.3)
* ``wsd:warmdown=N[:warmup=W]``    warm-up, stable, linear decay to 0 over the last N
* ``poly:power=P[:warmup=W]``      (1 − t)^P after the warm-up
* ``linear[:warmup=W]``            linear decay to 0 after the warm-up
* ``...:min=M``                    cosine, linear, poly, wsd and sgdr end at M × the peak instead of 0 (torch
                                   ``eta_min``, timm ``min_lr``, Hugging Face ``cosine_with_min_lr``/``lr_end``)
* ``invsqrt:warmup=W[:timescale=T]``  peak at W, then sqrt(T / (x − W + T)), T = W unless given (fairseq's
                                   sqrt(W / x), Hugging Face ``inverse_sqrt``)
* ``exp:gamma=G[:every=E][:warmup=W]``  × G every E of x after the warm-up (torch ``ExponentialLR``; smooth)
* ``sgdr:t0=T[:mult=M][:warmup=W]``  cosine cycles of T, T·M, ... each restarting at the peak (torch
                                   ``CosineAnnealingWarmRestarts``; Hugging Face's N hard restarts:
                                   T = (budget − W) / N)
* ``steps:0=0.01,5=0.1,95=0.01``   piecewise constant: the LR from each x on
* ``points:0=0,15=0.1,30=0.005``   piecewise linear between the points (flat after the last)
* ``lr-column``                    the LR of every row of the curve file (``Schedule.from_points``)

Warm-up is linear from 0. A span of x (warmup, warmdown, timescale, every, t0) may be a share of the budget:
``cosine:warmup=5%``. Malformed specs raise ``ValueError`` with one line naming the part at fault.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

CYCLES = 10_000       # restarts an sgdr SPEC may have within its budget
GRID = 4096           # evaluation points over [0, budget] for the areas: < 1 ms, smooth enough for any spec
LENGTHS = frozenset({"warmup", "warmdown", "timescale", "every", "t0"})   # spans of x: W, or W% of the budget
MOMENTUM = 0.01       # annealing memory τ as a fraction of the budget (Tissue et al. 2024 use λ = 0.999 per step)

SPEC_HELP = ("constant | step:M1,M2:F | cosine[:warmup=W] | onecycle[:pct=P] | wsd:warmdown=N[:warmup=W] | "
             "poly:power=P[:warmup=W] | linear[:warmup=W] | invsqrt:warmup=W[:timescale=T] | "
             "exp:gamma=G[:every=E][:warmup=W] | sgdr:t0=T[:mult=M][:warmup=W] | steps:X=LR,... | "
             "points:X=LR,... | lr-column; "
             "cosine, linear, poly, wsd and sgdr take :min=M; a span of x may be a % of the budget (warmup=5%)")


@dataclass(frozen=True)
class Schedule:
    """A relative LR shape over [0, budget]: ``xs``/``lrs`` knots, ``stepwise`` (hold each value) or linear."""

    spec: str
    budget: float
    xs: tuple[float, ...]
    lrs: tuple[float, ...]
    stepwise: bool = False

    def lr(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        xs, lrs = np.asarray(self.xs), np.asarray(self.lrs)
        if self.stepwise:
            return lrs[np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 1)]
        return np.interp(x, xs, lrs)

    @property
    def anneals(self) -> bool:
        return bool(np.ptp(self.lrs) > 1e-9 * max(self.lrs))

    @property
    def decay(self) -> str:
        """How the LR comes down: ``none``, ``step`` (held, then cut by a factor: a knot at most 0.6× the one
        before) or ``anneal`` (gradually, cosine/linear/one-cycle/WSD, or per-epoch steps of a few %)."""
        if not self.anneals:
            return "none"
        lrs = np.asarray(self.lrs)
        if not self.stepwise:
            return "step" if _staircase(np.asarray(self.xs, float), lrs, self.budget) else "anneal"
        cuts = lrs[1:] / np.maximum(lrs[:-1], 1e-12 * lrs.max())
        return "step" if cuts.min() < 0.6 else "anneal"

    def anneals_after(self, x: float) -> bool:
        """Whether the LR falls anywhere after ``x`` (a decay still to come that a prefix cannot show)."""
        g = np.linspace(x, self.budget, 512)
        lr = self.lr(g)
        return bool(lr.min() < lr[0] * (1 - 1e-6))

    def peak_at(self) -> float:
        """The first x at which the LR reaches its peak over the budget: the end of a warm-up (0 without one)."""
        g = np.linspace(0.0, self.budget, GRID)
        lr = self.lr(g)
        return float(g[np.argmax(lr >= (1 - 1e-3) * lr.max())])

    @classmethod
    def from_points(cls, xs, lrs, budget: float, spec: str = "lr-column") -> "Schedule":
        """A logged LR per row (piecewise linear between rows, flat beyond them)."""
        xs, lrs = np.asarray(xs, float), np.asarray(lrs, float)
        if len(xs) == 0 or not np.all(np.isfinite(lrs)) or np.any(lrs < 0) or not np.any(lrs > 0):
            raise ValueError("lr column: needs finite values >= 0, one of them > 0")
        order = np.argsort(xs, kind="stable")
        return cls(spec, float(budget), tuple(xs[order]), tuple(lrs[order]))


def _staircase(xs: np.ndarray, lrs: np.ndarray, budget: float) -> bool:
    """A logged LR that is a step schedule sampled (``StepLR`` logged every 50 steps): it holds each level over
    several rows, and every fall from one held level to the next is a cut (< 0.6x) within ``SLACK`` of the budget
    (one logging interval; a continuation samples that interval finer). A WSD's or a cosine's fall is gradual."""
    flat = np.isclose(lrs[1:], lrs[:-1], rtol=1e-6, atol=0.0)
    runs = []   # (first x, last x, level) of each run of 2+ rows at one value
    for i in np.flatnonzero(flat):
        if runs and runs[-1][1] == xs[i]:
            runs[-1] = (runs[-1][0], xs[i + 1], runs[-1][2])
        else:
            runs.append((xs[i], xs[i + 1], lrs[i]))
    falls = [(b[2] / max(a[2], 1e-12 * lrs.max()), b[0] - a[1]) for a, b in zip(runs, runs[1:]) if b[2] < a[2]]
    return bool(falls) and all(ratio < 0.6 and span <= SLACK * budget for ratio, span in falls)


SHARED = 0.02   # RMS gap, a share of the peak, within which runs' LR shapes over their budgets are one schedule
SLACK = 0.05    # the most, a share of the budget, two runs of one recipe may log one change of LR apart


def stretched(schedule: Schedule, budget: float, spec: str) -> Schedule:
    """The schedule's shape over another budget: every x scaled by ``budget / schedule.budget`` (a warm-up too)."""
    k = float(budget) / schedule.budget
    return Schedule(spec, float(budget), tuple(x * k for x in schedule.xs), schedule.lrs, schedule.stepwise)


def shared_shape(schedules: list[Schedule]) -> Schedule | None:
    """The first schedule when every one has its shape over its own budget (``shape_gap`` within ``SHARED`` of the
    first's: the runs of one recipe, whatever their length and logging), else None."""
    if not schedules:
        return None
    return schedules[0] if all(shape_gap(schedules[0], s) <= SHARED for s in schedules[1:]) else None


def shape_gap(a: Schedule, b: Schedule) -> float:
    """How far two schedules' shapes (each over its budget, relative to its peak) lie apart: the RMS of how far each
    one's LR lies from what the other ran within a logging interval of it (``outside``), the larger way round, from
    the later of their first knots (a logged LR's first row is where its log starts, not its LR from 0)."""
    a, b = _relative(a), _relative(b)
    t = np.linspace(0.0, 1.0, GRID)
    t = t[t >= max(a.xs[0], b.xs[0])]
    h = logging_slack(a, b, 1.0)
    return max(float(np.sqrt(np.mean(outside(p.lr(t), t, q, h) ** 2))) for p, q in ((a, b), (b, a)))


def logging_slack(a: Schedule, b: Schedule, budget: float) -> float:
    """How far apart, in x over ``budget``, runs of one recipe may log one change of LR: the wider spacing of the two
    logs' rows (a stepwise SPEC has none: its knots are its cuts), at most ``SLACK`` of the budget."""
    def spacing(s: Schedule) -> float:
        d = np.diff(np.asarray(s.xs))
        return 0.0 if s.stepwise or not len(d) else float(np.median(d)) / s.budget
    return min(max(spacing(a), spacing(b)), SLACK) * budget


def outside(lr, x, schedule: Schedule, halfwidth: float) -> np.ndarray:
    """How far each ``lr`` (at ``x``) lies outside the range of LRs ``schedule`` runs within ``halfwidth`` of its x:
    runs of one recipe log a cut, or a warm-up's rise, at rows up to a logging interval apart."""
    window = schedule.lr(np.asarray(x, float)[:, None] + halfwidth * np.linspace(-1.0, 1.0, 9))
    lr = np.asarray(lr, float)
    return np.maximum(window.min(axis=1) - lr, 0.0) + np.maximum(lr - window.max(axis=1), 0.0)


def _relative(s: Schedule) -> Schedule:
    """The schedule over a budget of 1, its peak 1."""
    peak = max(s.lrs) or 1.0
    return Schedule(s.spec, 1.0, tuple(x / s.budget for x in s.xs), tuple(v / peak for v in s.lrs), s.stepwise)


def areas(schedule: Schedule, x, momentum: float = MOMENTUM) -> tuple[np.ndarray, np.ndarray]:
    """(S1, S2) at ``x`` on a grid over [0, budget] with the LR scaled to peak 1 (Tissue et al. 2024).

    S1 = ∫η dx / budget: the forward area that drives the power-law part. S2 = the annealing amount
    d = (running max of η) − η passed through first-order momentum with time constant τ = momentum·budget:
    S2 = d − m with m' = −m/τ + d', i.e. each LR drop Δd at x_j contributes Δd·(1 − e^{−(x−x_j)/τ}) (the
    continuous form of their m_i = λ·m_{i−1} + Δη_i, summed and divided by 1/(1 − λ)). Dimensionless, ≤ 1.
    """
    x = np.asarray(x, dtype=float)
    g, s1, s2 = _area_grid(schedule, max(schedule.budget, float(np.max(x, initial=0.0))), momentum)
    return np.interp(x, g, s1), np.interp(x, g, s2)


@functools.lru_cache(maxsize=64)   # one fit asks for the same schedule's areas about ten times
def _area_grid(schedule: Schedule, hi: float, momentum: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(grid over [0, hi], S1, S2 on it): ``areas``, before the interpolation to the x asked for; read-only."""
    B = schedule.budget
    g = np.linspace(0.0, hi, GRID)
    eta = schedule.lr(g)
    peak = float(eta.max()) or 1.0
    eta = eta / peak
    h = g[1] - g[0]
    s1 = np.concatenate([[0.0], np.cumsum(0.5 * (eta[1:] + eta[:-1])) * h]) / B
    d = np.maximum.accumulate(eta) - eta
    decay = math.exp(-h / max(momentum * B, 1e-12))
    from scipy.signal import lfilter   # here: it imports scipy.stats, ~0.7 s a process pays only once it fits a curve
    m = lfilter([1.0], [1.0, -decay], np.concatenate([[d[0]], np.diff(d)]))
    s2 = d - m
    for a in (g, s1, s2):
        a.flags.writeable = False
    return g, s1, s2


# ----------------------------------------------------------------------------------------------- parsing
def _kv(parts: list[str], spec: str, allowed: tuple[str, ...], budget: float) -> dict[str, float]:
    out = {}
    for p in parts:
        key, eq, val = p.partition("=")
        if not eq or key not in allowed:
            raise ValueError(f"schedule {spec!r}: unknown part {p!r} (expected {', '.join(k + '=…' for k in allowed)})")
        # a length in x may be a share of the budget (warmup=5%): a warmup_ratio of 0.05 written as warmup=0.05
        # was 0.05 steps, silently
        share = key in LENGTHS and val.strip().endswith("%")
        try:
            out[key] = float(val.strip()[:-1]) / 100 * budget if share else float(val)
        except ValueError:
            raise ValueError(f"schedule {spec!r}: {key} must be a number{' or a % of the budget' * (key in LENGTHS)}, "
                             f"got {val!r}") from None
        if not math.isfinite(out[key]) or out[key] < 0:
            raise ValueError(f"schedule {spec!r}: {key} must be >= 0, got {val!r}")
    return out


def _pairs(body: str, spec: str) -> tuple[list[float], list[float]]:
    xs, lrs = [], []
    for item in filter(None, body.split(",")):
        x, eq, v = item.partition("=")
        try:
            xs.append(float(x))
            lrs.append(float(v))
        except ValueError:
            raise ValueError(f"schedule {spec!r}: expected X=LR pairs, got {item!r}") from None
        if not eq or not (0 <= lrs[-1] < math.inf and 0 <= xs[-1] < math.inf):   # nan fails too
            raise ValueError(f"schedule {spec!r}: expected X=LR with finite X, LR >= 0, got {item!r}")
    if not xs or np.any(np.diff(xs) <= 0):
        raise ValueError(f"schedule {spec!r}: points must be given with increasing x")
    return xs, lrs


def _warm(W: float, B: float, spec: str) -> list[tuple[float, float]]:
    if W >= B:
        raise ValueError(f"schedule {spec!r}: warmup={W:g} is not below the budget {B:g}")
    return [(0.0, 0.0), (W, 1.0)] if W > 0 else [(0.0, 1.0)]


def _floor(kv: dict[str, float], spec: str) -> float:
    """Where a decay ends, a share of the peak (``min``; 0 unless given)."""
    floor = kv.get("min", 0.0)
    if floor >= 1:
        raise ValueError(f"schedule {spec!r}: min is a share of the peak LR and must be < 1, got {floor:g}")
    return floor


def parse_schedule(spec: str, budget: float) -> Schedule:
    """The ``Schedule`` a SPEC names over [0, ``budget``] (``lr-column`` is built with ``Schedule.from_points``)."""
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"budget must be > 0, got {budget!r}")
    B = float(budget)
    name, _, rest = spec.strip().partition(":")
    parts = [p for p in rest.split(":") if p] if rest else []
    n = 512  # knots for smooth shapes; linear interpolation between them is exact enough for the areas
    if name == "constant" and not parts:
        return Schedule(spec, B, (0.0,), (1.0,), stepwise=True)
    if name == "step":
        if len(parts) != 2:
            raise ValueError(f"schedule {spec!r}: expected step:M1,M2,...:FACTOR")
        try:
            ms = [float(m) for m in parts[0].split(",") if m]
            f = float(parts[1])
        except ValueError:
            raise ValueError(f"schedule {spec!r}: milestones and factor must be numbers") from None
        if not ms or np.any(np.diff(ms) <= 0) or not (0 < f < math.inf) or not all(0 < m < math.inf for m in ms):
            raise ValueError(f"schedule {spec!r}: milestones must be finite, > 0 and increase, the factor finite and > 0")
        return Schedule(spec, B, tuple([0.0] + ms), tuple(f ** i for i in range(len(ms) + 1)), stepwise=True)
    if name in ("steps", "points"):
        xs, lrs = _pairs(rest, spec)
        if name == "steps" and xs[0] > 0:
            xs, lrs = [0.0] + xs, [lrs[0]] + lrs
        return Schedule(spec, B, tuple(xs), tuple(lrs), stepwise=name == "steps")
    if name in ("cosine", "linear", "poly", "invsqrt", "exp"):
        kv = _kv(parts, spec, {"poly": ("power", "warmup", "min"), "invsqrt": ("warmup", "timescale"),
                               "exp": ("gamma", "every", "warmup")}.get(name, ("warmup", "min")), B)
        for key in {"poly": ("power",), "invsqrt": ("warmup",), "exp": ("gamma",)}.get(name, ()):
            if not kv.get(key):
                raise ValueError(f"schedule {spec!r}: {name} needs {key}=… > 0")
        if name == "exp" and not (kv["gamma"] <= 1 and kv.get("every", 1.0) > 0):
            raise ValueError(f"schedule {spec!r}: exp needs 0 < gamma <= 1 and every > 0")
        knots = _warm(kv.get("warmup", 0.0), B, spec)
        W = knots[-1][0]
        t = np.linspace(0, 1, n)[1:]
        x, T = W + t * (B - W), kv.get("timescale", W)
        shape = {"cosine": lambda: 0.5 * (1 + np.cos(np.pi * t)), "linear": lambda: 1 - t,
                 "poly": lambda: (1 - t) ** kv["power"], "invsqrt": lambda: np.sqrt(T / (x - W + T)),
                 "exp": lambda: kv["gamma"] ** ((x - W) / kv.get("every", 1.0))}[name]()
        floor = _floor(kv, spec)
        lrs = [k[1] for k in knots] + list(floor + (1 - floor) * shape)
        return Schedule(spec, B, tuple([k[0] for k in knots] + list(x)), tuple(lrs))
    if name == "wsd":
        kv = _kv(parts, spec, ("warmdown", "warmup", "min"), B)
        if "warmdown" not in kv:
            raise ValueError(f"schedule {spec!r}: wsd needs warmdown=N")
        knots = _warm(kv.get("warmup", 0.0), B, spec)
        start = B - kv["warmdown"]
        if start < knots[-1][0]:
            raise ValueError(f"schedule {spec!r}: warm-up and warmdown={kv['warmdown']:g} overlap within budget {B:g}")
        knots += [(start, 1.0), (B, _floor(kv, spec))]
        xs, lrs = zip(*sorted(dict(knots).items()))
        return Schedule(spec, B, tuple(xs), tuple(lrs))
    if name == "sgdr":
        kv = _kv(parts, spec, ("t0", "mult", "min", "warmup"), B)
        t0, mult = kv.get("t0", 0.0), kv.get("mult", 1.0)
        if not (t0 > 0 and mult >= 1):
            raise ValueError(f"schedule {spec!r}: sgdr needs t0=… > 0 and mult >= 1")
        knots = _warm(kv.get("warmup", 0.0), B, spec)
        starts = [knots[-1][0]]
        while starts[-1] < B and len(starts) <= CYCLES:
            starts.append(starts[-1] + t0 * mult ** (len(starts) - 1))
        if len(starts) > CYCLES:
            raise ValueError(f"schedule {spec!r}: more than {CYCLES} cycles within budget {B:g}")
        floor, t = _floor(kv, spec), np.linspace(0, 1, 64)
        xs, lrs = [k[0] for k in knots[:-1]], [k[1] for k in knots[:-1]]
        for a, b in zip(starts, starts[1:]):   # each cycle a half cosine from the peak to the floor, then a restart
            x = a + t * (b - a)
            xs += list(x[:-1]) + [b - 1e-6 * (b - a)]
            lrs += list(floor + (1 - floor) * 0.5 * (1 + np.cos(np.pi * t)))
        return Schedule(spec, B, tuple(xs), tuple(lrs))
    if name == "onecycle":
        p = _kv(parts, spec, ("pct",), B).get("pct", 0.3)
        if not 0 < p < 1:
            raise ValueError(f"schedule {spec!r}: pct must be in (0, 1), got {p:g}")
        lo, end = 1 / 25, 1 / 25 / 1e4
        t = np.linspace(0, 1, n)
        up = lo + (1 - lo) * 0.5 * (1 - np.cos(np.pi * t))
        down = end + (1 - end) * 0.5 * (1 + np.cos(np.pi * t[1:]))
        xs = list(t * p * B) + list(p * B + t[1:] * (1 - p) * B)
        return Schedule(spec, B, tuple(xs), tuple(list(up) + list(down)))
    raise ValueError(f"schedule {spec!r}: unknown (expected {SPEC_HELP})")
