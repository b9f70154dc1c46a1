import math

from rgd.groups import ResourceGroup
from rgd.limiter import REASON_BYTES, REASON_DEBT, REASON_MESSAGES, Limiter


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_tighter_limit_wins_and_denial_takes_nothing():
    clock = Clock()
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
    clock = Clock()
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
    clock = Clock()
    lim = Limiter(clock, burst_seconds=1.0)
    g = ResourceGroup("g", dispatch_msgs=10)
    lim.record_usage(g, "dispatch", 30, 0, "t/ns")  # 10 in bucket -> -20
    d = lim.acquire(g, "dispatch", 1, 0, "t/ns")
    assert not d.allowed and d.reason == REASON_DEBT
    clock.t = 2.0  # +20 tokens -> 0
    assert not lim.acquire(g, "dispatch", 1, 0, "t/ns").allowed
    clock.t = 2.1
    assert lim.acquire(g, "dispatch", 1, 0, "t/ns").allowed


def test_set_limit_at_runtime_keeps_bucket():
    clock = Clock()
    lim = Limiter(clock, burst_seconds=1.0)
    g = ResourceGroup("g", publish_msgs=100)
    lim.acquire(g, "publish", 100, 0, "t/ns")
    lim.set_limit(g, "publish", 50, math.inf)
    assert lim.states[("g", "publish")].messages.tokens == 0
    assert not lim.acquire(g, "publish", 1, 0, "t/ns").allowed
