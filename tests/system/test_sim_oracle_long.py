"""The simulator's judge (sim/oracle.py) against literals, an LP and the bottleneck property.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_sim_oracle.py.
"""

from __future__ import annotations

import math

from hypothesis import given, settings

from sim.oracle import dominant_fair
from tests.support.lexmaxmin_lp import lexicographic_max_min
from tests.unit.test_sim_oracle import _close, problems


@settings(max_examples=150, deadline=None)
@given(problems())
def test_oracle_matches_the_lp(problem) -> None:
    demands, sizes, m, b = problem
    got = dominant_fair(demands, sizes, m, b).shares
    want = lexicographic_max_min(demands, sizes, m, b)
    _close(got, want, max(demands))


@settings(max_examples=300, deadline=None)
@given(problems())
def test_oracle_is_feasible_and_every_unmet_daemon_has_a_bottleneck(problem) -> None:
    # Max-min fairness characterised without any algorithm: x is feasible, and every daemon below
    # its demand uses a full constraint on which nobody has a larger dominant share.
    demands, sizes, m, b = problem
    x = dominant_fair(demands, sizes, m, b).shares
    caps = [(m, [1.0] * len(x))] if m >= 0 else []
    caps += [(b, sizes)] if b >= 0 else []
    for i, v in enumerate(x):
        assert -1e-9 <= v <= demands[i] * (1 + 1e-12) + 1e-12
    for cap, coeffs in caps:
        assert sum(a * v for a, v in zip(coeffs, x)) <= cap * (1 + 1e-9) + 1e-9

    def share(i: int) -> float:
        return max([x[i] * a[i] / c if c > 0 else (math.inf if a[i] > 0 else 0) for c, a in caps] or [0.0])

    for i, v in enumerate(x):
        if v >= demands[i] * (1 - 1e-9):
            continue
        full = [(c, a) for c, a in caps if sum(aj * vj for aj, vj in zip(a, x)) >= c * (1 - 1e-7)]
        assert full, (i, x)
        assert any(all(share(j) <= share(i) * (1 + 1e-7) + 1e-12 for j in range(len(x)) if a[j] > 0 and x[j] > 0)
                   for _, a in full), (i, x)
