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
"""

from __future__ import annotations

from hypothesis import strategies as st

from rgd.config.groups import ResourceGroup
from rgd.limiting.limiter import Limiter
from rgd.limiting.token_bucket import DEFAULT_BURST_SECONDS, TokenBucket


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


def test_an_ask_larger_than_the_bucket_still_passes_at_the_rate() -> None:
    # 5 msg/s holds 5 messages (the ten-message floor, capped at a second); asks of 20 every
    # 10 ms pass on a full bucket into debt, one per 20/5 = 4 s: the rate, not zero.
    asks = [(i / 100.0, 20) for i in range(2000)]  # 20 s
    admitted = sum(n for _, n in _admitted_log(5.0, DEFAULT_BURST_SECONDS, asks))
    assert 5.0 * 20 - 20 <= admitted <= 5.0 * 20 + 20


def test_the_default_bucket_holds_a_tenth_of_a_second() -> None:
    assert DEFAULT_BURST_SECONDS == 0.1
    assert TokenBucket.new(300.0, now=0.0).capacity == 300.0 * 0.1
