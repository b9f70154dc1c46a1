"""What the bucket size promises, checked against window sums of what a limiter admitted.

The oracle is arithmetic on the admitted log, not the bucket's own code: between any
two instants s <= e a bucket of rate r and capacity c = r x burst can have given out at
most what it held at s (<= c) plus its refill (<= r x (e - s)) plus the debt it may end
in (an ask larger than the bucket passes on a full bucket: at most n_max - c). So for
every window: admitted <= c + r x (e - s) + max(0, n_max - c). With the default 0.1 s
bucket and limits summing to a group's quota, the cluster's 1-second windows stay within
110 % of the quota (sim/README.md), whatever the asks look like. The capacity is the
limiter's own, bucket_seconds: at least ten messages (rgd/limiting/limiter.py), so a share below
100 msg/s saves more than 0.1 s of itself and the bound says so.

And it must not starve: asks arriving densely (none larger than the bucket) take the
rate minus at most one bucket and one ask over any long window.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_burst_window.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.config.groups import ResourceGroup
from rgd.limiting.limiter import Limiter, bucket_seconds
from rgd.limiting.token_bucket import DEFAULT_BURST_SECONDS


def _admitted_log(rate: float, burst: float, asks: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """Drive a Limiter (the daemon's, with its inlined hot path) through (time, size) asks."""
    group = ResourceGroup(name="g", publish_msgs=rate)
    limiter = Limiter(lambda: 0.0, burst)
    out = []
    for t, n in asks:
        if limiter.acquire(group, "publish", n, 0, "t/ns", now=t).allowed:
            out.append((t, n))
    return out


def _worst_window(log: list[tuple[float, int]], width: float) -> float:
    """Largest sum admitted within any closed window [s, s + width] (s at an admission)."""
    worst = 0.0
    j = 0
    total = 0.0
    for i, (t, _) in enumerate(log):  # slide the window's start over every admission
        while j < len(log) and log[j][0] <= t + width + 1e-12:
            total += log[j][1]
            j += 1
        worst = max(worst, total)
        total -= log[i][1]
    return worst


asks_strategy = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=0.2, allow_nan=False), st.integers(min_value=1, max_value=40)),
    min_size=1, max_size=300,
)


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
