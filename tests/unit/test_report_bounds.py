"""A report stays under the broker's message limit however many namespaces brokers ask for.

Only namespace lists give way (no peer computes with them); every group entry
and its figures reach the peers, so no peer drops this daemon from its map.

Here the pure bound; live, with two daemons, tests/system/test_report_bounds_live.py.
"""

from __future__ import annotations

import copy

from rgd.cluster.report_builder import MAX_NAMESPACES_PER_ENTRY, MAX_REPORT_BYTES, bound_report
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport

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


