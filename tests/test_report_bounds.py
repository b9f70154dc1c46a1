"""A report stays under the broker's message limit however many namespaces brokers ask for.

Only namespace lists give way (no peer computes with them); every group entry
and its figures reach the peers, so no peer drops this daemon from its map.
"""

from __future__ import annotations

import copy

from rgd.report_builder import MAX_NAMESPACES_PER_ENTRY, MAX_REPORT_BYTES, bound_report
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport

from tests.conftest import base_url, wait_for, write_config

PULSAR_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # Pulsar's default maxMessageSize


def report(groups: int, namespaces: int, name_len: int = 60) -> UsageReport:
    r = UsageReport(daemon_id="d", sequence=1, tick_ms=1000, incarnation=1)
    for g in range(groups):
        gu = GroupUsage(group=f"group-{g:05d}", topics=3)
        gu.publish.admitted_messages = g
        gu.namespaces.extend(f"tenant/{'n' * name_len}-{i:06d}" for i in range(namespaces))
        r.groups.append(gu)
    return r


def names(r: UsageReport) -> int:
    return sum(len(g.namespaces) for g in r.groups)


def test_each_entry_keeps_at_most_the_cap() -> None:
    r = report(3, 1000)
    out = bound_report(r)
    assert [len(g.namespaces) for g in r.groups] == [32, 32, 32] and MAX_NAMESPACES_PER_ENTRY == 32
    assert out.namespaces == 3 * (1000 - 32) and not out.over_budget
    assert list(r.groups[0].namespaces) == [f"tenant/{'n' * 60}-{i:06d}" for i in range(32)]


def test_a_report_of_10000_groups_fits_and_keeps_every_entry() -> None:
    r = report(10_000, 32)
    original = copy.deepcopy(r)
    assert original.ByteSize() > PULSAR_MAX_MESSAGE_SIZE  # the case that failed to publish
    out = bound_report(r)
    assert r.ByteSize() <= MAX_REPORT_BYTES < PULSAR_MAX_MESSAGE_SIZE
    assert not out.over_budget
    assert out.namespaces == names(original) - names(r) > 0
    # Every entry and its figures are still there.
    assert [(g.group, g.topics, g.publish.admitted_messages) for g in r.groups] == \
        [(g.group, g.topics, g.publish.admitted_messages) for g in original.groups]
    # Only as much as needed went: the lists are all the same size here, so the report
    # ends within one list of the budget.
    one_list = original.groups[0].ByteSize() - GroupUsage(group="group-00000", topics=3).ByteSize()
    assert r.ByteSize() > MAX_REPORT_BYTES - 2 * one_list


def test_over_budget_without_namespaces_is_said() -> None:
    r = report(10, 0)
    assert bound_report(r, max_bytes=50).over_budget


async def test_brokers_asking_for_many_namespaces_over_http_stay_in_peers_maps(make_daemon, http, tmp_path) -> None:
    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 1000}}, tenants={"t": "g"})
    a = await make_daemon("a", cfg, tick=0.2)
    b = await make_daemon("b", cfg, tick=0.2)
    await wait_for(lambda: len(a.node.members()) == 2 and len(b.node.members()) == 2, 15)
    asked = 3000
    first_tick = a.ticks
    for start in range(0, asked, 100):
        batch = [{"namespace": f"t/ns-{i:05d}", "messages": 1} for i in range(start, start + 100)]
        async with http.post(base_url(a) + "/v1/acquire", json={"requests": batch}) as r:
            assert r.status == 200
    trimmed = a.metrics.report_namespaces_trimmed
    # However the asks spread over ticks, at most one capped list per tick got through
    # (each tick's entry changed, so none was suppressed).
    ticks_asking = a.ticks - first_tick + 2
    await wait_for(lambda: trimmed._value.get() >= asked - 32 * ticks_asking, 10)
    assert trimmed._value.get() > 0
    ticks = a.ticks
    await wait_for(lambda: a.ticks >= ticks + 5, 10)
    assert "a" in b.usage_map.groups["g"] and "a" in b.node.members()
    async with http.get(base_url(a) + "/metrics") as r:
        assert "rgd_report_namespaces_trimmed_total" in await r.text()
