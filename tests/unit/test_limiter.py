import math

import pytest

from rgd.api.requests import Ask
from rgd.config.groups import ResourceGroup
from rgd.limiting.limiter import (
    BURST_FLOOR_MAX_SECONDS,
    BURST_FLOOR_MESSAGES,
    REASON_BYTES,
    REASON_DEBT,
    REASON_MESSAGES,
    Limiter,
    bucket_seconds,
    largest_bucket_seconds,
)
from tests.support.fake_clock import FakeClock


def test_tighter_limit_wins_and_denial_takes_nothing():
    clock = FakeClock(0.0)
    lim = Limiter(clock, burst_seconds=1.0)
    g = ResourceGroup("g", publish_msgs=100, publish_bytes=1000)
    d = lim.acquire(g, "publish", 10, 900, "t/ns")
    assert d.allowed and d.remaining_messages == 90 and d.remaining_bytes == 100
    d = lim.acquire(g, "publish", 1, 200, "t/ns")
    assert not d.allowed and d.reason == REASON_BYTES
    st = lim.states[("g", "publish")]
    assert st.messages.tokens == 90  # untouched by the denial
    assert math.isclose(d.retry_after_s, 0.1)


def test_message_reason_and_counters():
    clock = FakeClock(0.0)
    lim = Limiter(clock, burst_seconds=1.0)
    g = ResourceGroup("g", publish_msgs=5)
    for _ in range(5):
        assert lim.acquire(g, "publish", 1, 10, "t/a", topic="x").allowed
    d = lim.acquire(g, "publish", 1, 10, "t/b", topic="y")
    assert not d.allowed and d.reason == REASON_MESSAGES
    c = lim.collect()[("g", "publish")]
    assert (c.counters.admitted_messages, c.counters.throttled_messages) == (5, 1)
    assert c.counters.admitted_bytes == 50 and c.counters.throttled_bytes == 10
    assert c.namespaces == {"t/a", "t/b"} and c.topics == 2
    assert lim.collect()[("g", "publish")].counters.idle  # reset


def test_usage_creates_debt_that_acquires_repay():
    clock = FakeClock(0.0)
    lim = Limiter(clock, burst_seconds=1.0)
    g = ResourceGroup("g", dispatch_msgs=10)
    lim.record_usage(g, "dispatch", 30, 0, "t/ns")  # 10 in bucket -> -20
    d = lim.acquire(g, "dispatch", 1, 0, "t/ns")
    assert not d.allowed and d.reason == REASON_DEBT
    clock.t = 2.0  # +20 tokens -> 0
    assert not lim.acquire(g, "dispatch", 1, 0, "t/ns").allowed
    clock.t = 2.1
    assert lim.acquire(g, "dispatch", 1, 0, "t/ns").allowed


def test_recorded_usage_covers_the_time_since_the_record_before_it():
    """A record comes after the fact: it covers the time since the one before it (the first,
    since the bucket's birth). Asks cover nothing: they are counted when they happen."""
    clock = FakeClock(10.0)
    lim = Limiter(clock, burst_seconds=1.0)
    g = ResourceGroup("g", publish_msgs=100)
    lim.acquire(g, "publish", 1, 10, "t/ns")  # born at 10
    st = lim.states[("g", "publish")]
    assert st.recorded_span == 0.0
    clock.t = 12.5
    lim.record_usage(g, "publish", 40, 400, "t/ns")
    assert st.recorded_span == 2.5  # since the birth
    clock.t = 13.0
    lim.acquire(g, "publish", 1, 10, "t/ns")
    assert st.recorded_span == 2.5
    st.recorded_from = None  # the node marked the bucket (a report of its window)
    assert st.recorded_span == 0.0
    clock.t = 13.5
    lim.record_usage(g, "publish", 40, 400, "t/ns")
    assert st.recorded_span == 1.0  # since the record at 12.5, before the mark
    clock.t = 13.75
    lim.record_usage(g, "publish", 10, 100, "t/ns")
    assert st.recorded_span == 1.25  # both records since the mark: from 12.5 to 13.75


def test_set_limit_at_runtime_keeps_bucket():
    clock = FakeClock(0.0)
    lim = Limiter(clock, burst_seconds=1.0)
    g = ResourceGroup("g", publish_msgs=100)
    lim.acquire(g, "publish", 100, 0, "t/ns")
    lim.set_limit(g, "publish", 50, math.inf)
    assert lim.states[("g", "publish")].messages.tokens == 0
    assert not lim.acquire(g, "publish", 1, 0, "t/ns").allowed


# -- the inlined hot path equals the plain TokenBucket algorithm --------------------------

from hypothesis import strategies as st  # noqa: E402

from rgd.limiting.token_bucket import INF, TokenBucket  # noqa: E402

_rates = st.sampled_from([INF, 0.0, 1.0, 7.5, 100.0, 1e6])
_steps = st.lists(
    st.tuples(st.floats(0.0, 3.0), st.integers(0, 300), st.integers(0, 5000), st.booleans()),
    min_size=1, max_size=40,
)


class _RefWindow:
    """A small share's 1-second window, written out as a list of (time, amount): what the
    limiter promises (README, rgd/limiting/second_window.py), not its bookkeeping."""

    def __init__(self, cap: float) -> None:
        self.cap = cap
        self.log: list[tuple[float, float]] = []

    def _inside(self, now: float) -> list[tuple[float, float]]:
        return [(t, n) for t, n in self.log if t > now - 1.0]

    def fits(self, n: float, now: float) -> bool:
        held = sum(a for _, a in self._inside(now))
        return held + n <= self.cap or held <= 0

    def wait(self, n: float, now: float) -> float:
        if self.fits(n, now):
            return 0.0
        inside = self._inside(now)
        held = sum(a for _, a in inside)
        need = held if n > self.cap else held + n - self.cap
        freed = 0.0
        for t, a in inside:  # the oldest leave first
            freed += a
            if freed >= need - 1e-9:
                return t + 1.0 - now
        raise AssertionError("unreachable")


def _ref_window(rate: float, burst: float) -> "_RefWindow | None":
    """Where the ten-message floor (at most a second) makes the message bucket larger than
    `burst`, its windows hold at most (1 + burst) s of the rate, or the rate plus one
    message if that is more."""
    if 0 < rate < INF and min(1.0, 10.0 / rate) > burst:
        return _RefWindow(max(rate * (1.0 + burst), rate + 1.0))
    return None


def _reference(mb: TokenBucket, bb: TokenBucket, win: "_RefWindow | None", messages: int, nbytes: int,
               now: float):
    """Limiter.acquire spelled with TokenBucket's own methods, no inlining."""
    mb.refill(now)
    bb.refill(now)
    short_m, short_b = mb.shortfall(messages), bb.shortfall(nbytes)
    if short_m == 0 and short_b == 0 and (win is None or win.fits(messages, now)):
        mb.take(messages)
        bb.take(nbytes)
        if win is not None and messages > 0:
            win.log.append((now, messages))
        return True, 0.0
    wait_m = mb.wait_seconds(short_m)
    if win is not None:
        wait_m = max(wait_m, win.wait(messages, now))
    return False, max(wait_m, bb.wait_seconds(short_b))


def test_a_cut_keeps_saved_tokens_in_seconds_not_in_tokens():
    """A quota cut 10x: a bucket 30 % full stays 30 % full of the new capacity (here 60 of 200
    tokens becomes 6 of 20), so the old limit's burst cannot be spent after the cut."""
    b = TokenBucket.new(200.0, now=0.0, burst_seconds=1.0)
    b.tokens = 60.0
    b.set_rate(20.0, now=0.0)
    assert b.tokens == 6.0 and b.capacity == 20.0
    b.tokens = -50.0  # debt is kept as it is: it was incurred and must be paid back
    b.set_rate(10.0, now=0.0)
    assert b.tokens == -50.0
    b.tokens = 4.0  # a raise keeps the tokens; the new rate refills them
    b.set_rate(100.0, now=0.0)
    assert b.tokens == 4.0
    b.refill(0.5)
    assert b.tokens == 54.0


def test_retry_after_never_exceeds_the_next_recomputation_unless_the_debt_needs_longer() -> None:
    from rgd.limiting.limiter import capped_retry

    # share 2 msg/s, 20 messages short: 10 s at the share; the limit is recomputed in 0.7 s
    assert capped_retry(10.0, 0.7, 20.0, 0.0, 100.0, -1.0) == 0.7
    # a debt of 500 messages needs 5 s even at the full quota of 100/s
    assert capped_retry(250.0, 0.7, 500.0, 0.0, 100.0, -1.0) == 5.0
    # bytes the longer: 3e6 bytes short on a 1e6 B/s quota
    assert capped_retry(60.0, 0.5, 1.0, 3e6, 100.0, 1e6) == 3.0
    assert capped_retry(0.2, 0.7, 1.0, 0.0, 100.0, -1.0) == 0.2  # shorter than the recompute: as is
    # a share of 0 in a dimension the group does not limit (a strategy that starts from
    # nothing): wait for the recompute, not forever (this said inf)
    assert capped_retry(math.inf, 0.7, 0.0, 5.0, -1.0, 1e6) == 0.7
    assert capped_retry(math.inf, 0.7, 1.0, 0.0, -1.0, -1.0) == 0.7
    assert capped_retry(math.inf, 0.7, 1.0, 0.0, 0.0, -1.0) == math.inf  # a zero quota never pays


def test_limiter_caps_retry_after_at_the_recompute_time() -> None:
    clock = FakeClock(0.0)
    lim = Limiter(clock, burst_seconds=1.0)
    g = ResourceGroup("g", publish_msgs=1000)
    lim.set_limit(g, "publish", 2.0, math.inf)  # a 2 msg/s share of a 1000 msg/s group
    assert lim.acquire(g, "publish", 2, 0, "t/ns").allowed
    assert lim.acquire(g, "publish", 2, 0, "t/ns").retry_after_s == 1.0  # uncapped: 2 tokens at 2/s
    lim.recompute_at = clock() + 0.3
    assert lim.acquire(g, "publish", 2, 0, "t/ns").retry_after_s == 0.3


def test_past_the_lease_nothing_limited_is_admitted_until_the_node_moves_it() -> None:
    """From `lease_until` on the limiter refuses on its own clock, as the closed limits the
    node sets at its next recompute would (rate 0 where limited), and takes nothing: a later
    lease lets the same limits admit again."""
    clock = FakeClock(0.0)
    lim = Limiter(clock, burst_seconds=1.0)
    g = ResourceGroup("g", publish_msgs=100, publish_bytes=-1)
    open_group = ResourceGroup("open")  # nothing limited
    lim.set_limit(g, "publish", 50.0, math.inf)
    lim.recompute_at = 0.6
    lim.lease_until = 0.5
    assert lim.acquire(g, "publish", 1, 10, "t/ns").allowed
    clock.t = 0.5
    refused = lim.acquire(g, "publish", 1, 10, "t/ns")
    assert not refused.allowed and refused.reason == REASON_MESSAGES
    assert refused.retry_after_s == pytest.approx(0.1)  # the next recompute, as for a limit of 0
    assert refused.remaining_messages == 50.0  # refilled to the brim, nothing taken
    assert lim.limit_in_force(g, "publish") == (50.0, math.inf)  # the node's to change
    assert lim.acquire(g, "publish", 0, 10, "t/ns").allowed  # nothing limited asked for
    assert lim.acquire(open_group, "publish", 5, 10, "t/ns").allowed
    batch = lim.acquire_batch(g, "publish", [Ask("t/ns", "publish", 1, 10)] * 3, clock())
    assert batch.admitted == 0 and not any(d.allowed for d in batch.rest)
    assert lim.states[("g", "publish")].tick.throttled_messages == 4
    lim.lease_until = 1.5  # the node recomputed under a lease that holds
    assert lim.acquire(g, "publish", 1, 10, "t/ns").allowed


def test_bucket_seconds_floor_in_messages_and_its_cap() -> None:
    assert bucket_seconds(0.1, 1000.0, 1.0) == 0.1  # 100 messages in 0.1 s: no floor needed
    assert bucket_seconds(0.1, 100.0, 1.0) == pytest.approx(0.1)  # exactly ten messages
    assert bucket_seconds(0.1, 50.0, 1.0) == pytest.approx(BURST_FLOOR_MESSAGES / 50.0)  # 0.2 s
    assert bucket_seconds(0.1, 3.0, 1.0) == BURST_FLOOR_MAX_SECONDS  # ten would be 3.3 s: capped
    assert bucket_seconds(0.1, 100_000.0, 2_000.0) == pytest.approx(0.2)  # bytes: 10 x 2 kB at 100 kB/s
    assert bucket_seconds(0.1, 10_000.0, 2_000.0) == BURST_FLOOR_MAX_SECONDS  # 2 s at 10 kB/s: capped
    assert bucket_seconds(0.1, 1e6, 2_000.0) == 0.1
    assert bucket_seconds(0.1, 1e5, 0.0) == 0.1  # mean message not known yet
    assert bucket_seconds(0.1, math.inf, 1.0) == 0.1 and bucket_seconds(0.1, 0.0, 1.0) == 0.1
    assert bucket_seconds(1.5, 5.0, 1.0) == 1.5  # never smaller than what was configured
    # The bound peers vet reports against covers every bucket the floor can make.
    sizes = [bucket_seconds(b, r, u) for b in (0.1, 1.5) for r in (0.5, 3.0, 1e3, 1e6) for u in (0.0, 1.0, 1e4)]
    assert max(sizes) == largest_bucket_seconds(1.5) == 1.5
    assert max(bucket_seconds(0.1, r, 1.0) for r in (0.5, 3.0, 1e3)) == largest_bucket_seconds(0.1) == 1.0


def test_a_small_share_admits_a_clump_of_messages_it_can_pay_for() -> None:
    """A 20 msg/s share with the default 0.1 s burst held two messages; a clump of five
    arriving together after a quiet half second was mostly denied although the daemon
    was under its share. The floor gives it room for ten."""
    clock = FakeClock(0.0)
    lim = Limiter(clock)
    g = ResourceGroup("g", publish_msgs=1000)
    lim.set_limit(g, "publish", 20.0, math.inf)
    st = lim.states[("g", "publish")]
    assert st.messages.capacity == pytest.approx(BURST_FLOOR_MESSAGES)
    clock.t = 1.0
    assert all(lim.acquire(g, "publish", 1, 0, "t/ns").allowed for _ in range(5))
    # and it stays a bound: no more than the floor plus the rate in any second
    clock.t = 2.0
    admitted = sum(lim.acquire(g, "publish", 1, 0, "t/ns").allowed for _ in range(100))
    assert admitted == 10


def test_the_bytes_bucket_floor_follows_the_groups_mean_message() -> None:
    clock = FakeClock(0.0)
    lim = Limiter(clock)
    g = ResourceGroup("g", publish_msgs=-1, publish_bytes=1_000_000)
    for _ in range(4):
        assert lim.acquire(g, "publish", 1, 5_000, "t/ns").allowed  # 5 kB messages
    lim.set_limit(g, "publish", math.inf, 100_000.0)  # 0.1 s would be 10 kB: two messages
    assert lim.states[("g", "publish")].bytes.capacity == pytest.approx(50_000.0)  # ten of them
