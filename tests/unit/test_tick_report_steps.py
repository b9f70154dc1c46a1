"""The tick report in steps (ClusterNode.tick_report_steps): the daemon answers asks between
them, so what the asks do meanwhile must not reach this tick's report. That the steps run
at once build the same reports as before is the simulator's to show: `python -m sim all`
and the fuzz print the same figures (they run `tick_report`, the steps at once).

The expected figures are the counts the test itself made, not the node's."""

from __future__ import annotations

from rgd.cluster.node import TICK_SLICE_GROUPS, ClusterNode, NodeConfig, TickOutcome
from rgd.config.groups import ResourceGroup
from tests.support.fake_clock import FakeClock, wall_ms

N = 2 * TICK_SLICE_GROUPS + 7  # three slices of entries, three of figures
GROUPS = {f"g{i:04d}": ResourceGroup(f"g{i:04d}", publish_msgs=1000) for i in range(N)}
GROUPS["late"] = ResourceGroup("late", publish_msgs=1000)


def node_with_asks(clock: FakeClock) -> ClusterNode:
    n = ClusterNode(NodeConfig("a"), 1, clock, wall_ms, lambda: GROUPS)
    for i in range(N):
        n.limiter.acquire(GROUPS[f"g{i:04d}"], "publish", 1 + i % 3, 10, "t/ns", now=clock.t)
    return n


def asked(out: TickOutcome) -> dict[str, int]:
    """Messages asked for per group in the tick: admitted and throttled."""
    return {g.group: g.publish.admitted_messages + g.publish.throttled_messages for g in out.report.groups}


def test_asks_between_the_steps_count_in_the_next_tick() -> None:
    clock = FakeClock()
    n = node_with_asks(clock)
    steps = n.tick_report_steps(clock.t)
    yields = 0
    try:
        while True:
            next(steps)
            yields += 1
            # What the daemon's loop may do between two steps: asks on known groups, and a
            # bucket that did not exist when the counters were collected.
            n.limiter.acquire(GROUPS["g0000"], "publish", 5, 10, "t/ns", now=clock.t)
            n.limiter.acquire(GROUPS["late"], "publish", 1, 10, "t/ns", now=clock.t)
    except StopIteration as done:
        out = done.value
    assert yields >= 7  # collected, 3 slices of entries, 3 of figures, suppression
    want = {f"g{i:04d}": 1 + i % 3 for i in range(N)}
    assert asked(out) == want  # neither the 5s nor "late"
    clock.t += 1.0
    later = asked(n.tick_report(clock.t))
    assert later["g0000"] == 5 * yields and later["late"] == yields
