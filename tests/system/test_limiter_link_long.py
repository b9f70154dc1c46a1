"""The limiter split over two processes (rgd/daemon/limiter_link.py) against one plain Limiter.

The reference is `Limiter` itself, the single-process daemon's: the same asks and the
same node operations, applied once to a plain Limiter and once to a ServingLimiter
whose counts are handed over to a MirrorLimiter at random points (and whose limits
come back at once), must decide every ask alike and leave the mirror with the plain
limiter's counters, namespaces, topics and limits.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_limiter_link.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.limiting.limiter import Limiter, full_quota
from tests.unit.test_limiter_link import GROUPS, Clock, _hand_over, _pair, step


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=60))
def test_a_limiter_split_over_two_processes_decides_and_counts_as_one(steps: list[tuple]) -> None:
    clock = Clock()
    plain = Limiter(clock, 0.1, 10.0, initial_limits=full_quota, start_seconds=0.05)
    serving, mirror = _pair(clock)
    plain_collected: dict[tuple[str, str], list[int]] = {}
    mirror_collected: dict[tuple[str, str], list[int]] = {}

    def collect(lim: Limiter, into: dict[tuple[str, str], list[int]]) -> None:
        for key, c in lim.collect().items():
            row = into.setdefault(key, [0, 0, 0, 0])
            for i, v in enumerate((c.counters.admitted_messages, c.counters.admitted_bytes,
                                   c.counters.throttled_messages, c.counters.throttled_bytes)):
                row[i] += v

    for s in steps:
        what = s[0]
        if what == "ask":
            (g, kind), m, b, ns, topic = s[1:]
            want = plain.acquire(GROUPS[g], kind, m, b, ns, topic)
            got = serving.acquire(GROUPS[g], kind, m, b, ns, topic)
            assert got == want
        elif what == "usage":
            (g, kind), m, b, ns, topic = s[1:]
            plain.record_usage(GROUPS[g], kind, m, b, ns, topic)
            serving.record_usage(GROUPS[g], kind, m, b, ns, topic)
        elif what == "wait":
            clock.now += s[1]
        elif what == "limit":
            (g, kind), m, b, place = s[1:]
            st_plain = plain.states.get((g, kind))
            if st_plain is None or (st_plain.limit, st_plain.place) != ((m, b), place):  # unchanged: not sent
                plain.set_limit(GROUPS[g], kind, m, b, place)
            _hand_over(serving, mirror)  # the node sets limits on its own state, counts folded first
            mirror.set_limit(GROUPS[g], kind, m, b, place)
            serving.apply(mirror.take_ops(), GROUPS)
        elif what == "lease":
            plain.lease_until = mirror.lease_until = clock.now + s[1]
            serving.apply(mirror.take_ops(), GROUPS)
        elif what == "collect":
            collect(plain, plain_collected)
            _hand_over(serving, mirror)
            collect(mirror, mirror_collected)
        else:
            _hand_over(serving, mirror)
    _hand_over(serving, mirror)
    collect(plain, plain_collected)
    collect(mirror, mirror_collected)
    assert mirror_collected == plain_collected
    assert set(mirror.states) == set(plain.states)
    for key, want in plain.states.items():
        got = mirror.states[key]
        assert (got.total_admitted_messages, got.total_admitted_bytes, got.total_throttled_messages,
                got.total_throttled_bytes, got.total_events) == (
            want.total_admitted_messages, want.total_admitted_bytes, want.total_throttled_messages,
            want.total_throttled_bytes, want.total_events)
        assert got.throttled_events == want.throttled_events
        assert serving.states[key].limit == want.limit
