"""MapKeeper's idle-streak rule under report loss (pure logic, real report messages)."""

from __future__ import annotations

from rgd.map_keeper import MapKeeper
from rgd.usage_map import UsageMap
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport

K1 = 6  # K + 1: an active group is in one of any six consecutive tick reports


def report(seq: int, groups: tuple[str, ...] = (), restatement: bool = False) -> UsageReport:
    r = UsageReport(daemon_id="b", sequence=seq, publish_time_ms=seq * 100, tick_ms=1000, incarnation=1,
                    restatement=restatement)
    for g in groups:
        gu = GroupUsage(group=g)
        gu.publish.admitted_messages = 100
        r.groups.append(gu)
    return r


def keeper() -> MapKeeper:
    return MapKeeper(UsageMap(), "a", K1, ttl_seconds=3.0, safety_ttl_seconds=21.0)


def test_a_busy_peers_entry_survives_a_lost_refresh_noticed_on_a_restatement() -> None:
    k = keeper()
    seq = 1
    k.fold(report(seq, ("g",)), 1.0)
    # Five tick reports that suppress "g" (each followed by an early report of another group).
    for t in range(2, 7):
        seq += 1
        k.fold(report(seq), float(t))
        seq += 1
        k.fold(report(seq, ("h",), restatement=True), t + 0.5)
    # The sixth tick report, the refresh naming "g", is lost; the next message is a restatement.
    seq += 2
    k.fold(report(seq, ("h",), restatement=True), 7.5)
    seq += 1
    k.fold(report(seq), 8.0)  # another tick report without "g"
    k.expire_groups(8.0)
    assert "b" in k.usage_map.groups["g"]  # the gap said "g" may have been in the lost report


def test_a_peer_that_stopped_naming_a_group_loses_its_entry_after_k_plus_1_reports() -> None:
    k = keeper()
    k.fold(report(1, ("g",)), 1.0)
    for seq in range(2, 2 + K1):
        k.fold(report(seq), float(seq))
    k.expire_groups(10.0)
    assert "g" not in k.usage_map.groups
