"""Identity, replays and bounded work per report (pure logic, real report messages).

Signed reports are bound to a sender, an incarnation and a sequence: a departed
incarnation's genuine reports are replays. Caps on groups per report (counted on
the wire, before parsing), members in the map and the rate of new members;
plausibility of counts from the group's quota and the report's tick.
"""

from __future__ import annotations

import time

import pytest

from rgd.cluster.map_keeper import MAX_MEMBERS, REJECT_MEMBER_LIMIT, REJECT_MEMBER_RATE, REJECT_REPLAY, MapKeeper
from rgd.cluster.node import MEMBER_ADMISSION_BURST, ClusterNode, NodeConfig
from rgd.cluster.report_codec import (
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
from rgd.cluster.usage_map import UsageMap
from rgd.config.groups import ResourceGroup
from rgd.wire.usage_report_pb2 import UsageReport

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
    clock = [1_800_000_000.0]
    node = ClusterNode(NodeConfig("a"), 1, lambda: clock[0], lambda now: int(now * 1000), lambda: groups)
    seq = iter(range(1, 100))

    def peer_report(admitted: int) -> bytes:
        return report(seq=next(seq), groups={"gold": admitted}, publish_ms=int(clock[0] * 1000)).SerializeToString()

    assert node.receive(peer_report(900), None, clock[0]).accepted
    groups["gold"] = ResourceGroup("gold", publish_msgs=10)
    node.apply_config()
    assert node.receive(peer_report(900), None, clock[0]).accepted
    clock[0] += 3.0  # within (TTL 3 + 2) ticks plus the delivery delay
    assert node.receive(peer_report(900), None, clock[0]).accepted
    clock[0] += 4.0  # past it: every peer has had the cut for ticks; 900 under 10/s is not genuine
    assert node.receive(peer_report(900), None, clock[0]).reason == REJECT_IMPLAUSIBLE
    assert node.receive(peer_report(340), None, clock[0]).accepted  # 2 x 10 x 12 + 100
    # A raise is judged by the new quota at once (higher than the old one anyway).
    groups["gold"] = ResourceGroup("gold", publish_msgs=10_000)
    node.apply_config()
    assert node.receive(peer_report(200_000), None, clock[0]).accepted


def test_two_cuts_in_a_row_are_judged_by_the_highest_quota_a_peer_may_still_have():
    # 1000 -> 100 -> 10 within the grace ((TTL 3 + 2) ticks + the 1-tick default delay =
    # 6 s): a slow peer may still run on 1000 (it may apply both changes after us). Admitted
    # bounds over a 1 s tick with 11 s of slack: 24 100 under 1000, 2 500 under 100, 340 under
    # 10. Remembering only the last change (100 vs 10) rejected 3 000 at once.
    groups = {"gold": ResourceGroup("gold", publish_msgs=1000), "other": ResourceGroup("other", publish_msgs=10)}
    clock = [1_800_000_000.0]
    node = ClusterNode(NodeConfig("a"), 1, lambda: clock[0], lambda now: int(now * 1000), lambda: groups)
    seq = iter(range(1, 100))

    def peer_report(admitted: int, group: str = "gold") -> bytes:
        return report(seq=next(seq), groups={group: admitted}, publish_ms=int(clock[0] * 1000)).SerializeToString()

    groups["gold"] = ResourceGroup("gold", publish_msgs=100)
    node.apply_config()
    clock[0] += 1.0
    groups["gold"] = ResourceGroup("gold", publish_msgs=10)
    node.apply_config()
    assert node.receive(peer_report(3000), None, clock[0]).accepted
    assert node.receive(peer_report(341, "other"), None, clock[0]).reason == REJECT_IMPLAUSIBLE  # unchanged
    clock[0] += 5.5  # past the first cut's grace, within the second's: judged by 100
    assert node.receive(peer_report(3000), None, clock[0]).reason == REJECT_IMPLAUSIBLE
    assert node.receive(peer_report(2000), None, clock[0]).accepted
    clock[0] += 1.0  # past both: judged by 10
    assert node.receive(peer_report(2000), None, clock[0]).reason == REJECT_IMPLAUSIBLE
    assert node.receive(peer_report(340), None, clock[0]).accepted


# -- replays of departed incarnations ---------------------------------------------------------

def keeper(signed: bool = True, **kw) -> MapKeeper:
    return MapKeeper(UsageMap(), "a", 6, ttl_seconds=3.0, safety_ttl_seconds=21.0,
                     replay_window_seconds=REPLAY_WINDOW_MS / 1000 if signed else None, **kw)


def test_a_departed_daemons_reports_replayed_are_rejected():
    k = keeper()
    genuine = [report(seq=s, groups={"gold": 50}) for s in range(1, 6)]
    for s, r in enumerate(genuine):
        assert k.fold(r, float(s))[0].accepted
    assert k.fold(report(seq=6, leaving=True), 6.0)[0].accepted
    assert "b" not in k.usage_map.members
    for r in [*genuine, report(seq=6, leaving=True), report(seq=3, incarnation=6)]:
        result, new = k.fold(r, 7.0)
        assert result.reason == REJECT_REPLAY and not new
    assert "b" not in k.usage_map.members and "gold" not in k.usage_map.groups
    # The same daemon restarted (a new incarnation) is welcome.
    result, new = k.fold(report(seq=1, incarnation=8), 8.0)
    assert result.accepted and new


def test_an_evicted_daemons_old_reports_are_replays_its_next_ones_are_not():
    k = keeper()
    for s in range(1, 4):
        k.fold(report(seq=s, groups={"gold": 50}), float(s))
    assert k.evict_silent(10.0) == ["b"]
    assert k.fold(report(seq=2, groups={"gold": 50}), 10.5)[0].reason == REJECT_REPLAY
    # Its genuine next report (it was only cut off) brings it back.
    assert k.fold(report(seq=4, groups={"gold": 50}), 11.0)[0].accepted


def test_the_memory_ends_with_the_replay_window():
    k = keeper()
    k.fold(report(seq=1), 0.0)
    k.fold(report(seq=2, leaving=True), 1.0)
    window = REPLAY_WINDOW_MS / 1000
    k.evict_silent(1.0 + window - 1)
    assert "b" in k.departed
    k.evict_silent(1.0 + window + 1)
    assert k.departed == {}


def test_unsigned_keeps_no_memory_so_a_forged_leave_costs_the_real_daemon_one_report():
    k = keeper(signed=False)
    k.fold(report(seq=1, groups={"gold": 50}), 0.0)
    k.fold(report(seq=99, leaving=True), 0.5)  # forged
    assert k.fold(report(seq=2, groups={"gold": 50}), 1.0)[0].accepted


def test_cluster_node_rejects_a_departed_peers_signed_reports(tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_text("k1:first-secret-0123456789\n")
    keys = HmacKeys.load(str(keys_file))
    clock = [100.0]
    node = ClusterNode(NodeConfig("a"), 1, lambda: clock[0], lambda now: int(NOW_MS + now * 1000), lambda: GOLD,
                       keys=keys)

    def send(r: UsageReport):
        r.publish_time_ms = int(NOW_MS + clock[0] * 1000)
        data = r.SerializeToString()
        return data, keys.sign(data)

    captured = [send(report(seq=s, groups={"gold": 50})) for s in (1, 2)]
    for data, props in captured:
        assert node.receive(data, props, clock[0]).accepted
    assert "b" in node.members()
    clock[0] += 1
    assert node.receive(*send(report(seq=3, leaving=True)), clock[0]).accepted
    clock[0] += 1
    for data, props in captured:
        assert node.receive(data, props, clock[0]).reason == REJECT_REPLAY
    assert node.members() == {"a"}
    # A forged report or leave without the key is a bad signature.
    data = report(seq=10**12).SerializeToString()
    assert node.receive(data, {"rgd-key-id": "k1", "rgd-hmac": "00" * 32}, clock[0]).reason == "bad_signature"


# -- members: a cap, and a bounded rate of newcomers ------------------------------------------

def test_newcomers_are_admitted_at_a_bounded_rate():
    k = keeper(signed=False, admissions_per_second=2.0, admission_burst=MEMBER_ADMISSION_BURST)
    reasons = [k.fold(report(daemon_id=f"fake{i}"), 0.0)[0].reason for i in range(100)]
    assert reasons.count("") == 8 and reasons.count(REJECT_MEMBER_RATE) == 92
    # Without a report interval, one second later two more; a known member is never held back.
    reasons = [k.fold(report(daemon_id=f"late{i}"), 1.0)[0].reason for i in range(10)]
    assert reasons.count("") == 2
    assert k.fold(report(daemon_id="fake0", seq=2), 1.0)[0].accepted


def test_daemons_that_keep_reporting_are_admitted_within_a_few_intervals():
    """100 daemons starting together (a DaemonSet at PIP-82's size, each reporting every
    second): every one a member within 7 s, not 46 s at 2 a second. No second admits more
    newcomers than the established members (heard again a second after joining) or 8."""
    k = keeper(signed=False, admissions_per_second=2.0, admission_burst=MEMBER_ADMISSION_BURST)
    k.report_interval_seconds = 1.0
    admitted_by = []
    for second in range(8):
        before = len(k.usage_map.members)
        allowed = max(MEMBER_ADMISSION_BURST, k.established(float(second)))
        for i in range(100):
            k.fold(report(daemon_id=f"d{i}", seq=second + 1), float(second))
        admitted_by.append(len(k.usage_map.members))
        assert len(k.usage_map.members) - before <= allowed
    assert admitted_by[6] == 100, admitted_by  # 8, 10, 18, 28, 46, 74, 100


def test_made_up_ids_sent_once_do_not_open_the_door():
    """A burst of 100 made-up ids every second, each id used once: they never report again,
    so none becomes established and the door stays at 8, then 2 a second."""
    k = keeper(signed=False, admissions_per_second=2.0, admission_burst=MEMBER_ADMISSION_BURST)
    k.report_interval_seconds = 1.0
    for second in range(10):
        for i in range(100):
            k.fold(report(daemon_id=f"fake{second}-{i}"), float(second))
    assert len(k.usage_map.members) == 8 + 2 * 9


def test_members_are_capped():
    k = keeper(signed=False)
    for i in range(MAX_MEMBERS):
        assert k.fold(report(daemon_id=f"d{i}"), 0.0)[0].accepted
    result, _ = k.fold(report(daemon_id="one-too-many"), 0.0)
    assert result.reason == REJECT_MEMBER_LIMIT and len(k.usage_map.members) == MAX_MEMBERS


def test_signed_nodes_admit_newcomers_at_any_rate_unsigned_ones_do_not():
    groups = lambda: GOLD  # noqa: E731
    cfg = NodeConfig("a", member_admissions_per_tick=2.0)
    unsigned = ClusterNode(cfg, 1, lambda: 0.0, lambda now: NOW_MS, groups)
    assert unsigned.keeper.admissions_per_second == 2.0 and unsigned.keeper.replay_window_seconds is None
    keys = HmacKeys((("k", b"0123456789abcdef"),))
    signed = ClusterNode(cfg, 1, lambda: 0.0, lambda now: NOW_MS, groups, keys=keys)
    assert signed.keeper.admissions_per_second is None
    assert signed.keeper.replay_window_seconds == REPLAY_WINDOW_MS / 1000 == 600.0


def test_group_entries_beyond_the_cap_reach_a_node_as_a_rejection():
    node = ClusterNode(NodeConfig("a"), 1, lambda: 0.0, lambda now: NOW_MS, lambda: GOLD)
    r = report(groups={f"g{i}": 1 for i in range(MIN_GROUPS_CAP + 1)})
    assert node.receive(r.SerializeToString(), None, 0.0).reason == REJECT_TOO_MANY_GROUPS
    assert node.usage_map.members == {}
    huge = report(groups={"gold": 2**53}, tick_ms=1)
    assert node.receive(huge.SerializeToString(), None, 0.0).reason == REJECT_IMPLAUSIBLE
