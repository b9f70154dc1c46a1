"""Identity, replays and bounded work per report (pure logic, real report messages).

Signed reports are bound to a sender, an incarnation and a sequence: a departed
incarnation's genuine reports are replays (rgd.cluster.usage_map, `departed`). Caps on
groups per report (counted on the wire, before parsing) and on members in the map;
plausibility of counts from the group's quota and the report's tick.
"""

from __future__ import annotations

import time

import pytest

from rgd.cluster.node import ClusterNode, NodeConfig
from rgd.cluster.report_codec import (
    MAX_MEMBERS,
    MIN_GROUPS_CAP,
    REJECT_IMPLAUSIBLE,
    REJECT_TOO_MANY_GROUPS,
    REPLAY_WINDOW_MS,
    HmacKeys,
    Rejected,
    check_plausible,
    decode_report,
    groups_cap,
)
from rgd.cluster.usage_map import REJECT_REPLAY, UsageMap, member_tag
from rgd.config.groups import ResourceGroup
from rgd.wire.usage_report_pb2 import UsageReport
from tests.support.fake_clock import FakeClock

NOW_MS = 1_800_000_000_000


def report(daemon_id: str = "b", seq: int = 1, incarnation: int = 7, leaving: bool = False,
           groups: dict[str, int] | None = None, tick_ms: int = 1000, publish_ms: int = NOW_MS) -> UsageReport:
    r = UsageReport(daemon_id=daemon_id, sequence=seq, incarnation=incarnation, leaving=leaving,
                    tick_ms=tick_ms, publish_time_ms=publish_ms)
    for name, admitted in (groups or {}).items():
        g = r.groups.add(group=name)
        g.publish.admitted_messages = admitted
    return r


# -- groups per report, counted before parsing ------------------------------------------------


def test_a_flood_of_empty_entries_is_rejected_before_the_raw_view_parses_it(monkeypatch):
    import rgd.cluster.report_codec as codec
    flood = report().SerializeToString() + b"\x32\x00" * 2_000_000  # 4 MB: 2 M empty entries
    parsed: list[int] = []  # raw views made (each is parsed right after)
    real = codec.UsageReportEntries

    def watched():
        parsed.append(1)
        return real()

    monkeypatch.setattr(codec, "UsageReportEntries", watched)
    scope = codec.FoldScope({"gold"}, room=10)
    with pytest.raises(Rejected) as exc:
        decode_report(flood, NOW_MS, "a", 1, max_groups=groups_cap(5_000), scope=scope)
    assert exc.value.reason == REJECT_TOO_MANY_GROUPS and parsed == []
    # A genuine report of 5 000 entries is parsed through the view (no walk needed).
    r = report(groups={f"g{i}": 1 for i in range(5_000)})
    codec.index_report(r)
    decode_report(r.SerializeToString(), NOW_MS, "a", 1, max_groups=groups_cap(5_000), scope=scope)
    assert len(parsed) == 1


def test_a_report_with_100k_groups_is_rejected_before_it_is_parsed():
    r = report()
    for i in range(100_000):
        r.groups.add(group=f"g{i}").publish.admitted_messages = 5
    data = r.SerializeToString()
    started = time.perf_counter()
    with pytest.raises(Rejected) as exc:
        decode_report(data, NOW_MS, "me", 1, max_groups=groups_cap(3))
    elapsed = time.perf_counter() - started
    assert exc.value.reason == REJECT_TOO_MANY_GROUPS
    # Parsing alone takes ~0.2 s here; counting up to the cap is a fraction of a millisecond.
    # A generous bound (shared machine), far below the parse.
    assert elapsed < 0.02
    assert groups_cap(3) == MIN_GROUPS_CAP == 1024 and groups_cap(10_000) == 20_000


def test_a_report_at_the_cap_passes():
    r = report(groups={f"g{i}": 1 for i in range(MIN_GROUPS_CAP)})
    assert len(decode_report(r.SerializeToString(), NOW_MS, "me", 1, max_groups=MIN_GROUPS_CAP).groups) == 1024


# -- plausible counts -------------------------------------------------------------------------

GOLD = {"gold": ResourceGroup("gold", publish_msgs=100, publish_bytes=-1)}


def test_two_to_the_53_messages_over_a_1ms_tick_is_implausible():
    with pytest.raises(Rejected) as exc:
        check_plausible(report(groups={"gold": 2**53}, tick_ms=1), GOLD, 11.0)
    assert exc.value.reason == REJECT_IMPLAUSIBLE


def test_plausible_bound_is_twice_the_quota_over_tick_plus_burst_and_debt():
    # 100 msgs/s over a 1 s tick with 1 s burst + 10 s debt: 2 x 100 x 12 + 100 = 2500 messages.
    check_plausible(report(groups={"gold": 2500}), GOLD, 11.0)
    with pytest.raises(Rejected):
        check_plausible(report(groups={"gold": 2501}), GOLD, 11.0)
    # The same count over a 100 ms window: 2 x 100 x 11.1 + 100 = 2320.
    with pytest.raises(Rejected):
        check_plausible(report(groups={"gold": 2400}, tick_ms=100), GOLD, 11.0)
    # Groups we do not configure and unlimited kinds are not bounded by a quota.
    check_plausible(report(groups={"other": 2**50}), GOLD, 11.0)


def test_demand_beyond_a_million_times_the_quota_is_implausible():
    r = report(groups={"gold": 0})
    r.groups[0].publish.throttled_messages = 10**8  # 1e8/s on a 100/s quota: fine (a flood)
    check_plausible(r, GOLD, 11.0)
    r.groups[0].publish.throttled_messages = 10**8 + 1
    with pytest.raises(Rejected):
        check_plausible(r, GOLD, 11.0)


def test_a_quota_cut_is_judged_by_the_old_quota_until_peers_can_have_applied_it():
    # Quota 1000 -> 10 (a 100x cut, beyond the 24x margin): a peer's report of the tick it
    # spent under 1000 (900 admitted) is genuine. Judged by 10 alone it was "implausible".
    groups = {"gold": ResourceGroup("gold", publish_msgs=1000)}
    clock = FakeClock(1_800_000_000.0)
    node = ClusterNode(NodeConfig("a"), 1, clock, lambda: groups)
    seq = iter(range(1, 100))

    def peer_report(admitted: int) -> bytes:
        return report(seq=next(seq), groups={"gold": admitted}, publish_ms=clock.wall_ms(clock.t)).SerializeToString()

    assert node.receive(peer_report(900), None, clock.t).accepted
    groups["gold"] = ResourceGroup("gold", publish_msgs=10)
    node.apply_config()
    assert node.receive(peer_report(900), None, clock.t).accepted
    clock.t += 3.0  # within the lease (3 ticks) plus a tick: a peer may not have applied the cut yet
    assert node.receive(peer_report(900), None, clock.t).accepted
    clock.t += 4.0  # past it: every peer has had the cut for ticks; 900 under 10/s is not genuine
    assert node.receive(peer_report(900), None, clock.t).reason == REJECT_IMPLAUSIBLE
    assert node.receive(peer_report(340), None, clock.t).accepted  # 2 x 10 x 12 + 100
    # A raise is judged by the new quota at once (higher than the old one anyway).
    groups["gold"] = ResourceGroup("gold", publish_msgs=10_000)
    node.apply_config()
    assert node.receive(peer_report(200_000), None, clock.t).accepted


def test_two_cuts_in_a_row_are_judged_by_the_highest_quota_a_peer_may_still_have():
    # 1000 -> 100 -> 10 a second apart, each judged by the old quota for the lease (3 ticks)
    # plus a tick (4 s) after it: a slow peer may still run on 1000 (it may apply both changes
    # after us). Admitted bounds over a 1 s tick with 11 s of slack: 24 100 under 1000, 2 500
    # under 100, 340 under 10. Remembering only the last change (100 vs 10) rejected 3 000 at once.
    groups = {"gold": ResourceGroup("gold", publish_msgs=1000), "other": ResourceGroup("other", publish_msgs=10)}
    clock = FakeClock(1_800_000_000.0)
    node = ClusterNode(NodeConfig("a"), 1, clock, lambda: groups)
    seq = iter(range(1, 100))

    def peer_report(admitted: int, group: str = "gold") -> bytes:
        return report(seq=next(seq), groups={group: admitted}, publish_ms=clock.wall_ms(clock.t)).SerializeToString()

    groups["gold"] = ResourceGroup("gold", publish_msgs=100)
    node.apply_config()
    clock.t += 1.0
    groups["gold"] = ResourceGroup("gold", publish_msgs=10)
    node.apply_config()
    assert node.receive(peer_report(3000), None, clock.t).accepted
    assert node.receive(peer_report(341, "other"), None, clock.t).reason == REJECT_IMPLAUSIBLE  # unchanged
    clock.t += 3.5  # past the first cut's grace, within the second's: judged by 100
    assert node.receive(peer_report(3000), None, clock.t).reason == REJECT_IMPLAUSIBLE
    assert node.receive(peer_report(2000), None, clock.t).accepted
    clock.t += 1.0  # past both: judged by 10
    assert node.receive(peer_report(2000), None, clock.t).reason == REJECT_IMPLAUSIBLE
    assert node.receive(peer_report(340), None, clock.t).accepted


# -- replays of departed incarnations ---------------------------------------------------------

US = member_tag("a", 6)  # how peers' acknowledgements name the receiver in these tests


def test_a_departed_daemons_reports_replayed_are_rejected():
    m = UsageMap(replay_window=600.0)
    genuine = [report(seq=s, groups={"gold": 50}) for s in range(1, 6)]
    for s, r in enumerate(genuine):
        assert m.fold(r, float(s), US).accepted
    assert m.fold(report(seq=6, leaving=True), 6.0, US).accepted
    assert "b" not in m.members
    for r in [*genuine, report(seq=6, leaving=True), report(seq=3, incarnation=6)]:
        result = m.fold(r, 7.0, US)
        assert result.reason == REJECT_REPLAY and not result.new_member
    assert "b" not in m.members and "gold" not in m.groups
    # The same daemon restarted (a new incarnation) is welcome.
    result = m.fold(report(seq=1, incarnation=8), 8.0, US)
    assert result.accepted and result.new_member


def test_an_evicted_daemons_old_reports_are_replays_its_next_ones_are_not():
    m = UsageMap(default_lease=3.0, replay_window=600.0)
    for s in range(1, 4):
        m.fold(report(seq=s, groups={"gold": 50}), float(s), US)
    assert m.silent(10.0) == ["b"]
    m.evict("b", 10.0)
    assert m.fold(report(seq=2, groups={"gold": 50}), 10.5, US).reason == REJECT_REPLAY
    # Its genuine next report (it was only cut off) brings it back.
    assert m.fold(report(seq=4, groups={"gold": 50}), 11.0, US).accepted
    assert "b" in m.members and "b" in m.groups["gold"]


def test_the_memory_ends_with_the_replay_window():
    m = UsageMap(replay_window=600.0)
    window = REPLAY_WINDOW_MS / 1000
    assert m.replay_window == window == 600.0  # a replay older than that fails the clock check
    m.fold(report(seq=1), 0.0, US)
    m.fold(report(seq=2, leaving=True), 1.0, US)
    m.forget_departed(1.0 + window - 1)
    assert "b" in m.departed
    m.forget_departed(1.0 + window + 1)
    assert m.departed == {}


def test_unsigned_keeps_no_memory_so_a_forged_leave_costs_the_real_daemon_one_report():
    clock = FakeClock(100.0, epoch_ms=NOW_MS - 100_000)
    node = ClusterNode(NodeConfig("a"), 6, clock, lambda: GOLD)  # no keys: anyone may publish anything

    def send(r: UsageReport) -> bytes:
        r.publish_time_ms = clock.wall_ms(clock.t)
        return r.SerializeToString()

    assert node.receive(send(report(seq=1, groups={"gold": 50})), None, clock.t).accepted
    clock.t += 0.5
    assert node.receive(send(report(seq=99, leaving=True)), None, clock.t).accepted  # forged
    assert "b" not in node.members()
    clock.t += 0.5
    assert node.receive(send(report(seq=2, groups={"gold": 50})), None, clock.t).accepted
    assert "b" in node.members()


def test_cluster_node_rejects_a_departed_peers_signed_reports(tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_text("k1:first-secret-0123456789\n")
    keys = HmacKeys.load(str(keys_file))
    clock = FakeClock(100.0, epoch_ms=NOW_MS)
    node = ClusterNode(NodeConfig("a"), 1, clock, lambda: GOLD, keys=keys)

    def send(r: UsageReport):
        r.publish_time_ms = clock.wall_ms(clock.t)
        data = r.SerializeToString()
        return data, keys.sign(data)

    captured = [send(report(seq=s, groups={"gold": 50})) for s in (1, 2)]
    for data, props in captured:
        assert node.receive(data, props, clock.t).accepted
    assert "b" in node.members()
    clock.t += 1
    assert node.receive(*send(report(seq=3, leaving=True)), clock.t).accepted
    clock.t += 1
    for data, props in captured:
        assert node.receive(data, props, clock.t).reason == REJECT_REPLAY
    assert node.members() == {"a"}
    # A forged report or leave without the key is a bad signature.
    data = report(seq=10**12).SerializeToString()
    assert node.receive(data, {"rgd-key-id": "k1", "rgd-hmac": "00" * 32}, clock.t).reason == "bad_signature"


# -- members: a cap -----------------------------------------------------------------------------

def test_members_are_capped():
    """A report acknowledges at most MAX_MEMBERS members (report_codec): a node whose map held
    more would acknowledge them all and every peer would reject its reports. So made-up ids
    beyond the cap are rejected, and the node's own report still decodes at a peer."""
    clock = FakeClock(100.0, epoch_ms=NOW_MS - 100_000)
    node = ClusterNode(NodeConfig("a"), 1, clock, lambda: GOLD)

    def send(r: UsageReport) -> bytes:
        r.publish_time_ms = clock.wall_ms(clock.t)
        return r.SerializeToString()

    for i in range(MAX_MEMBERS):
        assert node.receive(send(report(daemon_id=f"d{i}")), None, clock.t).accepted
    assert not node.receive(send(report(daemon_id="one-too-many")), None, clock.t).accepted
    assert len(node.usage_map.members) == MAX_MEMBERS
    node.recompute_changed(clock.t)  # every member's state is now applied: acknowledged next
    clock.t += 1.0
    for part in node.tick_report(clock.t).parts:
        decoded = decode_report(part.SerializeToString(), clock.wall_ms(clock.t), "d0", 7)
        assert len(decoded.ack_members) <= MAX_MEMBERS


def test_group_entries_beyond_the_cap_reach_a_node_as_a_rejection():
    node = ClusterNode(NodeConfig("a"), 1, FakeClock(0.0, epoch_ms=NOW_MS), lambda: GOLD)
    r = report(groups={f"g{i}": 1 for i in range(MIN_GROUPS_CAP + 1)})
    assert node.receive(r.SerializeToString(), None, 0.0).reason == REJECT_TOO_MANY_GROUPS
    assert node.usage_map.members == {}
    huge = report(groups={"gold": 2**53}, tick_ms=1)
    assert node.receive(huge.SerializeToString(), None, 0.0).reason == REJECT_IMPLAUSIBLE
