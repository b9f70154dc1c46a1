"""The simulator's judge (sim/oracle.py) against literals, an LP and the bottleneck property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.oracle import UNLIMITED, dominant_fair, max_min_fair


def test_oracle_shares_no_code_with_the_allocator() -> None:
    import ast

    import sim.oracle

    with open(sim.oracle.__file__) as fh:
        tree = ast.parse(fh.read())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.startswith(("rgd", "sim")) for m in imported), imported


# -- literals worked by hand -------------------------------------------------------------------


def test_single_dimension_literals() -> None:
    assert max_min_fair(300, [240, 90, 30]) == pytest.approx([180, 90, 30])
    assert max_min_fair(1000, [2000, 2000, 100]) == pytest.approx([450, 450, 100])
    assert max_min_fair(1000, [800, 300]) == pytest.approx([700, 300])
    assert max_min_fair(100, [10, 20]) == [10, 20]
    assert max_min_fair(0, [5, 5]) == [0, 0]
    assert max_min_fair(UNLIMITED, [5, 7]) == [5, 7]
    assert max_min_fair(10, []) == []


def test_bytes_binding_is_judged_in_bytes() -> None:
    # 1000 msg/s and 1 MB/s; messages of 10 kB: bytes bind at 100 msg/s in all, 50 each.
    a = dominant_fair([400, 400], [10_000, 10_000], 1000, 1_000_000)
    assert a.shares == pytest.approx((50, 50)) and a.tight == ("bytes",)


def test_dominant_resource_fairness_with_different_sizes() -> None:
    # M = 100 msg/s, B = 100 kB/s. a sends 100 B messages (messages dominate: share x/100),
    # b sends 4 kB messages (bytes dominate: share 4000 x / 100000 = x / 25).
    # Equal dominant shares: x_a / 100 = x_b / 25 -> x_a = 4 x_b; bytes: 100 x_a + 4000 x_b <= 1e5,
    # messages: x_a + x_b <= 100 -> 5 x_b <= 100 -> x_b = 20, x_a = 80 (bytes 8000 + 80000 = 88 kB).
    a = dominant_fair([1000, 1000], [100, 4000], 100, 100_000)
    assert a.shares == pytest.approx((80, 20)) and a.tight == ("messages",)
    # b wants only 10: a takes the rest of the messages.
    assert dominant_fair([1000, 10], [100, 4000], 100, 100_000).shares == pytest.approx((90, 10))


def test_zero_capacity_and_zero_demand() -> None:
    assert dominant_fair([5, 0], [10, 10], 0, UNLIMITED).shares == (0, 0)
    assert dominant_fair([5, 3], [10, 10], UNLIMITED, UNLIMITED).shares == (5, 3)


# -- LP cross-check ------------------------------------------------------------------------------

demand_st = st.one_of(st.just(0.0), st.floats(0.5, 5000, allow_nan=False))
size_st = st.sampled_from([1.0, 100.0, 1000.0, 4096.0, 65536.0])
quota_st = st.one_of(st.just(UNLIMITED), st.floats(1, 20000, allow_nan=False))
bytes_quota_st = st.one_of(st.just(UNLIMITED), st.floats(1000, 5e7, allow_nan=False))


@st.composite
def problems(draw):
    n = draw(st.integers(1, 7))
    return (draw(st.lists(demand_st, min_size=n, max_size=n)), draw(st.lists(size_st, min_size=n, max_size=n)),
            draw(quota_st), draw(bytes_quota_st))


def _close(got, want, scale: float) -> None:
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-5, abs=1e-6 * scale), (got, want)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=3), st.integers(0, 12))
def test_single_dimension_matches_brute_force(demands, capacity) -> None:
    # Scaled by 6 (= lcm(1, 2, 3)) every max-min fair split of integers is integral, so trying
    # every integer allocation and keeping the leximin-best (largest sorted vector) finds it.
    import itertools

    d = [6 * v for v in demands]
    c = 6 * capacity
    best = max((x for x in itertools.product(*(range(v + 1) for v in d)) if sum(x) <= c), key=sorted)
    assert max_min_fair(c, [float(v) for v in d]) == pytest.approx(list(best), abs=1e-9)
