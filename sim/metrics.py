"""From recorded ticks to the comparison figures (pure).

Per dimension (group x kind) and tick, the ideal comes from the judge (sim/oracle.py,
which shares no code with any strategy): the max-min fair split of the quota over the
live daemons' offered load (the whole messages that arrived at each in that tick), or,
where a group limits messages and bytes both, the lexicographic max-min of dominant shares
(Dominant Resource Fairness with demand caps).
A daemon whose bytes bind is judged in bytes: its tolerance and slack are fractions of
the bytes quota. Definitions (all documented in the table's legend, sim/table.py):
- converged tick: every live daemon admitted within 10 % of its ideal share (plus
  a slack of 0.5 % of the quota of its dominant dimension, for acquire granularity, and
  one of its messages: a tick admits whole messages, so at a few messages a second no
  limiter comes closer to a fractional ideal),
  and the cluster's usage of every limited dimension within 10 % of the ideal's
  (plus 0.5 % of that quota, and one message of the largest sender, for the same
  reason): min(quota, total demand) in one dimension;
- a window runs from a change's observable tick (demand/join/leave: the next tick,
  when the first report of it has been published; a new group: the next tick too;
  crash: the strategy's TTL later; a quota change: at once) to the next change that
  touches its dimension (its group's quota, demand or message sizes, or a daemon coming
  or going: `touching`). Ticks between a change and its
  observable tick count for overshoot but not for convergence;
- ticks to converge: m - observable, where m is the first tick of the window that
  starts HOLD (3) converged ticks in a row (or runs converged to the window's end);
  None (shown "never") if there is no such tick. Later excursions (a report lost, a
  daemon wrongly evicted) show in overshoot, over quota and utilization instead. A
  window too short to show convergence within BUDGET ticks (the next change came
  first) that did not converge is flagged `superseded`: the run's worst still counts it
  as "never", the fuzzer's per-change statistics leave it out (it says nothing either way);
- utilization of the binding dimension: the usage of the constraint the ideal fills
  (messages or bytes, the fuller one if both) over its quota, or admitted / demand when
  the ideal meets every demand; and Jain's index of admitted/ideal (a deviation of one
  message counted as none, as in a converged tick); both averaged over
  the converged part of each window (the last half when it never converges), then the
  worst window;
- overshoot: the worst tick's cluster usage above the quota, in %, over every limited
  dimension (bytes too, where messages and bytes are both limited);
- over quota: share of ticks in which the cluster admitted more than 1 % above
  the quota (1 % absorbs sub-step jitter);
- invariant: the episodes in which the limits the daemons granted themselves summed to
  more than the quota + 10 % (sim/invariant.py, checked twice per sub-step), and the
  worst one's excess over the quota.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sim.engine import TICK_SECONDS, Change, DimensionTick, RunResult
from sim.oracle import UNLIMITED, Allocation, Constraint, constraints_of, dominant_weights, progressive_fill

TOLERANCE = 0.10
SLACK = 0.005  # of the quota, absolute, per daemon
OVER_GRACE = 0.01
HOLD = 3  # converged ticks in a row that count as converged
BUDGET = 5  # a window shorter than BUDGET + HOLD ticks cannot show convergence within BUDGET


@dataclass(frozen=True)
class WindowMetrics:
    dimension: str
    change: str
    observable: int
    end: int
    ticks_to_converge: int | None
    utilization: float | None
    jain: float | None
    binding: str = ""  # what limits the ideal at the window's start: messages, bytes or demand
    superseded: bool = False  # cut short by the next change before it could converge
    moved: bool = True  # the change moved this dimension's ideal (else it is another dimension's)


@dataclass(frozen=True)
class Metrics:
    scenario: str
    strategy: str
    ticks_to_converge: int | None  # worst window; None = some window never converged
    overshoot_pct: float
    utilization: float | None
    jain: float | None
    over_quota_share: float
    report_bytes_per_daemon_tick: float
    windows: list[WindowMetrics] = field(default_factory=list)
    overshoot_at: str = ""  # where the worst tick was: "group/kind tick k (messages|bytes)"
    counters: dict[str, int] = field(default_factory=dict)  # reports, groups sent/suppressed, losses...
    invariant_violations: int = 0  # episodes over the bound (sim/invariant.py)
    worst_violation_pct: float | None = None  # the worst episode's excess over the quota (INF: a quota of 0)
    worst_violation: str = ""  # what and when, with the situation

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        if doc["worst_violation_pct"] == math.inf:
            doc["worst_violation_pct"] = "inf"  # JSON has no infinity
        return doc


@dataclass(frozen=True)
class Judged:
    """One tick judged: the ideal, in the tick's measured unit, and the constraints behind it."""

    ids: tuple[str, ...]
    constraints: tuple[Constraint, ...]
    allocation: Allocation

    @property
    def shares(self) -> dict[str, float]:
        return dict(zip(self.ids, self.allocation.shares))

    def usage(self, c: Constraint, x: dict[str, float]) -> float:
        return sum(a * x.get(i, 0.0) for i, a in zip(self.ids, c.coeffs))


def judge(t: DimensionTick, at_rates: bool = False) -> Judged:
    """The oracle's ideal for one tick. Coupled limits (a bytes quota beside the measured messages
    quota) are one problem over both; otherwise the one limited dimension, in its own unit.

    The load each daemon was offered is the whole messages that arrived in the tick where the
    engine recorded them (a daemon offered 4.4 msg/s sees 4 or 5 and may admit all: judged
    on the rate, ten such daemons in phase read as 14 % over their ideal in every fifth tick
    with nothing denied); `at_rates` judges the rates themselves (whether a change moved the
    ideal: arrivals would read every tick's one-message noise as a move)."""
    ids, constraints = _constraints(t)
    offered = t.offered if at_rates or not t.arrived else t.arrived
    return Judged(ids, constraints, progressive_fill([offered.get(i, 0.0) for i in ids], constraints))


def _constraints(t: DimensionTick) -> tuple[tuple[str, ...], tuple[Constraint, ...]]:
    ids = tuple(sorted(set(t.offered) | set(t.admitted)))
    if t.bytes_quota >= 0:
        sizes = [t.message_bytes.get(i, 1.0) for i in ids]
        return ids, tuple(constraints_of(sizes, t.quota, t.bytes_quota))
    return ids, tuple(constraints_of([1.0] * len(ids), t.quota, UNLIMITED))


def ideal(t: DimensionTick) -> dict[str, float]:
    return judge(t).shares


def converged(t: DimensionTick, j: Judged | None = None) -> bool:
    j = j or judge(t)
    weights = dominant_weights(j.constraints, len(j.ids))
    for daemon, share, w in zip(j.ids, j.allocation.shares, weights):
        slack = SLACK / w if w > 0 else 0.0  # SLACK of the quota of its dominant dimension
        # A tick admits whole messages: a daemon whose ideal is 3.8 messages a second admits 3
        # or 4 in a tick however well it is limited, so one message is never a miss.
        slack += t.per_message.get(daemon, 0.0) / TICK_SECONDS
        if abs(t.admitted.get(daemon, 0.0) - share) > TOLERANCE * share + slack:
            return False
    fair = j.shares
    for c in j.constraints:
        target = j.usage(c, fair)
        # Whole messages in the cluster's usage too: however well the members are limited,
        # their whole messages meet a fractional ideal only to within one message (the
        # largest any of them sends, in this constraint's unit).
        one = max((a * t.per_message.get(d, 0.0) / TICK_SECONDS for d, a in zip(j.ids, c.coeffs)), default=0.0)
        if abs(j.usage(c, t.admitted) - target) > TOLERANCE * target + SLACK * c.capacity + one:
            return False
    return True


def binding(j: Judged) -> str:
    """What limits the ideal: the tight constraint (the fuller if several), or demand."""
    tight = [c for c in j.constraints if c.name in j.allocation.tight and c.capacity > 0]
    if not tight:
        return "demand"
    return max(tight, key=lambda c: j.usage(c, j.shares) / c.capacity).name


def utilization(t: DimensionTick, j: Judged | None = None) -> float | None:
    """Usage of the binding dimension over its quota, or admitted / demand when demand binds."""
    j = j or judge(t)
    tight = [c for c in j.constraints if c.name in j.allocation.tight and c.capacity > 0]
    if tight:
        return max(j.usage(c, t.admitted) / c.capacity for c in tight)
    target = sum(j.allocation.shares)
    return sum(t.admitted.values()) / target if target > 0 else None


def usage_and_quota(t: DimensionTick) -> list[tuple[float, float]]:
    """(cluster usage, quota) of every limited dimension with a quota > 0."""
    ids, constraints = _constraints(t)
    return [(sum(a * t.admitted.get(i, 0.0) for i, a in zip(ids, c.coeffs)), c.capacity)
            for c in constraints if c.capacity > 0]


def jain(t: DimensionTick, j: Judged | None = None) -> float | None:
    """Jain's index of admitted / ideal, a deviation of up to one message counted as none (as
    in `converged`: a daemon whose ideal is 0.4 messages a second admits 0 or 1 in a tick,
    a ratio of 0 or 2.5 that says nothing about the allocation)."""
    fair = (j or judge(t)).shares
    x = [(f + _beyond_one_message(t.admitted.get(d, 0.0) - f, t.per_message.get(d, 0.0) / TICK_SECONDS)) / f
         for d, f in fair.items() if f > 0]
    if not x:
        return None
    sq = sum(v * v for v in x)
    return (sum(x) ** 2) / (len(x) * sq) if sq > 0 else 0.0


def _beyond_one_message(deviation: float, one: float) -> float:
    return math.copysign(max(0.0, abs(deviation) - one), deviation)


def _mean(values: Sequence[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return sum(vs) / len(vs) if vs else None


def window_metrics(dimension: str, series: Sequence[DimensionTick | None], change: Change,
                   end: int) -> WindowMetrics | None:
    ticks = [(k, series[k], judge(series[k])) for k in range(change.observable, end)  # type: ignore[arg-type]
             if series[k] is not None]
    if not ticks:
        return None
    ok = [converged(t, j) for _, t, j in ticks]
    first = next((i for i in range(len(ok)) if all(ok[i:i + HOLD])), None)
    if first is None:
        steady = ticks[len(ticks) // 2:]
        ttc = None
    else:
        steady = ticks[first:]
        ttc = ticks[first][0] - change.observable
    return WindowMetrics(
        dimension, change.label, change.observable, end, ttc,
        _mean([utilization(t, j) for _, t, j in steady]),
        _mean([jain(t, j) for _, t, j in steady]),
        binding(ticks[0][2]),
        superseded=ttc is None and end - change.observable < BUDGET + HOLD,
        moved=_moved(series, change, ticks[0][1]),
    )


def _moved(series: Sequence[DimensionTick | None], change: Change, after_tick: DimensionTick) -> bool:
    """Did the change move this dimension's ideal (beyond the convergence tolerance)? Judged on
    the rates offered before and after, not the messages that happened to arrive."""
    before_tick = series[change.tick - 1] if change.tick > 0 else None
    if before_tick is None:
        return True
    before, after = judge(before_tick, at_rates=True), judge(after_tick, at_rates=True)
    if set(before.ids) != set(after.ids) or before.constraints != after.constraints:
        return True
    old, new = before.shares, after.shares
    weights = dict(zip(after.ids, dominant_weights(after.constraints, len(after.ids))))
    return any(abs(new[i] - old[i]) > TOLERANCE * max(new[i], old[i]) + (SLACK / weights[i] if weights[i] else 0)
               for i in after.ids)


def touching(changes: Sequence[Change], dimension: str) -> list[Change]:
    """The changes that bound `dimension`'s windows: those that touch it (its group's quota,
    demand or message sizes, or a daemon coming or going). Why not every change: one in
    another group moves neither this group's ideal nor any strategy's split of it, and
    ending the window there made one-tick windows whose whole-message noise read as a
    window's utilization (fuzz seed 1, case 375: g04/publish 0.911 in a tick after g05's
    sizes changed). It also left changes they cut short out of convergence."""
    return [c for c in changes if c.dims is None or dimension in c.dims]


def evaluate(result: RunResult) -> Metrics:
    windows: list[WindowMetrics] = []
    worst = 0.0
    worst_at = ""
    over = 0
    measured = 0
    for dim in sorted(result.dims):
        series = result.dims[dim]
        for k, t in enumerate(series):
            if t is None:
                continue
            dims = usage_and_quota(t)
            if not dims:
                continue
            tick_worst, which = max(((u / q - 1.0) * 100.0, i) for i, (u, q) in enumerate(dims))
            if tick_worst > worst:
                what = ("messages", "bytes")[which] if t.bytes_quota >= 0 else "its one limit"
                worst, worst_at = tick_worst, f"{dim} tick {k} ({what})"
            measured += 1
            over += any(u > q * (1 + OVER_GRACE) for u, q in dims)
        changes = touching(result.changes, dim)
        for i, change in enumerate(changes):
            end = changes[i + 1].tick if i + 1 < len(changes) else result.ticks
            w = window_metrics(dim, series, change, end)
            if w is not None:
                windows.append(w)
    ttcs = [w.ticks_to_converge for w in windows]
    worst_violation = max(result.violations, key=lambda v: v.excess_pct, default=None)
    utils = [w.utilization for w in windows if w.utilization is not None]
    jains = [w.jain for w in windows if w.jain is not None]
    return Metrics(
        scenario=result.scenario,
        strategy=result.strategy,
        ticks_to_converge=None if (not ttcs or any(t is None for t in ttcs)) else max(ttcs),  # type: ignore[type-var]
        overshoot_pct=max(0.0, worst),
        utilization=min(utils) if utils else None,
        jain=min(jains) if jains else None,
        over_quota_share=over / measured if measured else 0.0,
        report_bytes_per_daemon_tick=result.report_bytes / max(1, result.daemon_ticks),
        windows=windows,
        overshoot_at=worst_at,
        counters={**result.counters, "transport_lost": result.reports_lost, "transport_cut": result.reports_cut},
        invariant_violations=len(result.violations),
        worst_violation_pct=worst_violation.excess_pct if worst_violation else None,
        worst_violation=worst_violation.describe() if worst_violation else "",
    )


__all__ = ["BUDGET", "HOLD", "OVER_GRACE", "SLACK", "TOLERANCE", "Judged", "Metrics", "WindowMetrics", "binding",
           "converged", "evaluate", "ideal", "jain", "judge", "touching", "usage_and_quota", "utilization",
           "window_metrics"]
