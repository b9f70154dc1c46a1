"""From recorded ticks to the comparison figures (pure).

Per dimension (group x kind) and tick, the ideal is the max-min fair split of the
quota over the live daemons' offered load. Definitions (all documented in the
table's legend, sim/table.py):
- converged tick: every live daemon admitted within 10 % of its ideal share (plus
  a slack of 0.5 % of the quota, for acquire granularity), and the cluster admitted
  within 10 % of min(quota, total demand);
- a window runs from a change's observable tick (demand/join/leave: the next tick,
  when the first report of it has been published; a new group: the next tick too;
  crash: the strategy's TTL later; a quota change: at once) to the next change. Ticks between a change and its
  observable tick count for overshoot but not for convergence;
- ticks to converge: m - observable, where m is the first tick of the window that
  starts HOLD (3) converged ticks in a row (or runs converged to the window's end);
  None (shown "never") if there is no such tick. Later excursions (a report lost, a
  daemon wrongly evicted) show in overshoot, over quota and utilization instead;
- utilization (admitted / min(quota, demand)) and Jain's index of admitted/ideal,
  averaged over the converged part of each window (the last half when it never
  converges), then the worst window;
- overshoot: the worst tick's cluster admission above the quota, in %;
- over quota: share of ticks in which the cluster admitted more than 1 % above
  the quota (1 % absorbs sub-step jitter).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from rgd.quota.max_min_fair import water_fill
from sim.engine import Change, DimensionTick, RunResult

TOLERANCE = 0.10
SLACK = 0.005  # of the quota, absolute, per daemon
OVER_GRACE = 0.01
HOLD = 3  # converged ticks in a row that count as converged


@dataclass(frozen=True)
class WindowMetrics:
    dimension: str
    change: str
    observable: int
    end: int
    ticks_to_converge: int | None
    utilization: float | None
    jain: float | None


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
    counters: dict[str, int] = field(default_factory=dict)  # reports, groups sent/suppressed, losses...

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def ideal(t: DimensionTick) -> dict[str, float]:
    ids = sorted(t.offered)
    return dict(zip(ids, water_fill(t.quota, [t.offered[i] for i in ids])))


def converged(t: DimensionTick) -> bool:
    fair = ideal(t)
    slack = SLACK * t.quota
    for daemon, share in fair.items():
        if abs(t.admitted.get(daemon, 0.0) - share) > TOLERANCE * share + slack:
            return False
    target = min(t.quota, sum(t.offered.values()))
    return abs(sum(t.admitted.values()) - target) <= TOLERANCE * target + slack


def utilization(t: DimensionTick) -> float | None:
    target = min(t.quota, sum(t.offered.values()))
    return sum(t.admitted.values()) / target if target > 0 else None


def jain(t: DimensionTick) -> float | None:
    fair = ideal(t)
    x = [t.admitted.get(d, 0.0) / f for d, f in fair.items() if f > 0]
    if not x:
        return None
    sq = sum(v * v for v in x)
    return (sum(x) ** 2) / (len(x) * sq) if sq > 0 else 0.0


def _mean(values: Sequence[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return sum(vs) / len(vs) if vs else None


def window_metrics(dimension: str, series: Sequence[DimensionTick | None], change: Change,
                   end: int) -> WindowMetrics | None:
    ticks = [(k, series[k]) for k in range(change.observable, end) if series[k] is not None]
    if not ticks:
        return None
    ok = [converged(t) for _, t in ticks]  # type: ignore[arg-type]
    first = next((i for i in range(len(ok)) if all(ok[i:i + HOLD])), None)
    if first is None:
        steady = [t for _, t in ticks[len(ticks) // 2:]]
        ttc = None
    else:
        steady = [t for _, t in ticks[first:]]
        ttc = ticks[first][0] - change.observable
    return WindowMetrics(
        dimension, change.label, change.observable, end, ttc,
        _mean([utilization(t) for t in steady]),  # type: ignore[arg-type]
        _mean([jain(t) for t in steady]),  # type: ignore[arg-type]
    )


def evaluate(result: RunResult) -> Metrics:
    windows: list[WindowMetrics] = []
    overshoot = 0.0
    over = 0
    measured = 0
    for dim in sorted(result.dims):
        series = result.dims[dim]
        for t in series:
            if t is None or t.quota <= 0:
                continue
            total = sum(t.admitted.values())
            overshoot = max(overshoot, (total / t.quota - 1.0) * 100.0)
            measured += 1
            over += total > t.quota * (1 + OVER_GRACE)
        for i, change in enumerate(result.changes):
            end = result.changes[i + 1].tick if i + 1 < len(result.changes) else result.ticks
            w = window_metrics(dim, series, change, end)
            if w is not None:
                windows.append(w)
    ttcs = [w.ticks_to_converge for w in windows]
    utils = [w.utilization for w in windows if w.utilization is not None]
    jains = [w.jain for w in windows if w.jain is not None]
    return Metrics(
        scenario=result.scenario,
        strategy=result.strategy,
        ticks_to_converge=None if (not ttcs or any(t is None for t in ttcs)) else max(ttcs),  # type: ignore[type-var]
        overshoot_pct=max(0.0, overshoot),
        utilization=min(utils) if utils else None,
        jain=min(jains) if jains else None,
        over_quota_share=over / measured if measured else 0.0,
        report_bytes_per_daemon_tick=result.report_bytes / max(1, result.daemon_ticks),
        windows=windows,
        counters={**result.counters, "transport_lost": result.reports_lost},
    )
