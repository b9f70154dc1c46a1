"""A report too large for one broker message goes out as consecutive reports; peers hold every entry.

When trimming namespace lists is not enough (tens of thousands of groups with traffic
on one daemon), ClusterNode splits its report (report_builder.split_points): the head
keeps its sequence number, continuations take the next ones, and the daemon publishes
them back to back. Checked on the pure cut, on ClusterNode with a fake clock and a small
budget (the sequence numbers, a peer folding the parts), and live: two daemons on the real
broker, one whose every tick report is split, the other holding all its entries with no
report counted lost.
"""

from __future__ import annotations

import pytest

import rgd.cluster_node
from rgd.cluster_node import ClusterNode, NodeConfig
from rgd.groups import ResourceGroup
from rgd.report_builder import MAX_REPORT_BYTES, split_points
from rgd.report_codec import serialize_report
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport
from tests.conftest import base_url, wait_for, write_config
from tests.fake_clock import FakeClock, wall_ms


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
    n = ClusterNode(NodeConfig(node_id), 1, clock, wall_ms, lambda: GROUPS)
    for name, group in GROUPS.items():
        n.limiter.acquire(group, "publish", 5, 500, f"t-{name}/ns")
    return n


def test_a_node_splits_its_tick_report_and_numbers_the_parts_in_order(monkeypatch) -> None:
    monkeypatch.setattr(rgd.cluster_node, "MAX_REPORT_BYTES", 1_500)
    clock = FakeClock()
    a, b = busy_node(clock, "a"), ClusterNode(NodeConfig("b"), 1, clock, wall_ms, lambda: GROUPS)
    clock.t += 1.0
    out = a.tick_report(clock.t)
    parts = [out.report, *a.take_continuations(out.report)]
    assert len(parts) > 2 and a.continuations == {}
    assert [p.sequence for p in parts] == list(range(1, len(parts) + 1)) == list(range(1, a.sequence + 1))
    assert all(len(serialize_report(p)) <= 1_500 for p in parts)
    assert sorted(g.group for p in parts for g in p.groups) == sorted(GROUPS)
    for p in parts:
        receipt = b.receive(serialize_report(p), None, clock.t)
        assert receipt.accepted and receipt.lost == 0
    assert all("a" in b.usage_map.groups[name] for name in GROUPS)
    # The next report follows the last part: no gap for a peer to count as lost.
    for name, group in GROUPS.items():
        a.limiter.acquire(group, "publish", 50, 5000, f"t-{name}/ns")
    clock.t += 1.0
    nxt = a.tick_report(clock.t)
    assert nxt.report.sequence == parts[-1].sequence + 1
    # Not published (no broker): every number is given back, and nothing waits to go out.
    a.not_published(nxt)
    assert a.sequence == parts[-1].sequence and a.continuations == {}


async def test_peers_hold_every_entry_of_a_daemon_whose_reports_are_split(make_daemon, http, tmp_path,
                                                                          monkeypatch) -> None:
    monkeypatch.setattr(rgd.cluster_node, "MAX_REPORT_BYTES", 2_000)
    published_continuations: list[int] = []
    take = ClusterNode.take_continuations

    def counting(node: ClusterNode, report: UsageReport) -> list[UsageReport]:
        parts = take(node, report)
        if node.node_id == "a" and parts:
            published_continuations.append(len(parts))
        return parts

    monkeypatch.setattr(ClusterNode, "take_continuations", counting)
    groups = {name: {"publishRateInMsgs": 1000} for name in GROUPS}
    cfg = write_config(tmp_path / "c.yaml", groups, tenants={f"t-{name}": name for name in GROUPS})
    a = await make_daemon("a", cfg, tick=0.2)
    b = await make_daemon("b", cfg, tick=0.2)
    await wait_for(lambda: len(a.node.members()) == 2 and len(b.node.members()) == 2, 15)
    asks = [{"namespace": f"t-{name}/ns", "messages": 1} for name in GROUPS]
    async with http.post(base_url(a) + "/v1/acquire", json={"requests": asks}) as r:
        assert r.status == 200
    await wait_for(lambda: all("a" in b.usage_map.groups.get(name, {}) for name in GROUPS), 10)
    ticks = a.ticks
    await wait_for(lambda: a.ticks >= ticks + 5, 10)
    assert published_continuations and min(published_continuations) >= 1  # a's reports went out split
    assert b.metrics.reports_lost._value.get() == 0
    assert a.metrics.publish_errors._value.get() == 0
    assert "a" in b.node.members() and "b" in a.node.members()
