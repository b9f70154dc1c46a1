"""A reference the judge's targets can be read against: what an allocator that learns demand
one tick late, and nothing else, could do.

Why: the judge's ideal follows each tick's arrivals (sim/metrics.py), and a tick's jitter
is not known before the tick. An allocator that knew every daemon's arrivals of the
previous tick exactly (no delivery delay, no loss, no counting noise) and handed out the
judge's own ideal of them, admitting as a fluid (no whole messages, no buckets), is as well
informed as one can be after the fact. Where even it is slow to converge, the cause is the
workload against the judge, not the strategy under test: when first measured it was over 5 ticks in
11 of the 18 fuzz scenarios (seed 1) where rgd was, 34 changes against rgd's 26 there.

Pure: it rewrites a run's recorded admissions and leaves the arrivals, quotas and changes
as they were, so `sim.metrics.evaluate` judges it like any run. The arrivals are the
scenario's (sim/broker.py draws them from the rates alone), so any strategy's run of a
scenario gives the same replay.
"""

from __future__ import annotations

import copy

from sim.engine import DimensionTick, RunResult
from sim.metrics import judge

__all__ = ["replay"]


def replay(result: RunResult) -> RunResult:
    """`result` with every daemon's admissions in each tick replaced by the lesser of what
    arrived at it and its ideal share in the tick before (in the first tick of a
    dimension, or a daemon's first tick in it, the tick's own ideal: no worse than
    knowing nothing)."""
    out = copy.deepcopy(result)
    for series in out.dims.values():
        before: dict[str, float] | None = None
        for tick in series:
            if tick is None:
                before = None
                continue
            now = judge(tick).shares
            shares = now if before is None else {d: before.get(d, now.get(d, 0.0)) for d in now}
            before = now
            tick.admitted = _admitted(tick, shares)
    return out


def _admitted(tick: DimensionTick, shares: dict[str, float]) -> dict[str, float]:
    offered = tick.arrived or tick.offered
    ids = set(tick.offered) | set(tick.admitted)
    return {d: min(offered.get(d, 0.0), shares.get(d, 0.0)) for d in ids}
