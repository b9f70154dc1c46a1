"""The report's pure math: fair shares, Jain, per-tick figures, convergence, membership (no Spark).

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_report_math.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.fairness.measures import max_min_fair


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=12), st.floats(0, 2e6))
def test_max_min_fair_properties(demands: list[float], cap: float) -> None:
    d = np.array(demands)
    f = max_min_fair(d, cap)
    assert np.all(f <= d + 1e-6) and np.all(f >= -1e-9)
    assert f.sum() == pytest.approx(min(cap, d.sum()), rel=1e-9, abs=1e-6)
    unsatisfied = f < d - 1e-6
    if unsatisfied.any():  # the unsatisfied all share the top level; nobody is above it
        level = f[unsatisfied].max()
        assert np.allclose(f[unsatisfied], level, rtol=1e-9, atol=1e-6)
        assert np.all(f <= level + 1e-6)
