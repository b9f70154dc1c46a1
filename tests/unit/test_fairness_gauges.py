"""The live fairness gauges' math (rgd.api.fairness_gauges) against literals and a brute-force
oracle that shares no code with it: the fair share found by bisection on the water level."""

from __future__ import annotations

import random

import pytest

from rgd.api.fairness_gauges import fairness


def brute_fair(quota: float, demand: list[float]) -> list[float]:
    """Max-min fair split by bisection: the level L with sum(min(d, L)) = quota (or every demand met)."""
    if sum(demand) <= quota:
        return list(demand)
    lo, hi = 0.0, max(demand)
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(min(d, mid) for d in demand) > quota:
            hi = mid
        else:
            lo = mid
    return [min(d, lo) for d in demand]


def brute(admitted: list[float], demand: list[float], quota: float) -> tuple[float, float, float]:
    fair = brute_fair(quota, demand)
    x = [a / f for a, f in zip(admitted, fair) if f > 1e-12]
    jain = 1.0 if not x or sum(v * v for v in x) == 0 else sum(x) ** 2 / (len(x) * sum(v * v for v in x))
    return jain, max(abs(a - f) for a, f in zip(admitted, fair)) / quota, sum(admitted) / quota


@pytest.mark.parametrize(("admitted", "demand", "quota", "expect"), [
    # quota 100, demands 120 and 30: fair 70/30
    ([70.0, 30.0], [120.0, 30.0], 100.0, (1.0, 0.0, 1.0)),
    # 80/20 instead: x = 8/7 and 2/3
    ([80.0, 20.0], [120.0, 30.0], 100.0, (0.935233, 0.1, 1.0)),
    # Pulsar's frozen split of DESIGN.md: quota 1000, demands 800/300, admitted 727/272 (fair 700/300)
    ([727.0, 272.0], [800.0, 300.0], 1000.0, (0.995423, 0.028, 0.999)),
    # Doorman's example: capacity 120, wants 1000/50/10, proportional 69.69/40.31/10 (fair 60/50/10)
    ([69.69, 40.31, 10.0], [1000.0, 50.0, 10.0], 120.0, (0.978896, 0.08075, 1.0)),
    # demand met: everybody at its demand, a third of the quota used
    ([10.0, 20.0], [10.0, 20.0], 90.0, (1.0, 0.0, 1 / 3)),
    # nobody admitted anything although shares were due: all equal (zero), error the largest share
    ([0.0, 0.0], [50.0, 50.0], 40.0, (1.0, 0.5, 0.0)),
])
def test_literals(admitted, demand, quota, expect):
    got = fairness(admitted, demand, quota)
    assert got == pytest.approx(expect, abs=1e-6)


def test_against_brute_force():
    rng = random.Random(45)
    for _ in range(500):
        n = rng.randint(1, 8)
        quota = rng.choice([1.0, 50.0, 1000.0, 123.4])
        demand = [rng.choice([0.0, rng.uniform(0, 2 * quota / n), rng.uniform(0, 3 * quota)]) for _ in range(n)]
        admitted = [rng.uniform(0, d * 1.2) if d else 0.0 for d in demand]
        assert fairness(admitted, demand, quota) == pytest.approx(brute(admitted, demand, quota), rel=1e-6, abs=1e-9)


def test_a_quota_of_zero_is_refused():
    with pytest.raises(ValueError, match="quota"):
        fairness([1.0], [1.0], 0.0)
