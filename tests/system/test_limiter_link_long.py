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

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.config.groups import ResourceGroup
from rgd.daemon.limiter_link import MirrorLimiter, ServingLimiter
from rgd.limiting.limiter import Limiter, Place, full_quota
from rgd.limiting.token_bucket import INF

GROUPS = {
    "a": ResourceGroup("a", publish_msgs=50.0, publish_bytes=20_000.0),
    "b": ResourceGroup("b", publish_msgs=10.0, dispatch_msgs=30.0),
}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _pair(clock: Clock) -> tuple[ServingLimiter, MirrorLimiter]:
    serving = ServingLimiter(clock, 0.1, 10.0, start_seconds=0.05)
    serving.initial_fraction = 1.0
    mirror = MirrorLimiter(clock, 0.1, 10.0, initial_limits=full_quota, start_seconds=0.05)
    return serving, mirror


def _hand_over(serving: ServingLimiter, mirror: MirrorLimiter) -> None:
    counts = pickle.loads(pickle.dumps(serving.take_counts()))  # as the link carries them
    mirror.absorb(counts, GROUPS)
    serving.apply(pickle.loads(pickle.dumps(mirror.take_ops())), GROUPS)


step = st.one_of(
    st.tuples(st.just("ask"), st.sampled_from([("a", "publish"), ("b", "publish"), ("b", "dispatch")]),
              st.integers(0, 8), st.integers(0, 3000), st.sampled_from(["t/x", "t/y"]),
              st.sampled_from([None, "persistent://t/x/one"])),
    st.tuples(st.just("usage"), st.sampled_from([("a", "publish"), ("b", "dispatch")]), st.integers(0, 20),
              st.integers(0, 9000), st.just("t/z"), st.just(None)),
    st.tuples(st.just("wait"), st.floats(0.0, 0.5)),
    st.tuples(st.just("limit"), st.sampled_from([("a", "publish"), ("b", "publish"), ("b", "dispatch")]),
              st.floats(0.0, 80.0), st.sampled_from([INF, 5000.0, 40_000.0]),
              st.sampled_from([None, Place(0, 1), Place(0, 3), Place(2, 3)])),
    st.tuples(st.just("drain"), st.sampled_from([("a", "publish"), ("b", "publish")]), st.booleans(), st.booleans()),
    st.tuples(st.just("collect"),),
    st.tuples(st.just("hand_over"),),
)


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
        elif what == "drain":
            (g, kind), dm, db = s[1:]
            plain.drain(GROUPS[g], kind, dm, db)
            _hand_over(serving, mirror)
            mirror.drain(GROUPS[g], kind, dm, db)
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
