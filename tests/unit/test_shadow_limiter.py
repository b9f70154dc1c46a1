"""Shadow mode in the limiter: a shadowed group decides every ask as an enforcing twin would,
admits it anyway, and counts apart what would have been throttled."""

from __future__ import annotations

import random

from rgd.config.groups import ResourceGroup
from rgd.limiting.limiter import Limiter
from tests.support.fake_clock import FakeClock


def test_shadow_decides_like_its_enforcing_twin_and_admits_everything():
    clock = FakeClock()
    limiter = Limiter(clock)
    shadow = ResourceGroup("shadowed", publish_msgs=50.0, publish_bytes=20_000.0, shadow_mode=True)
    twin = ResourceGroup("twin", publish_msgs=50.0, publish_bytes=20_000.0)
    rng = random.Random(45)
    sent = sent_bytes = 0
    for _ in range(2000):
        clock.t += rng.expovariate(200.0)  # ~4x the rate
        n, b = rng.randint(1, 3), rng.randint(0, 500)
        ds = limiter.acquire(shadow, "publish", n, b, "acme/a")
        dt = limiter.acquire(twin, "publish", n, b, "acme/b")
        assert (ds.allowed, ds.reason, ds.retry_after_s) == (dt.allowed, dt.reason, dt.retry_after_s)
        sent += n
        sent_bytes += b
    s, t = limiter.states[("shadowed", "publish")], limiter.states[("twin", "publish")]
    assert t.total_throttled_messages > 0.5 * sent  # the twin did throttle
    assert s.total_admitted_messages == sent and s.total_admitted_bytes == sent_bytes
    assert s.total_throttled_messages == 0 and not s.throttled_events
    assert s.total_shadow_throttled_messages == t.total_throttled_messages
    assert s.total_shadow_throttled_bytes == t.total_throttled_bytes
    assert s.shadow_events == t.throttled_events
    tick = limiter.collect()[("shadowed", "publish")].counters
    assert tick.admitted_messages == sent and tick.shadow_throttled_messages == t.total_throttled_messages


def test_shadow_all_shadows_every_group():
    limiter = Limiter(FakeClock())
    limiter.shadow_all = True
    blocked = ResourceGroup("blocked", publish_msgs=0.0)
    d = limiter.acquire(blocked, "publish", 1, 0, "acme/a")
    assert not d.allowed and d.reason == "message_rate"
    st = limiter.states[("blocked", "publish")]
    assert st.total_admitted_messages == 1 and st.shadow_events == {"message_rate": 1}


def test_shadow_counts_cross_the_process_link():
    """`--cluster-process`: the serving process decides; its shadow counts reach the cluster
    process's mirror (which serves /metrics and builds the reports) exactly once."""
    from rgd.daemon.limiter_link import MirrorLimiter, ServingLimiter

    clock = FakeClock()
    serving, mirror = ServingLimiter(clock), MirrorLimiter(clock)
    serving.initial_fraction = 1.0
    group = ResourceGroup("gold", publish_msgs=10.0, shadow_mode=True)
    groups = {"gold": group}
    for _round in range(3):
        for _ in range(30):
            clock.t += 0.01
            serving.acquire(group, "publish", 1, 10, "acme/a")
        mirror.absorb(serving.take_counts(), groups)
    s, m = serving.states[("gold", "publish")], mirror.states[("gold", "publish")]
    assert s.total_shadow_throttled_messages > 0
    assert (m.total_shadow_throttled_messages, m.total_shadow_throttled_bytes, m.shadow_events) == (
        s.total_shadow_throttled_messages, s.total_shadow_throttled_bytes, s.shadow_events)
    assert m.total_admitted_messages == 90 and m.total_throttled_messages == 0
    assert mirror.collect()[("gold", "publish")].counters.shadow_throttled_messages == s.total_shadow_throttled_messages
