"""The react's snapshot of the limiter's cumulative counters (ClusterNode._window_counts).

At PIP-82's scale a react ran 20 times a tick over 10 000 buckets, and reading every
bucket's five counters was most of an early report's cost; a snapshot now rereads only the
buckets the limiter counted since (`Limiter.counted`) while its set of buckets is as it
was (`Limiter.states_version`). Whatever the limiter did in between, the snapshot must be
the one a full reread gives: the expected counters here are read off the states directly,
one attribute at a time, not through the node's code."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rgd.cluster.node import ClusterNode, NodeConfig
from rgd.config.groups import KINDS, ResourceGroup
from rgd.daemon.limiter_link import MirrorLimiter
from tests.support.fake_clock import FakeClock, wall_ms

GROUPS = {f"g{i}": ResourceGroup(f"g{i}", publish_msgs=50, dispatch_msgs=80, replication_bytes=5000)
          for i in range(12)}


def full_reread(node: ClusterNode) -> np.ndarray:
    rows = [[st.total_admitted_messages, st.total_admitted_bytes, st.total_throttled_messages,
             st.total_throttled_bytes, st.total_events] for st in node.limiter.states.values()]
    return np.array(rows, dtype=np.int64).reshape(len(rows), 5)


def random_step(node: ClusterNode, rng: random.Random, clock: FakeClock, groups: dict[str, ResourceGroup]) -> None:
    """One thing a daemon's limiter does between two reacts."""
    limiter = node.limiter
    group = groups[rng.choice(sorted(groups))]
    kind = rng.choice(KINDS)
    what = rng.random()
    if isinstance(limiter, MirrorLimiter):
        if what < 0.85:
            limiter.absorb([(group.name, kind, rng.randint(0, 9), rng.randint(0, 900), rng.randint(0, 3),
                             rng.randint(0, 300), rng.randint(0, 4), None, ("t/ns",), None, 0, 0, None)], groups)
        elif what < 0.95:
            limiter.set_limit(group, kind, rng.uniform(1, 100), rng.uniform(100, 10000))
        else:
            limiter.forget(group.name)
    elif what < 0.5:
        limiter.acquire(group, kind, rng.randint(1, 30), rng.randint(1, 3000), "t/ns", now=clock.t)
    elif what < 0.7:
        asks = [type("Ask", (), {"messages": rng.randint(1, 9), "nbytes": rng.randint(1, 900),
                                 "namespace": "t/ns", "topic": None})() for _ in range(rng.randint(1, 6))]
        limiter.acquire_batch(group, kind, asks, clock.t)
    elif what < 0.85:
        limiter.record_usage(group, kind, rng.randint(0, 40), rng.randint(0, 4000), "t/ns")
    elif what < 0.95:
        limiter.set_limit(group, kind, rng.uniform(1, 100), rng.uniform(100, 10000))
    else:
        limiter.forget(group.name)  # its buckets go: the next snapshot is a new layout


@pytest.mark.parametrize("mirror", [False, True], ids=["limiter", "mirror-limiter"])
@pytest.mark.parametrize("seed", range(6))
def test_each_snapshot_equals_a_full_reread(seed: int, mirror: bool) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    node = ClusterNode(NodeConfig("a"), 1, clock, wall_ms, lambda: GROUPS)
    if mirror:
        node.limiter = MirrorLimiter(clock)
    incremental = read_back = 0
    history: dict[float, tuple[tuple, np.ndarray]] = {}  # what a full reread gave at each react
    for _ in range(300):
        for _ in range(rng.choice([0, 1, 1, 3, 10])):
            random_step(node, rng, clock, GROUPS)
        clock.t += rng.choice([0.05, 0.05, 0.1, 0.3])
        before = node._counters_version
        node._window_counts(clock.t)
        incremental += before == node._counters_version
        history[clock.t] = (tuple(node.limiter.states), full_reread(node))
        assert np.array_equal(node._snapshots[-1].full, full_reread(node))
        # Every snapshot kept (the older ones read back through the undo log) is what was read then.
        snaps = node._snapshots
        read_back += len(snaps) - 1
        for i in range(len(snaps)):
            keys, counters = history[snaps[i].at]
            assert snaps[i].layout.keys == keys
            assert np.array_equal(snaps.counters_at(i), counters), (i, len(snaps))
    assert read_back > 1000  # older snapshots compared
    assert incremental > 100  # most reacts took the incremental path (the test would not see it otherwise)
    kept_whole = sum(s.full is not None for s in node._snapshots.items)
    assert kept_whole < len(node._snapshots)  # and the log kept most of them as changes only


def test_a_new_limiter_is_read_in_full() -> None:
    """A node whose limiter is replaced (the same number of state changes in both) must not
    take the old one's counters for the new one's."""
    clock = FakeClock()
    node = ClusterNode(NodeConfig("a"), 1, clock, wall_ms, lambda: GROUPS)
    node.limiter.acquire(GROUPS["g0"], "publish", 3, 30, "t/ns", now=clock.t)
    node._window_counts(clock.t)
    node.limiter = type(node.limiter)(clock)
    node.limiter.acquire(GROUPS["g0"], "publish", 7, 70, "t/ns", now=clock.t)
    node.limiter.take_counted()  # nothing marked: only a full reread sees the 7
    clock.t += 0.05
    node._window_counts(clock.t)
    assert node._snapshots[-1].full.tolist() == [[7, 70, 0, 0, 1]]
