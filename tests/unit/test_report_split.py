"""A report too large for one broker message goes out as consecutive reports; peers hold every entry.

When trimming namespace lists is not enough (tens of thousands of groups with traffic
on one daemon), ClusterNode splits its report (report_builder.split_points): the head
keeps its sequence number, continuations take the next ones, and the daemon publishes
them back to back. Checked here on the pure cut and on ClusterNode with a fake clock and a small budget (the
sequence numbers, a peer folding the parts); live, with two daemons on the real broker, in
tests/system/test_report_split_live.py.
"""

from __future__ import annotations

import pytest

import rgd.cluster.node
from rgd.cluster.node import ClusterNode, NodeConfig
from rgd.cluster.report_builder import MAX_REPORT_BYTES, split_points
from rgd.cluster.report_codec import serialize_report
from rgd.config.groups import ResourceGroup
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport
from tests.support.fake_clock import FakeClock


def big_report(groups: int, name_len: int = 200) -> UsageReport:
    r = UsageReport(daemon_id="d", sequence=7, publish_time_ms=1, tick_ms=1000, incarnation=1, restatement=True)
    for g in range(groups):
        gu = GroupUsage(group=f"{'g' * name_len}-{g:06d}", topics=1)
        gu.publish.admitted_messages = g + 1
        gu.publish.limit_messages = 100.0
        r.groups.append(gu)
    return r


def parts_of(r: UsageReport, cuts: list[int]) -> list[UsageReport]:
    """Each part as a report of its own, the way ClusterNode builds them (the header
    copied, the next sequence numbers), written here independently of split_points."""
    out = []
    for i, (start, end) in enumerate(zip([0, *cuts], [*cuts, len(r.groups)])):
        part = UsageReport(daemon_id=r.daemon_id, sequence=r.sequence + i, publish_time_ms=r.publish_time_ms,
                           tick_ms=r.tick_ms, incarnation=r.incarnation, restatement=r.restatement)
        part.groups.extend(r.groups[start:end])
        out.append(part)
    return out


def test_a_report_that_fits_is_not_cut() -> None:
    assert split_points(big_report(100)) == []


@pytest.mark.parametrize("max_bytes", [2_000, 20_000, MAX_REPORT_BYTES])
def test_every_part_fits_and_together_they_are_the_report_in_order(max_bytes: int) -> None:
    r = big_report(20_000 if max_bytes == MAX_REPORT_BYTES else 500)
    assert r.ByteSize() > max_bytes
    cuts = split_points(r, max_bytes)
    parts = parts_of(r, cuts)
    sizes = [len(serialize_report(p)) for p in parts]  # as published: with the index
    assert max(sizes) <= max_bytes
    assert [g.group for p in parts for g in p.groups] == [g.group for g in r.groups]
    # No part is needlessly small: each (but the last) would overflow with the next entry.
    for p, start in zip(parts[:-1], cuts):
        assert len(serialize_report(p)) + r.groups[start].ByteSize() + 3 + 8 > max_bytes - 24


GROUPS = {f"group-{i:03d}": ResourceGroup(f"group-{i:03d}", publish_msgs=1000) for i in range(60)}


def busy_node(clock: FakeClock, node_id: str) -> ClusterNode:
    """A node with traffic in every group: the buckets made, seen by a react (a window starts
    where the node first sees a bucket), then asks in every group."""
    n = ClusterNode(NodeConfig(node_id), 1, clock, lambda: GROUPS)
    for name, group in GROUPS.items():
        n.limiter.acquire(group, "publish", 1, 100, f"t-{name}/ns")
    n.react(clock.t)
    for name, group in GROUPS.items():
        n.limiter.acquire(group, "publish", 5, 500, f"t-{name}/ns")
    return n


def test_a_node_splits_its_tick_report_and_numbers_the_parts_in_order(monkeypatch) -> None:
    monkeypatch.setattr(rgd.cluster.node, "MAX_REPORT_BYTES", 1_500)
    clock = FakeClock()
    a, b = busy_node(clock, "a"), ClusterNode(NodeConfig("b"), 1, clock, lambda: GROUPS)
    clock.t += 1.0
    out = a.tick_report(clock.t)
    parts = out.parts
    assert len(parts) > 2 and parts[0] is out.report
    assert [p.sequence for p in parts] == list(range(1, len(parts) + 1)) == list(range(1, a.own.sequence + 1))
    # Each continuation applies on top of the part before it.
    assert [p.base for p in parts[1:]] == [p.sequence for p in parts[:-1]]
    assert all(len(serialize_report(p)) <= 1_500 for p in parts)
    assert sorted(g.group for p in parts for g in p.groups) == sorted(GROUPS)
    for p in parts:
        receipt = b.receive(serialize_report(p), None, clock.t)
        assert receipt.accepted and receipt.lost == 0
    assert not any(b.usage_map.fold_group(name) is False for name in GROUPS)  # b serves none: held till now
    assert all("a" in b.usage_map.groups[name] for name in GROUPS)
    # The next report follows the last part: no gap for a peer to count as lost.
    for name, group in GROUPS.items():
        a.limiter.acquire(group, "publish", 50, 5000, f"t-{name}/ns")
    clock.t += 1.0
    nxt = a.tick_report(clock.t)
    assert nxt.report.sequence == parts[-1].sequence + 1
    # Not published (no broker): every number is given back.
    a.unsent(nxt.parts)
    assert a.own.sequence == parts[-1].sequence
    assert [s for s, _, _ in a.own.sent] == [p.sequence for p in parts]


