"""The limiter split over two processes (rgd/daemon/limiter_link.py) against one plain Limiter.

The reference is `Limiter` itself, the single-process daemon's: the same asks and the
same node operations, applied once to a plain Limiter and once to a ServingLimiter
whose counts are handed over to a MirrorLimiter at random points (and whose limits
come back at once), must decide every ask alike and leave the mirror with the plain
limiter's counters, namespaces, topics and limits.
"""

from __future__ import annotations

import pickle

import pytest
from hypothesis import strategies as st

from rgd.config.groups import ResourceGroup
from rgd.daemon.limiter_link import KindCounts, MirrorLimiter, ServingLimiter, initial_fraction
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
              st.sampled_from([None, Place(1, 0.0, 1.0, 0, 0.0, 1.0, 0), Place(3, 0.0, 1.0, 1, 0.0, 1.0, 0),
                               Place(3, 0.8, 2.0, 2, 1.3, 1.9, 1)])),
    st.tuples(st.just("lease"), st.sampled_from([0.0, 0.2, 1.0, INF])),  # the node's lease ends this much later
    st.tuples(st.just("collect"),),
    st.tuples(st.just("hand_over"),),
)


def test_counts_between_collects_reach_the_next_collect_once() -> None:
    clock = Clock()
    serving, mirror = _pair(clock)
    serving.acquire(GROUPS["a"], "publish", 1, 100, "t/x", "persistent://t/x/one")
    _hand_over(serving, mirror)
    clock.now += 1.0  # the bucket refills
    assert serving.acquire(GROUPS["a"], "publish", 2, 200, "t/y").allowed  # after the hand-over: the next collect's
    first = mirror.collect()[("a", "publish")]
    assert (first.counters.admitted_messages, first.namespaces, first.topics) == (1, frozenset({"t/x"}), 1)
    _hand_over(serving, mirror)
    second = mirror.collect()[("a", "publish")]
    assert (second.counters.admitted_messages, second.counters.admitted_bytes, second.namespaces) == (
        2, 200, frozenset({"t/y"}))
    _hand_over(serving, mirror)
    assert mirror.collect()[("a", "publish")].counters.idle  # nothing counted twice


def test_counts_handed_over_a_slice_at_a_time_lose_nothing() -> None:
    clock = Clock()
    serving, mirror = _pair(clock)
    for i in range(7):
        serving.record_usage(GROUPS["a" if i % 2 else "b"], "publish" if i < 4 else "dispatch", 1, 10, f"t/{i}")
    assert serving.pending == 4  # a and b, publish and dispatch
    slices = []
    while serving.pending:
        slices.append(serving.take_counts(limit=2))
    assert [len(x) for x in slices] == [2, 2]
    for part in slices:
        mirror.absorb(part, GROUPS)
    collected = mirror.collect()
    assert sum(c.counters.admitted_messages for c in collected.values()) == 7
    assert set().union(*(c.namespaces for c in collected.values())) == {f"t/{i}" for i in range(7)}


def test_the_time_recorded_usage_covers_reaches_the_mirror_as_one_limiter_has_it() -> None:
    """Records handed over in several slices: the mirror's bucket covers from the record before
    the first of them to the last, as a plain limiter's does (rgd.limiting.limiter.KindState.recorded_span),
    and from the node's mark on, the next records' span begins at the last one before it."""
    clock = Clock()
    serving, mirror = _pair(clock)
    plain = Limiter(clock, 0.1, 10.0, start_seconds=0.05)
    for limiter in (serving, plain):
        limiter.record_usage(GROUPS["b"], "dispatch", 5, 50, "t/x")  # born now: covers nothing
    _hand_over(serving, mirror)
    for at, n in [(100.4, 3), (101.0, 2), (101.9, 4)]:
        clock.now = at
        for limiter in (serving, plain):
            limiter.record_usage(GROUPS["b"], "dispatch", n, 10 * n, "t/x")
        _hand_over(serving, mirror)
    key = ("b", "dispatch")
    assert mirror.states[key].recorded_span == plain.states[key].recorded_span == pytest.approx(1.9)
    for limiter in (mirror, plain):  # the node marks the bucket (rgd.cluster.node)
        limiter.states[key].recorded_from = None
    clock.now = 102.5
    for limiter in (serving, plain):
        limiter.record_usage(GROUPS["b"], "dispatch", 1, 10, "t/x")
    _hand_over(serving, mirror)
    assert mirror.states[key].recorded_span == plain.states[key].recorded_span == pytest.approx(0.6)


def test_a_new_bucket_starts_with_the_initial_fraction_until_the_node_sets_its_limit() -> None:
    clock = Clock()
    serving = ServingLimiter(clock, 0.1, 10.0)
    serving.apply([("initial", 0.25)], GROUPS)
    serving.acquire(GROUPS["b"], "dispatch", 1, 10, "t/x")
    assert serving.states[("b", "dispatch")].limit == (7.5, INF)
    assert serving.limit_in_force(GROUPS["b"], "publish") == (2.5, INF)  # not asked for yet: the same rule
    # The node's own first limit for the bucket: its state is made when the counts arrive.
    mirror = MirrorLimiter(clock, 0.1, 10.0, initial_limits=lambda g, k: (12.0, INF))
    mirror.take_ops()
    mirror.absorb(serving.take_counts(), GROUPS)
    serving.apply(mirror.take_ops(), GROUPS)
    assert serving.states[("b", "dispatch")].limit == (12.0, INF)


def test_a_mirrors_new_bucket_is_born_when_its_first_counts_arrive_as_a_limiters_is() -> None:
    """The node measures a new group's first demand over the window since its bucket's birth:
    a mirror's bucket born at 0 made that window the clock's whole reading, and the first
    demand read as next to nothing."""
    clock = Clock()
    clock.now = 500.0
    serving = ServingLimiter(clock, 0.1, 10.0)
    serving.acquire(GROUPS["b"], "dispatch", 1, 10, "t/x")
    mirror = MirrorLimiter(clock, 0.1, 10.0)
    clock.now = 500.05
    mirror.absorb(serving.take_counts(), GROUPS)
    assert mirror.states[("b", "dispatch")].born == 500.05


def test_the_mirror_sends_a_limit_only_when_it_changes_and_drops_counts_of_deleted_groups() -> None:
    clock = Clock()
    mirror = MirrorLimiter(clock, 0.1, 10.0)
    mirror.set_limit(GROUPS["a"], "publish", 10.0, 100.0)
    mirror.take_ops()
    mirror.set_limit(GROUPS["a"], "publish", 10.0, 100.0)
    assert mirror.take_ops() == []
    mirror.absorb([KindCounts("gone", "publish", 5, 5, 0, 0, 1, None, ("t/x",), None, 0, 0, None, None, None)], GROUPS)
    assert ("gone", "publish") not in mirror.states
    mirror.forget("a")
    assert mirror.take_ops() == [("forget", "a")]


def test_operations_for_groups_the_serving_side_does_not_know_are_skipped_and_unknown_ones_refused() -> None:
    serving = ServingLimiter(Clock())
    serving.apply([("limit", "nope", "publish", 1.0, 1.0, None)], GROUPS)
    assert serving.states == {}
    with pytest.raises(ValueError, match="unknown operation 'bogus'"):
        serving.apply([("bogus",)], GROUPS)


def test_the_serving_side_refuses_from_the_lease_end_the_node_set_without_hearing_more() -> None:
    clock = Clock()
    serving, mirror = _pair(clock)
    mirror.set_limit(GROUPS["a"], "publish", 40.0, INF)
    mirror.lease_until = clock.now + 0.5
    mirror.lease_until = clock.now + 0.5  # set at every recompute: sent when it moves
    ops = mirror.take_ops()
    assert ops[-1] == ("lease_until", clock.now + 0.5) and sum(op[0] == "lease_until" for op in ops) == 1
    serving.apply(ops, GROUPS)
    assert serving.acquire(GROUPS["a"], "publish", 1, 10, "t/x").allowed
    clock.now += 0.5  # the cluster half says nothing more (a stalled loop)
    assert not serving.acquire(GROUPS["a"], "publish", 1, 10, "t/x").allowed


def test_initial_fraction_reads_the_nodes_share_of_a_group_nobody_reported() -> None:
    assert initial_fraction(lambda g: {"publish": (g.publish_msgs / 3, INF)}) == pytest.approx(1 / 3)
    assert initial_fraction(lambda g: {"publish": (INF, INF)}) == 1.0
