"""Garbage collection off the request path: a node's steady state makes no reference cycles
(so freezing its heap after each tick leaks nothing), and the pacer frees cycles that were
frozen once the frozen heap has grown enough."""

from __future__ import annotations

import gc

from rgd.cluster.node import ClusterNode
from rgd.config.groups import ResourceGroup
from rgd.daemon.gc_pacing import YOUNG_THRESHOLD, GcPacer
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage, UsageReport
from tests.support.fake_clock import FakeClock, wall_ms

GROUPS = {f"g{i}": ResourceGroup(f"g{i}", publish_msgs=400, publish_bytes=400_000 if i % 2 else -1)
          for i in range(4)}


def _peer_report(sender: str, sequence: int, at: float, rate: float, acks: dict[int, int] | None = None) -> bytes:
    """A peer's whole-state report; `acks`: member tag -> the sequence of it the peer acknowledges."""
    r = UsageReport(daemon_id=sender, sequence=sequence, publish_time_ms=wall_ms(at), tick_ms=1000, incarnation=1)
    for name in GROUPS:
        r.groups.append(GroupUsage(group=name, publish=KindUsage(
            admitted_messages=int(rate), admitted_bytes=int(rate) * 100, throttled_messages=int(rate / 4),
            throttled_bytes=int(rate / 4) * 100, limit_messages=int(rate), limit_bytes=int(rate) * 100)))
    for tag, seq in (acks or {}).items():
        r.ack_members.append(tag)
        r.ack_sequences.append(seq)
    return r.SerializeToString()


def _echo(n: ClusterNode, parts: list[UsageReport], at: float) -> None:
    """Our reports back from the topic, as the daemon's inbox hands them to the node."""
    for part in parts:
        n.receive(part.SerializeToString(), None, at)


def _second(n: ClusterNode, clock: FakeClock, second: int, rate: int) -> None:
    """One second of a daemon's life, as the daemon's tasks drive the node (rgd/daemon/wiring.py):
    the hello at start, asks, a peer's report that acknowledges ours, reacts every 0.1 s
    (recompute, then a report when demand rose or a peer asked), the tick with its report
    back from the topic, upkeep and the recompute."""
    if second == 0:
        _echo(n, n.hello_report(clock.t), clock.t)
    for step in range(10):
        for group in GROUPS.values():
            for _ in range(rate // 10):
                n.limiter.acquire(group, "publish", 1, 100, f"{group.name}/ns", now=clock.t)
        if step == 5:
            n.receive(_peer_report("b", second + 1, clock.t, 150 + 50 * (second % 3), {n.tag: n.own.sequence}),
                      None, clock.t)
        clock.t += 0.1
        n.recompute_changed(clock.t)
        _echo(n, n.react(clock.t), clock.t)
    out = n.tick_report(clock.t)
    _echo(n, out.parts, clock.t)
    n.upkeep(clock.t)
    n.recompute_changed(clock.t)


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_once_paced_young_collections_wait_for_more_new_objects() -> None:
    """The pacer's tick step collects every tick's survivors anyway; CPython's 700 made young
    collections walk them dozens of times a tick (rgd/daemon/gc_pacing.py)."""
    thresholds = gc.get_threshold()
    try:
        GcPacer().start()
        assert gc.get_threshold() == (YOUNG_THRESHOLD, thresholds[1], thresholds[2])
        gc.collect(0)
        before = gc.get_stats()[0]["collections"]
        kept = [[] for _ in range(YOUNG_THRESHOLD // 2)]  # container objects: each counts
        assert gc.get_stats()[0]["collections"] == before  # not yet: the default collected 7 times
        kept.extend([] for _ in range(YOUNG_THRESHOLD))
        assert gc.get_stats()[0]["collections"] > before
    finally:
        gc.unfreeze()
        gc.collect()
        gc.set_threshold(*thresholds)
