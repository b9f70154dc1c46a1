"""The cluster's pure core on a fake clock: suppression, the map keeper's streaks and
tombstones, report building and ClusterNode's tick, fold and react.

Every expected value is a literal or worked out in the comment beside it from the rule the
module documents; none is computed by the code under test or by its siblings.
"""

from __future__ import annotations

import pytest

from rgd.cluster.map_keeper import REJECT_REPLAY, MapKeeper
from rgd.cluster.node import ClusterNode, NodeConfig
from rgd.cluster.report_builder import bound_report, figures, group_entries, split_points
from rgd.cluster.suppression import SuppressionPolicy, SuppressionState, select_reports
from rgd.cluster.usage_map import UsageMap
from rgd.config.groups import ResourceGroup
from rgd.config.settings import resolve
from rgd.daemon.wiring import node_config_for
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport
from tests.support.fake_clock import FakeClock, wall_ms

# --- suppression ------------------------------------------------------------------------


def tick(policy: SuppressionPolicy, state: SuppressionState, current: dict, always=()) -> tuple[list, list]:
    send, suppressed = select_reports(policy, state, current, always)
    return sorted(send), sorted(suppressed)


def test_a_new_busy_group_is_sent_and_a_new_idle_one_is_not() -> None:
    state = SuppressionState()
    assert tick(SuppressionPolicy(0.10, 5), state, {"busy": (10.0, 0.0), "idle": (0.0, 0.0)}) == (["busy"], [])
    assert state.last_sent == {"busy": (10.0, 0.0)}


def test_a_move_within_the_tolerance_is_suppressed_and_one_beyond_it_is_sent() -> None:
    policy, state = SuppressionPolicy(0.10, 5), SuppressionState()
    tick(policy, state, {"g": (100.0, 50.0)})
    # 100 -> 109: |9| <= 10 % of the larger (10.9): suppressed; 50 stays.
    assert tick(policy, state, {"g": (109.0, 50.0)}) == ([], ["g"])
    # Compared with what was last *sent* (100, 50), not with last tick's 109: 50 -> 56 is
    # 6 > 5.6 (10 % of 56): sent, and (100, 56) becomes the reference.
    assert tick(policy, state, {"g": (100.0, 56.0)}) == (["g"], [])
    assert state.last_sent["g"] == (100.0, 56.0) and state.skipped["g"] == 0


def test_going_idle_is_said_at_once_then_the_group_is_forgotten() -> None:
    policy, state = SuppressionPolicy(0.10, 5), SuppressionState()
    tick(policy, state, {"g": (100.0, 50.0)})
    # Idle (absent from `current` counts as idle): peers must see the zero, so it is sent
    # however long ago the last report was.
    assert tick(policy, state, {}) == (["g"], [])
    assert state.last_sent["g"] == (0.0, 0.0)
    # Idle again: nothing to say, neither sent nor counted as suppressed, and forgotten.
    assert tick(policy, state, {"g": (0.0, 0.0)}) == ([], [])
    assert "g" not in state.last_sent and "g" not in state.skipped


def test_always_sends_a_busy_group_however_little_it_moved() -> None:
    policy, state = SuppressionPolicy(0.10, 5), SuppressionState()
    tick(policy, state, {"g": (100.0,), "h": (100.0,)})
    assert tick(policy, state, {"g": (100.0,), "h": (100.0,)}, always={"g"}) == (["g"], ["h"])


def test_a_disabled_policy_sends_every_busy_group_every_tick() -> None:
    for policy in (SuppressionPolicy(0.0, 5), SuppressionPolicy(0.10, 0)):
        state = SuppressionState()
        for _ in range(4):
            assert tick(policy, state, {"g": (100.0,)}) == (["g"], [])


def sent_ticks_of_steady_group(report_every: int, ticks: int) -> list[int]:
    policy, state = SuppressionPolicy.every(0.10, report_every), SuppressionState()
    return [t for t in range(ticks) if select_reports(policy, state, {"g": (100.0, 10.0)})[0]]


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_report_every_n_sends_a_steady_group_exactly_every_nth_tick(n: int) -> None:
    # `--report-every N`: "report every group at least every this many ticks" (rgd run --help).
    # A steady group is sent on its first tick and then on every Nth: ticks 0, N, 2N, ...
    assert sent_ticks_of_steady_group(n, 4 * n + 1) == [0, n, 2 * n, 3 * n, 4 * n]


# --- the map keeper ---------------------------------------------------------------------

K1 = 6  # refresh_reports = K + 1 (the default --report-every 6)


def report(seq: int, groups: tuple[str, ...] = (), *, sender: str = "b", incarnation: int = 1,
           restatement: bool = False, leaving: bool = False) -> UsageReport:
    r = UsageReport(daemon_id=sender, sequence=seq, publish_time_ms=seq * 100, tick_ms=1000,
                    incarnation=incarnation, restatement=restatement, leaving=leaving)
    for g in groups:
        gu = GroupUsage(group=g)
        gu.publish.admitted_messages = 100
        r.groups.append(gu)
    return r


def keeper(**kw) -> MapKeeper:
    return MapKeeper(UsageMap(), "a", K1, ttl_seconds=3.0, safety_ttl_seconds=21.0, **kw)


def test_the_idle_streak_counts_consecutive_tick_reports_only() -> None:
    k = keeper()
    k.fold(report(1, ("g",)), 1.0)
    for seq in range(2, 2 + K1 - 1):  # five tick reports without "g": streak 5 of 6
        k.fold(report(seq), float(seq))
    assert k.streak[("b", "g")] == 5
    k.fold(report(7, ("h",), restatement=True), 7.0)  # an early report names only some groups
    assert k.streak[("b", "g")] == 5
    k.expire_groups(7.0)
    assert "b" in k.usage_map.groups["g"]  # five is not yet K + 1
    k.fold(report(8), 8.0)  # the sixth tick report without it
    assert k.streak[("b", "g")] == 6
    assert k.expire_groups(8.0) == 1 and "g" not in k.usage_map.groups


def test_a_gap_resets_the_idle_streak() -> None:
    k = keeper()
    k.fold(report(1, ("g",)), 1.0)
    for seq in range(2, 6):
        k.fold(report(seq), float(seq))
    assert k.streak[("b", "g")] == 4
    k.fold(report(7), 7.0)  # 6 was lost: it may have named "g"
    assert k.streak[("b", "g")] == 0
    k.expire_groups(7.0)
    assert "b" in k.usage_map.groups["g"]


def test_an_evicted_member_leaves_a_tombstone_and_gets_its_entries_back_if_it_speaks_again() -> None:
    k = keeper()
    k.fold(report(1, ("g", "h")), 1.0)
    assert k.silent(4.0) == []  # 3.0 s of silence: not more than the TTL
    assert k.evict_silent(4.5) == ["b"]
    assert "b" not in k.usage_map.members and "g" not in k.usage_map.groups
    assert set(k.tombstones["b"][2]) == {"g", "h"} and k.tombstones["b"][:2] == (1, 4.5)
    # The same incarnation again, naming only "h": "g" comes back from the tombstone.
    k.fold(report(2, ("h",)), 5.0)
    assert "b" in k.usage_map.groups["g"] and "b" in k.usage_map.groups["h"]
    assert k.tombstones == {}


def test_a_restarted_member_gets_nothing_from_its_old_incarnations_tombstone() -> None:
    k = keeper()
    k.fold(report(1, ("g", "h")), 1.0)
    k.evict_silent(4.5)
    k.fold(report(1, ("h",), incarnation=2), 5.0)
    assert "g" not in k.usage_map.groups and "b" in k.usage_map.groups["h"]


def test_a_tombstone_goes_after_the_safety_ttl() -> None:
    k = keeper()
    k.fold(report(1, ("g",)), 1.0)
    k.evict_silent(4.5)
    k.evict_silent(4.5 + 21.0)  # exactly the safety TTL: kept
    assert "b" in k.tombstones
    k.evict_silent(4.5 + 21.5)
    assert k.tombstones == {}


def test_with_signed_reports_a_departed_members_old_reports_are_replays() -> None:
    k = keeper(replay_window_seconds=60.0)
    k.fold(report(5, ("g",)), 1.0)
    assert k.fold(report(6, leaving=True), 2.0)[0].accepted
    assert k.departed == {"b": (1, 6, 2.0)}
    assert k.fold(report(6, ("g",)), 3.0)[0].reason == REJECT_REPLAY  # at or below its last sequence
    assert k.fold(report(1, ("g",), incarnation=2), 3.0)[0].accepted  # a restart is a new member


# --- report building --------------------------------------------------------------------


def test_entries_and_figures_of_a_ticks_counters() -> None:
    clock = FakeClock()
    groups = {"g": ResourceGroup("g", publish_msgs=100), "d": ResourceGroup("d", dispatch_msgs=50)}
    n = ClusterNode(NodeConfig("a"), 1, clock, wall_ms, lambda: groups)
    n.limiter.acquire(groups["g"], "publish", 3, 300, "t/one", now=clock.t)
    n.limiter.acquire(groups["g"], "publish", 2, 200, "t/two", now=clock.t)
    n.limiter.acquire(groups["d"], "dispatch", 4, 40, "t/one", now=clock.t)
    collected = n.limiter.collect()
    entries = group_entries(collected, n.limiter.states, groups)
    assert list(entries) == ["d", "g"]
    g = entries["g"]
    assert list(g.namespaces) == ["t/one", "t/two"]
    # A new bucket starts below the quota, so some of it may be throttled: the demand is 5 and 500.
    assert g.publish.admitted_messages + g.publish.throttled_messages == 5
    assert g.publish.admitted_bytes + g.publish.throttled_bytes == 500
    assert (g.publish.quota_messages, g.publish.quota_bytes) == (100.0, -1.0)
    assert not g.HasField("dispatch") and not g.HasField("replication")  # nothing to say: left out
    # figures: per kind in KINDS order (publish, dispatch, replication), admitted and
    # throttled messages and bytes.
    p = g.publish
    assert figures(g) == (p.admitted_messages, p.admitted_bytes, p.throttled_messages, p.throttled_bytes,
                          0, 0, 0, 0, 0, 0, 0, 0)
    d = entries["d"].dispatch
    assert d.admitted_messages + d.throttled_messages == 4
    assert figures(entries["d"]) == (0, 0, 0, 0, d.admitted_messages, d.admitted_bytes, d.throttled_messages,
                                     d.throttled_bytes, 0, 0, 0, 0)


def test_bound_report_caps_each_namespace_list_and_never_touches_an_entry() -> None:
    r = UsageReport(daemon_id="d", sequence=1)
    for i, count in enumerate((40, 3)):
        gu = GroupUsage(group=f"g{i}")
        gu.publish.admitted_messages = 7 + i
        gu.namespaces.extend(f"t/ns{j:02d}" for j in range(count))
        r.groups.append(gu)
    out = bound_report(r, max_namespaces=32)
    assert out.namespaces == 8 and not out.over_budget  # 40 - 32
    assert [len(g.namespaces) for g in r.groups] == [32, 3]
    assert list(r.groups[0].namespaces) == [f"t/ns{j:02d}" for j in range(32)]  # the first 32 kept
    assert [g.publish.admitted_messages for g in r.groups] == [7, 8]


def test_split_points_cut_where_the_next_entry_would_overflow() -> None:
    r = UsageReport(daemon_id="d", sequence=1, tick_ms=1000, incarnation=1)
    for i in range(10):
        gu = GroupUsage(group=f"group-{i}")
        gu.publish.admitted_messages = 1
        r.groups.append(gu)
    # An entry: its name (tag, length, 7 bytes: 9) and `publish` (tag, length, and inside it
    # admitted_messages' tag and varint 1: 4), 13 bytes; protobuf's own count agrees.
    assert r.groups[0].ByteSize() == 13
    # In a report each entry costs its tag (1), its length (1), itself (13) and its index key
    # (8): 23 bytes. The budget is max_bytes less the header (daemon_id 3, sequence 2,
    # tick_ms 1000 as a 2-byte varint 3, incarnation 2: 10 bytes) and 24 bytes of slack.
    assert split_points(r, max_bytes=34 + 3 * 23) == [3, 6, 9]  # three a part, the last one alone
    assert split_points(r, max_bytes=34 + 3 * 23 - 1) == [2, 4, 6, 8]
    assert split_points(r, max_bytes=34 + 10 * 23) == []  # all ten fit


# --- ClusterNode: tick, fold, react -----------------------------------------------------

G300 = {"g": ResourceGroup("g", publish_msgs=300)}


def test_each_tick_report_takes_the_next_sequence_and_counts_that_ticks_asks() -> None:
    clock = FakeClock()
    n = ClusterNode(NodeConfig("a"), 7, clock, wall_ms, lambda: G300)
    for t, asked in enumerate((5, 9)):
        n.limiter.acquire(G300["g"], "publish", asked, 10 * asked, "t/ns", now=clock.t)
        out = n.tick_report(clock.t)
        assert (out.report.daemon_id, out.report.incarnation, out.report.sequence) == ("a", 7, t + 1)
        assert out.report.publish_time_ms == wall_ms(clock.t)
        assert out.report.groups[0].publish.admitted_messages == asked  # this tick's, not a running total
        assert n.ticks == t + 1
        clock.t += 1.0


def test_a_fold_puts_the_peers_entry_in_the_map_and_a_second_copy_is_a_duplicate() -> None:
    clock = FakeClock()
    a = ClusterNode(NodeConfig("a"), 1, clock, wall_ms, lambda: G300)
    b = ClusterNode(NodeConfig("b"), 1, clock, wall_ms, lambda: G300)
    b.limiter.acquire(G300["g"], "publish", 7, 700, "t/ns", now=clock.t)
    out = b.tick_report(clock.t)
    first = a.fold(out.report, clock.t + 0.01)
    assert first.accepted and first.new_member
    assert a.members() == {"a", "b"}
    assert a.usage_map.groups["g"]["b"].usage.publish.admitted_messages == 7.0  # per second: 7 in a 1 s tick
    again = a.receive(out.report.SerializeToString(), None, clock.t + 0.02)
    assert not again.accepted and again.reason == "duplicate"


def test_two_peers_with_equal_unmet_demand_settle_on_half_the_quota_each() -> None:
    clock = FakeClock()
    a = ClusterNode(NodeConfig("a"), 1, clock, wall_ms, lambda: G300)
    b = ClusterNode(NodeConfig("b"), 1, clock, wall_ms, lambda: G300)
    limits = []
    for _ in range(6):
        for n in (a, b):  # 1 000 msg/s asked each, more than the 300 of the whole group
            for _ in range(100):
                n.limiter.acquire(G300["g"], "publish", 10, 100, "t/ns", now=clock.t)
        outs = {n.node_id: n.tick_report(clock.t) for n in (a, b)}
        for n in (a, b):  # every report reaches both, our own included (the daemon's subscription)
            for out in outs.values():
                n.receive(out.report.SerializeToString(), None, clock.t + 0.01)
            n.recompute()
        limits.append((a.limits_for(G300["g"])["publish"][0], b.limits_for(G300["g"])["publish"][0]))
        clock.t += 1.0
    assert all(x <= 150.0 and y <= 150.0 for x, y in limits)  # never more than the quota between them
    assert limits[-3:] == [(150.0, 150.0)] * 3  # max-min fair: 300 / 2 each


def test_react_reports_a_demand_step_early_and_stays_quiet_while_demand_holds() -> None:
    clock = FakeClock()
    n = ClusterNode(NodeConfig("a"), 1, clock, wall_ms, lambda: G300)
    n.receive(n.tick_report(clock.t).report.SerializeToString(), None, clock.t)  # our own, back

    def react_for(rate: int, seconds: float) -> list[UsageReport]:
        early = []
        for _ in range(round(seconds / 0.1)):  # react every 0.1 s, as NodeConfig.react_seconds
            n.limiter.acquire(G300["g"], "publish", rate // 10, 100, "t/ns", now=clock.t)
            clock.t += 0.1
            r = n.early_report(clock.t)
            if r is not None:
                early.append(r)
        return early

    first = react_for(50, 0.5)
    assert len(first) == 1 and first[0].restatement  # the new group, once the window measures it
    assert react_for(50, 1.0) == []  # steady: nothing early (the tick reports it)
    stepped = react_for(150, 0.5)
    assert len(stepped) >= 1 and [g.group for g in stepped[0].groups] == ["g"]


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_report_every_n_from_the_settings_names_a_steady_group_in_every_nth_tick_report(n: int) -> None:
    # As `rgd run --report-every N` sets it: the flag through the settings' layers, then into
    # the node's config as rgd.daemon.wiring builds it.
    settings = resolve({}, {}, {"report_every": n, "id": "a"})
    assert settings.report_every == n
    clock = FakeClock()
    config = node_config_for(settings)
    # A quota far above the asks: every ask is admitted, so the figures are the same each tick.
    groups = {"g": ResourceGroup("g", publish_msgs=1_000_000)}
    node = ClusterNode(config, 1, clock, wall_ms, lambda: groups)
    named = []
    for t in range(4 * n + 1):
        node.limiter.acquire(groups["g"], "publish", 10, 100, "t/ns", now=clock.t)  # the same every tick
        assert node.limiter.states[("g", "publish")].messages.rate > 10  # (and so admitted)
        if "g" in node.tick_report(clock.t).sent:
            named.append(t)
        clock.t += 1.0
    assert named == [0, n, 2 * n, 3 * n, 4 * n]
