"""What the bucket size promises, checked against window sums of what a limiter admitted.

What the properties hold and why: the docstring of tests/unit/test_burst_window.py.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_burst_window.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.limiting.limiter import bucket_seconds
from rgd.limiting.token_bucket import DEFAULT_BURST_SECONDS
from tests.unit.test_burst_window import _admitted_log, _worst_window, asks_strategy


@settings(max_examples=300, deadline=None)
@given(
    rate=st.floats(min_value=1.0, max_value=2000.0, allow_nan=False),
    burst=st.sampled_from([DEFAULT_BURST_SECONDS, 0.05, 0.5, 1.0]),
    gaps=asks_strategy,
    width=st.sampled_from([0.05, 0.1, 0.5, 1.0]),
)
def test_no_window_admits_more_than_the_rate_plus_the_bucket(rate: float, burst: float,
                                                             gaps: list[tuple[float, int]], width: float) -> None:
    t = 0.0
    asks = []
    for gap, n in gaps:
        t += gap
        asks.append((t, n))
    log = _admitted_log(rate, burst, asks)
    cap = rate * bucket_seconds(burst, rate, 1.0)
    n_max = max(n for _, n in asks)
    bound = cap + rate * width + max(0.0, n_max - cap)
    assert _worst_window(log, width) <= bound + 1e-6


@settings(max_examples=100, deadline=None)
@given(
    rate=st.floats(min_value=20.0, max_value=2000.0, allow_nan=False),
    burst=st.sampled_from([DEFAULT_BURST_SECONDS, 0.5]),
    size=st.integers(min_value=1, max_value=5),
)
def test_dense_asks_take_the_rate(rate: float, burst: float, size: int) -> None:
    # Asks of `size` every 0.1 ms for 2 s: offered 10 000 x size per second, above any rate here.
    cap = rate * bucket_seconds(burst, rate, 1.0)
    if size > cap:  # an ask larger than the bucket is the full-bucket rule's case, below
        return
    asks = [(i / 10_000.0, size) for i in range(20_000)]
    admitted = sum(n for _, n in _admitted_log(rate, burst, asks))
    assert admitted >= rate * 2.0 - size - rate * 0.0001
    assert admitted <= rate * 2.0 + cap + 1e-6
