"""The cluster protocol's mechanisms (docs/design/protocol.md), each on its own, on a fake clock.

Expected values are literals or worked by hand in the comments; nothing here asks the code
under test what the answer should be.
"""

from __future__ import annotations

import math
import time

import pytest

from rgd.cluster.clock import WallClock
from rgd.cluster.node import REJECT_OWN, ClusterNode, NodeConfig
from rgd.cluster.own_reports import OwnReports
from rgd.cluster.report_codec import serialize_report
from rgd.cluster.usage_map import REJECT_REPLAY, UsageMap, member_tag
from rgd.config.groups import ResourceGroup
from rgd.quota.model import KindRates, PeerUsage
from rgd.wire.usage_report_pb2 import UsageReport

EPOCH = 1_767_225_600.0


class FakeClock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def wall_ms(self, at: float) -> int:
        return int(round((EPOCH + at) * 1000))


def usage(demand: float) -> PeerUsage:
    return PeerUsage(KindRates(admitted_messages=demand))


# -- own reports: the acknowledged minimum and the lease --------------------------------------


def test_own_demand_counts_as_the_smallest_state_a_peer_may_hold() -> None:
    own = OwnReports()
    own.record(1, 0.0, 3.0, {"g": usage(50)})
    own.record(2, 1.0, 3.0, {"g": usage(20)})
    own.record(3, 2.0, 3.0, {})  # g not named: still 20 as of 3
    own.record(4, 3.0, 3.0, {"g": usage(90)})
    held = own.as_held("g", 1)  # a peer that acknowledged 1 holds 50, 20 or 90
    assert held is not None and held.publish.admitted_messages == 20
    held = own.as_held("g", 3)  # ... that acknowledged 3 holds 20 or 90
    assert held is not None and held.publish.admitted_messages == 20
    held = own.as_held("g", 4)
    assert held is not None and held.publish.admitted_messages == 90
    assert own.as_held("g", 0) is None  # a peer that acknowledged nothing may hold us idle
    own.record(5, 4.0, 3.0, {"g": None})  # went idle
    assert own.as_held("g", 4) is None


def test_groups_named_after_a_base_are_those_whose_last_naming_is_later() -> None:
    """Against a literal model (name -> last sequence), through renamings, an unsent report
    and a forgotten group, at every base."""
    import random

    rng = random.Random(4)
    own = OwnReports()
    last: dict[str, int] = {}
    for _ in range(300):
        if rng.random() < 0.1 and own.sequence:
            seq = own.sequence
            own.unsent(seq)
            last = {n: s for n, s in last.items() if s != seq}
            continue
        if rng.random() < 0.05 and last:
            gone = rng.choice(sorted(last))
            own.forget(gone)
            del last[gone]
        seq = own.next_sequence()
        named = {f"g{rng.randrange(12)}": usage(1) for _ in range(rng.randrange(4))}
        own.record(seq, float(seq), 3.0, named)
        last.update(dict.fromkeys(named, seq))
        for base in range(seq + 1):
            assert own.changed_after(base) == sorted(n for n, s in last.items() if s > base)


def test_the_lease_ends_at_the_earliest_send_plus_announced_lease_since_the_oldest_acknowledgement() -> None:
    own = OwnReports()
    own.record(1, 10.0, 3.0, {})
    own.record(2, 11.0, 5.0, {})
    own.record(3, 12.0, 2.0, {})  # a shorter lease announced later counts: peers evict by the newest they heard
    own.record(4, 13.0, 9.0, {})
    # A peer that acknowledged 2 last heard 2, 3 or 4 (or a later one): it evicts us no earlier
    # than min(11 + 5, 12 + 2, 13 + 9) = 14.
    assert own.lease_end([2, 4]) == 14.0
    assert own.lease_end([3]) == 14.0
    assert own.lease_end([4]) == 22.0
    assert own.lease_end([0, 3]) == -math.inf  # a member that acknowledged nothing may not know us
    assert own.lease_end([]) == math.inf


def test_a_long_lease_announced_early_is_not_cut_by_a_short_one_sent_much_later() -> None:
    """The send time of the report a peer last heard counts, not the oldest one's: a lease of
    9 s sent at 0 and one of 3 s sent at 5 keep us until 8 (0 + 3 would end it at 3)."""
    own = OwnReports()
    own.record(1, 0.0, 9.0, {})
    own.record(2, 5.0, 3.0, {})
    assert own.lease_end([1]) == 8.0


def test_reports_announce_a_lease_longer_than_the_round_trip_the_echo_measured() -> None:
    """Before any peer answered, the round trip is taken as our echo's delay both ways plus a
    peer's react: at a delay of 0.8 s, a 1 s tick and a 0.1 s react, a report announces
    2 * 0.8 + 2 * 0.1 + 1 = 2.8 s over a configured 2 s lease; before the echo, the longest
    (3 x 2 s), since the delay is unknown."""
    clock = FakeClock(0.0)
    node = ClusterNode(NodeConfig("a", lease_ticks=2.0), 1, clock, lambda: {})
    assert node.announced_lease(0.0) == pytest.approx(6.0)
    hello = node.hello_report(0.0)[0]
    assert hello.lease_ms == 6000
    clock.t = 0.8
    assert node.fold(hello, 0.8).reason == REJECT_OWN
    assert node.announced_lease(0.8) == pytest.approx(2.8)
    clock.t = 10.0  # the sample ages out after 5 ticks: the configured lease again
    assert node.announced_lease(10.0) == pytest.approx(2.0)


# -- the usage map: versioned state -------------------------------------------------------------


def report(sender: str, seq: int, base: int, groups: dict[str, float], *, incarnation: int = 7,
           acks: dict[str, int] | None = None, leaving: bool = False) -> UsageReport:
    r = UsageReport(daemon_id=sender, sequence=seq, base=base, incarnation=incarnation, tick_ms=1000,
                    leaving=leaving, lease_ms=3000)
    for name, demand in groups.items():
        g = r.groups.add(group=name)
        g.publish.admitted_messages = int(demand)
        g.publish.limit_messages = -1
    for tag_of, seq_acked in (acks or {}).items():
        r.ack_members.append(member_tag(tag_of, 1))
        r.ack_sequences.append(seq_acked)
    return r


def test_a_report_applies_on_top_of_a_state_we_hold_and_a_gap_keeps_what_we_hold_whole() -> None:
    m = UsageMap()
    assert m.fold(report("p", 1, 0, {"g": 10, "h": 5}), 0.0, 0).accepted
    assert m.members["p"].held == 1 and m.members["p"].in_sync
    m.fold(report("p", 2, 1, {"g": 30}), 1.0, 0)  # on top of 1: h stays 5
    assert m.groups["g"]["p"].usage.publish.admitted_messages == 30
    assert m.groups["h"]["p"].usage.publish.admitted_messages == 5
    assert m.members["p"].held == 2
    result = m.fold(report("p", 4, 3, {"g": 40}), 2.0, 0)  # 3 lost: we do not hold 3
    assert result.accepted and result.lost == 1
    assert m.groups["g"]["p"].usage.publish.admitted_messages == 40  # a figure it did report
    assert m.members["p"].held == 2  # but we acknowledge only a state we hold whole


def test_a_whole_state_report_drops_what_it_does_not_name() -> None:
    m = UsageMap()
    m.fold(report("p", 1, 0, {"g": 10, "h": 5}), 0.0, 0)
    m.fold(report("p", 2, 0, {"g": 12}), 1.0, 0)
    assert "h" not in m.groups and m.members["p"].groups == {"g"}


def test_a_report_before_the_whole_state_leaves_the_sender_out_of_sync() -> None:
    m = UsageMap()
    m.fold(report("p", 5, 4, {"g": 10}), 0.0, 0)  # we never held p's state
    assert not m.members["p"].in_sync
    m.fold(report("p", 6, 0, {"g": 10}), 1.0, 0)
    assert m.members["p"].in_sync and m.members["p"].held == 6


def test_acknowledgements_of_us_are_read_from_every_report() -> None:
    m = UsageMap()
    ours = member_tag("me", 1)
    m.fold(report("p", 1, 0, {}, acks={"me": 4, "other": 9}), 0.0, ours)
    assert m.members["p"].acked_us == 4
    m.fold(report("p", 2, 9, {}, acks={"me": 3}), 1.0, ours)  # never goes back while it holds us
    assert m.members["p"].acked_us == 4
    assert m.members["p"].holds_us
    m.fold(report("p", 3, 9, {}, acks={"other": 9}), 2.0, ours)  # it no longer holds us (it evicted us)
    assert not m.members["p"].holds_us


def test_a_departed_members_old_reports_are_replays_its_new_ones_are_not() -> None:
    m = UsageMap(replay_window=600.0)  # signed reports: a departed member's are remembered
    m.fold(report("p", 1, 0, {"g": 10}), 0.0, 0)
    m.fold(report("p", 2, 1, {}, leaving=True), 1.0, 0)
    assert "p" not in m.members
    assert m.fold(report("p", 1, 0, {"g": 10}), 2.0, 0).reason == REJECT_REPLAY
    assert m.fold(report("p", 2, 1, {"g": 10}), 2.0, 0).reason == REJECT_REPLAY
    assert m.fold(report("p", 1, 0, {"g": 10}, incarnation=8), 2.0, 0).accepted  # a restart


# -- nodes on a topic ---------------------------------------------------------------------------

QUOTA = ResourceGroup("g", publish_msgs=100.0)
TICK = 1.0
REACT = 0.1


class Topic:
    """Every published report reaches every node (the sender too) `delay` steps later (at the
    next step with 0), except to and from nodes cut off."""

    def __init__(self, clock: FakeClock, ids: list[str], groups: dict[str, ResourceGroup], delay: int = 2) -> None:
        self.clock = clock
        self.groups = groups
        self.nodes = {i: ClusterNode(NodeConfig(i, TICK, react_seconds=REACT), 1, clock, lambda: self.groups)
                      for i in ids}
        self.cut: set[str] = set()
        self.muted: set[str] = set()  # their reports reach themselves only
        self.stalled: set[str] = set()  # neither tick nor react (their brokers still ask them)
        self.late: dict[str, list[tuple[str, bytes]]] = {}  # what waits for nodes that read the topic late
        self.delay = delay
        self.steps = 0
        self.queue: list[tuple[int, str, bytes]] = []

    def publish(self, sender: str, parts: list[UsageReport]) -> None:
        if sender not in self.cut:
            self.queue += [(self.steps + self.delay, sender, serialize_report(p)) for p in parts]

    def deliver(self) -> None:
        due = [(s, d) for at, s, d in self.queue if at <= self.steps]
        self.queue = [q for q in self.queue if q[0] > self.steps]
        now = self.clock.now()
        for sender, data in due:
            for i, node in self.nodes.items():
                if i in self.late:
                    self.late[i].append((sender, data))
                elif i not in self.cut and (sender not in self.muted or i == sender):
                    node.receive(data, None, now)

    def catch_up(self, who: str) -> None:
        """`who` reads, now, everything the topic carried to it while it was late."""
        for _, data in self.late.pop(who):
            self.nodes[who].receive(data, None, self.clock.now())

    def ask(self, who: str, n: int) -> int:
        """n asks of one message at `who` now; how many were allowed."""
        limiter = self.nodes[who].limiter
        return sum(limiter.acquire(QUOTA, "publish", 1, 100, "t/ns").allowed for _ in range(n))

    def step(self, ticking: bool) -> None:
        """One react interval: deliver, then every node reacts (and ticks, on a whole tick)."""
        self.steps += 1
        self.deliver()
        now = self.clock.now()
        for i, node in self.nodes.items():
            if i in self.stalled:
                continue
            node.all_dirty = True  # limits recomputed at every step, as when other groups' reports come in
            if ticking:
                self.publish(i, node.tick_report(now).parts)
                node.upkeep(now)
            node.recompute_changed(now)
            self.publish(i, node.react(now))

    def run(self, seconds: float, load: dict[str, float] | None = None,
            check: object = None) -> None:
        steps = int(round(seconds / REACT))
        for _ in range(steps):
            self.clock.t = round(self.clock.t + REACT, 9)
            ticking = abs(self.clock.t / TICK - round(self.clock.t / TICK)) < 1e-9
            for who, rate in (load or {}).items():
                self.ask(who, int(rate * REACT))
            self.step(ticking)
            if callable(check):
                check()

    def limits(self) -> dict[str, float]:
        return {i: n.limiter.limit_in_force(QUOTA, "publish")[0] for i, n in self.nodes.items()}


def started(ids: list[str]) -> Topic:
    clock = FakeClock(0.0)
    topic = Topic(clock, ids, {"g": QUOTA})
    for i, node in topic.nodes.items():
        node.limiter.state(QUOTA, "publish")  # brokers asked for the group: the node serves it
        topic.publish(i, node.hello_report(0.0))
    topic.run(3.0)
    return topic


def test_a_lone_node_takes_the_whole_quota_once_it_has_listened_a_tick() -> None:
    topic = started(["a"])
    assert topic.nodes["a"].lease_valid(topic.clock.now())
    assert topic.limits() == {"a": 100.0}  # nobody has demand: quota / 1


def test_a_node_that_knows_no_member_sends_its_whole_state_in_every_report() -> None:
    """A listener we have not heard of holds nothing of ours, so while we know no member every
    report is whole: a daemon that missed our first reports holds us from the first it hears."""
    topic = started(["a"])
    topic.run(2.0, {"a": 30})
    now = topic.clock.now()
    parts = topic.nodes["a"].tick_report(now).parts
    assert all(p.sequence > 1 for p in parts)  # not the first: the hello went before
    late = ClusterNode(NodeConfig("b", TICK, react_seconds=REACT), 1, topic.clock, lambda: topic.groups)
    for part in parts:
        assert late.fold(part, now).accepted
    member = late.usage_map.members["a"]
    assert member.in_sync and member.held == parts[-1].sequence
    assert late.usage_map.groups["g"]["a"].usage.publish.admitted_messages == pytest.approx(30.0, rel=0.2)


def test_nodes_that_hold_each_other_split_an_idle_group_evenly() -> None:
    topic = started(["a", "b"])
    assert topic.limits() == pytest.approx({"a": 50.0, "b": 50.0})


def test_a_rise_is_ours_only_once_every_peer_acknowledged_it_and_never_over_the_quota() -> None:
    topic = started(["a", "b"])
    topic.run(3.0, {"a": 20, "b": 20})
    # b's demand rises to 90: b may count it only once a acknowledged it, so at every instant
    # the two limits sum to at most the quota.
    sums: list[float] = []
    topic.run(4.0, {"a": 20, "b": 90}, check=lambda: sums.append(sum(topic.limits().values())))
    assert max(sums) <= 100.0 + 1e-6
    limits = topic.limits()
    assert limits["b"] > 70.0 and limits["a"] < 30.0  # 80 / 20 give or take headroom


def test_a_fall_lowers_our_limit_before_the_report_that_says_so_goes_out() -> None:
    topic = started(["a", "b"])
    topic.run(3.0, {"a": 80, "b": 80})
    before = topic.limits()["a"]
    assert before == pytest.approx(50.0, abs=1.0)
    node = topic.nodes["a"]
    for _ in range(3):  # a's demand falls to 10 over a third of a tick
        topic.clock.t = round(topic.clock.t + REACT, 9)
        topic.ask("a", 1)
    parts = node.react(topic.clock.now())  # no rise: nothing early ...
    assert parts == []
    out = node.tick_report(topic.clock.now())  # ... the tick report says the fall
    assert out.parts and topic.limits()["a"] < before  # lowered as the report was built


def test_a_node_cut_off_the_topic_stops_admitting_before_its_peers_take_its_share() -> None:
    topic = started(["a", "b", "c"])
    topic.run(3.0, {"a": 60, "b": 60, "c": 60})
    assert topic.limits() == pytest.approx({"a": 33.3, "b": 33.3, "c": 33.3}, abs=1.0)
    topic.cut.add("c")
    cut_at = topic.clock.now()
    worst = [0.0]
    c_zero_at: list[float] = []
    evicted_at: list[float] = []

    def check() -> None:
        lim = topic.limits()
        worst[0] = max(worst[0], sum(lim.values()))
        if lim["c"] == 0.0 and not c_zero_at:
            c_zero_at.append(topic.clock.now())
        if "c" not in topic.nodes["a"].usage_map.members and not evicted_at:
            evicted_at.append(topic.clock.now())

    topic.run(8.0, {"a": 60, "b": 60, "c": 60}, check=check)
    assert worst[0] <= 100.0 + 1e-6
    assert c_zero_at and c_zero_at[0] <= cut_at + 3.0  # within its lease (3 s) of the cut
    assert evicted_at and evicted_at[0] > c_zero_at[0]  # peers take its share only after that
    assert not topic.nodes["c"].lease_valid(topic.clock.now())
    assert topic.limits()["a"] == pytest.approx(50.0, abs=1.0)


def test_a_node_its_peers_no_longer_hear_stops_admitting_before_they_take_its_share() -> None:
    """Unlike a cut, it still hears the topic (and itself): only the missing acknowledgements
    of its peers can tell it that they will evict it."""
    topic = started(["a", "b", "c"])
    topic.run(3.0, {"a": 60, "b": 60, "c": 60})
    topic.muted.add("c")
    worst = [0.0]
    topic.run(8.0, {"a": 60, "b": 60, "c": 60},
              check=lambda: worst.__setitem__(0, max(worst[0], sum(topic.limits().values()))))
    assert worst[0] <= 100.0 + 1e-6
    assert "c" not in topic.nodes["a"].usage_map.members
    assert topic.limits()["c"] == 0.0 and topic.limits()["a"] == pytest.approx(50.0, abs=1.0)


def test_a_node_that_reads_the_topic_late_evicts_no_member_whose_reports_wait_for_it() -> None:
    """Silence is judged on the topic as far as a node has read it (P4): a node whose reading
    falls three leases behind keeps a peer that went on reporting, where judging by its own
    clock evicted it (and took its share while it admitted). A peer that does go silent is
    evicted once the node's echo shows a lease of topic without it."""
    clock = FakeClock()
    topic = Topic(clock, ["a", "b"], {"g": QUOTA})
    topic.run(5.0, load={"a": 60, "b": 60})
    a = topic.nodes["a"]
    lease = a.config.lease_seconds
    assert lease == 3.0 and set(a.usage_map.members) == {"b"}
    topic.late["a"] = []
    topic.run(3 * lease, load={"a": 60, "b": 60})  # a ticks and upkeeps, reading nothing
    assert set(a.usage_map.members) == {"b"}
    topic.catch_up("a")
    topic.run(2.0, load={"a": 60, "b": 60})
    assert set(a.usage_map.members) == {"b"}
    topic.stalled.add("b")  # b stops reporting: its last report reaches a two steps later
    silent_from = clock.t
    topic.run(lease, load={"a": 60})
    assert set(a.usage_map.members) == {"b"}  # not before a lease
    for _ in range(int(3 * TICK / REACT)):  # ... and within two ticks and the delay more
        topic.run(REACT, load={"a": 60})
        if not a.usage_map.members:
            break
    assert not a.usage_map.members, a.usage_map.members
    assert lease < clock.t - silent_from <= lease + 2 * TICK + 2 * REACT + 1e-9


def test_a_node_cut_off_whose_recomputes_stall_stops_admitting_at_its_leases_end() -> None:
    """The node closes its limits when it recomputes past its lease; a daemon whose react
    waits for a broker that does not answer recomputes a tick later, or never. Its limiter
    stops admitting at the lease's end on its own clock: before its peers evict it."""
    topic = started(["a", "b", "c"])
    topic.run(3.0, {"a": 60, "b": 60, "c": 60})
    node = topic.nodes["c"]
    lease_end = node.lease_end() + REACT  # the lease proper: the node itself stops a react interval early
    topic.cut.add("c")
    topic.stalled.add("c")
    st = node.limiter.states[("g", "publish")]
    admitted: list[tuple[float, int]] = []  # (instant, c's admitted so far), after each step's asks
    evicted_at: list[float] = []

    def check() -> None:
        now = topic.clock.now()
        admitted.append((now, st.total_admitted_messages))
        if "c" not in topic.nodes["a"].usage_map.members and not evicted_at:
            evicted_at.append(now)

    topic.run(8.0, {"a": 60, "b": 60, "c": 60}, check=check)  # c's brokers ask every react interval
    assert node.limiter.limit_in_force(QUOTA, "publish")[0] > 0  # never recomputed: the share is still set
    before_end = [n for at, n in admitted if at < lease_end]
    assert before_end and admitted[-1][1] == before_end[-1]  # nothing admitted from the lease's end on
    assert evicted_at and evicted_at[0] > lease_end


def test_a_healed_node_takes_its_share_again_once_its_peers_acknowledge_it() -> None:
    topic = started(["a", "b", "c"])
    topic.cut.add("c")
    topic.run(6.0, {"a": 60, "b": 60, "c": 60})
    topic.cut.discard("c")
    sums: list[float] = []
    topic.run(4.0, {"a": 60, "b": 60, "c": 60}, check=lambda: sums.append(sum(topic.limits().values())))
    assert max(sums) <= 100.0 + 1e-6
    assert topic.limits() == pytest.approx({"a": 33.3, "b": 33.3, "c": 33.3}, abs=1.0)


def test_a_healed_node_settles_though_the_first_echo_it_hears_is_of_a_report_it_no_longer_keeps() -> None:
    """Settling waits a tick plus the delay an echo took; an echo of a report we pruned measures
    no delay, so it does not settle us (an unknown delay is not an infinite one)."""
    topic = started(["a"])
    node = topic.nodes["a"]
    stale = node.tick_report(topic.clock.now()).parts  # its echo comes back only after the cut
    topic.cut.add("a")
    topic.run(12.0)  # deaf past its lease: it listens again; the report is pruned meanwhile
    assert not node.settled() and all(seq != stale[0].sequence for seq, _, _ in node.own.sent)
    topic.cut.discard("a")
    for part in stale:
        node.receive(serialize_report(part), None, topic.clock.now())
    topic.run(3.0)
    assert node.lease_valid(topic.clock.now())
    assert topic.limits() == {"a": 100.0}


def test_a_peers_restart_leaves_the_others_their_shares_and_the_sum_within_the_quota() -> None:
    """A restarted peer holds nothing of ours, or a state we reported since it subscribed: the
    others go on counting their demand as of then (60 all along), not as idle, so they keep
    their shares while it settles; the limits never sum over the quota."""
    topic = started(["a", "b", "c"])
    topic.run(3.0, {"a": 60, "b": 60, "c": 60})
    assert topic.limits() == pytest.approx({"a": 33.3, "b": 33.3, "c": 33.3}, abs=1.0)
    restarted = ClusterNode(NodeConfig("c", TICK, react_seconds=REACT), 2, topic.clock, lambda: topic.groups)
    restarted.limiter.state(QUOTA, "publish")
    topic.nodes["c"] = restarted
    topic.publish("c", restarted.hello_report(topic.clock.now()))
    lowest = {"a": math.inf, "b": math.inf}
    sums: list[float] = []

    def check() -> None:
        lim = topic.limits()
        sums.append(sum(lim.values()))
        for i in lowest:
            lowest[i] = min(lowest[i], lim[i])

    topic.run(4.0, {"a": 60, "b": 60, "c": 60}, check=check)
    assert max(sums) <= 100.0 + 1e-6
    assert min(lowest.values()) >= 30.0  # a floor (2 % of the quota) where it counted itself idle
    assert topic.limits() == pytest.approx({"a": 33.3, "b": 33.3, "c": 33.3}, abs=1.0)


def test_a_tick_after_an_early_report_of_a_burst_reports_the_whole_ticks_demand() -> None:
    """40 asks a second, all in bursts at the start of each tick: the early report reads the
    burst (200/s over its fifth of a tick); the rest of the tick alone would read 0, and our own
    demand counts as the smallest of our recent figures. The tick report reads the whole tick:
    40."""
    topic = started(["a", "b"])
    node = topic.nodes["a"]
    topic.run(2.0, {"a": 40, "b": 40})
    figures: list[float] = []
    for _ in range(3):
        for step in range(10):
            topic.clock.t = round(topic.clock.t + REACT, 9)
            ticking = step == 9
            if step < 2:
                topic.ask("a", 20)
            if ticking:
                out = node.tick_report(topic.clock.now())
                topic.publish("a", out.parts)
                gu = next(g for g in out.report.groups if g.group == "g")
                figures.append(gu.publish.admitted_messages + gu.publish.throttled_messages)
                node.upkeep(topic.clock.now())
            node.recompute_changed(topic.clock.now())
            topic.publish("a", node.react(topic.clock.now()))
            topic.deliver()
    assert figures == [40, 40, 40]


def test_usage_recorded_once_a_tick_reads_at_its_rate_and_is_no_rise() -> None:
    """Brokers record dispatched usage after the fact (/v1/usage), often once a second: 40
    messages recorded at once a fifth of a tick after our tick, then nothing. Measured over
    the window since the tick (an early report's shortest, a fifth of a tick), they read 200 a
    second: a rise, reported at once, and peers folded five times our demand. A record covers
    the time since the one before it, so every figure of ours reads 40, and so does what the
    peer holds of us at every step."""
    topic = started(["a", "b"])
    node = topic.nodes["a"]
    figures: list[float] = []  # what every report of ours naming g says of its demand
    held: list[float] = []  # what the peer holds of our demand, at every step
    for second in range(6):
        for step in range(10):
            topic.clock.t = round(topic.clock.t + REACT, 9)
            now = topic.clock.now()
            if step == 1:
                node.limiter.record_usage(QUOTA, "publish", 40, 4000, "t/ns")
            topic.steps += 1
            topic.deliver()
            parts: list[UsageReport] = []
            for i, n in topic.nodes.items():
                sent = []
                if step == 9:
                    sent += n.tick_report(now).parts
                    n.upkeep(now)
                n.recompute_changed(now)
                sent += n.react(now)
                topic.publish(i, sent)
                parts += sent if i == "a" else []
            if second >= 2:  # the first record covers the time since the group's birth
                figures += [g.publish.admitted_messages + g.publish.throttled_messages for p in parts
                            for g in p.groups if g.group == "g" and g.HasField("publish")]
                held.append(topic.nodes["b"].usage_map.groups["g"]["a"].usage.publish.demand_messages)
    assert all(f == 40 for f in figures), figures  # a steady figure is suppressed: maybe none
    assert held and all(h == 40.0 for h in held), held


def test_a_rise_is_measured_against_our_figures_before_a_report_that_never_left() -> None:
    """A report that never left (no broker) is as if it had not been made, so a group's rise
    is measured against the figure before it again, though nothing was counted since the rise
    test last read the group (it reads only what may have changed)."""
    topic = started(["a"])
    node = topic.nodes["a"]
    topic.run(2.0, {"a": 20})
    assert node.own.latest("g").publish.demand_messages == 20.0
    t = topic.clock.t
    topic.ask("a", 100)
    parts = node.tick_report(round(t + TICK, 9)).parts  # 100 a second, its window's mark now
    assert node.own.latest("g").publish.demand_messages == 100.0
    topic.clock.t = round(t + TICK + 0.3, 9)
    topic.ask("a", 30)
    assert node._risen(round(t + TICK + 0.5, 9)) == []  # 60 a second is no rise on 100
    node.unsent(parts)
    assert node.own.latest("g").publish.demand_messages == 20.0
    assert node._risen(round(t + TICK + 0.6, 9)) == ["g"]  # 50 a second is one on 20


def test_a_rate_under_a_message_a_tick_is_measured_over_several_ticks_not_read_as_idle() -> None:
    """Asks at 0.6 a second, one in each of 3 ticks out of 5. Measured tick by tick, every other
    figure read 0 (idle), or a window of 2 messages in 4 ticks rounded to 0 whole messages a
    tick: the smallest of our recent figures was idle nearly always, and the group was held to
    the idle floor. Measured until two messages arrived (or four ticks passed), any demand
    reading at least a message a tick, no figure reads idle."""
    topic = started(["a", "b"])
    node = topic.nodes["a"]
    demands = []
    for arrivals in [1, 0, 1, 0, 1] * 4:
        if arrivals:
            topic.ask("a", 1)
        topic.run(1.0)
        latest = node.own.latest("g")
        demands.append(None if latest is None else (latest.publish.demand_messages, latest.publish.demand_bytes))
    assert node.limiter.state(QUOTA, "publish").total_admitted_messages == 12
    assert all(d is not None and d[0] == 1.0 and 0 < d[1] <= 100.0 for d in demands), demands  # never idle
    held = node.own.as_held("g", node._oldest_held(topic.clock.now()))
    assert held is not None and held.publish.demand_messages == 1.0


def test_a_group_that_wakes_after_idle_ticks_reads_the_rate_it_wakes_at() -> None:
    """Idle ticks move an idle group's window on, as any measured tick does: a group that
    wakes at 50 a second reads 50, not 50 spread over the ticks it was idle."""
    topic = started(["a", "b"])
    node = topic.nodes["a"]
    topic.run(3.0, {"a": 20})
    topic.run(6.0)
    assert node.own.latest("g") is None  # reported idle
    first: list[float] = []
    for _ in range(10):
        topic.run(REACT, {"a": 50})
        latest = node.own.latest("g")
        if latest is not None and not first:
            first.append(latest.publish.demand_messages)
    assert first and first[0] == pytest.approx(50, rel=0.25)  # its first report, early or at the tick


def test_a_group_configured_after_a_peer_reported_it_has_the_peers_figures_at_once() -> None:
    """Configs reach daemons at different times (a file rolled out node by node, the config
    topic's delay). A peer reports x7 while x7 is not configured here yet; its later reports
    name only what changed. Once x7 is configured here, the peer's figure must be there: a
    node that kept only configured groups' entries counted the peer idle in x7 until it named
    x7 again, and granted itself the peer's share meanwhile."""
    clock = FakeClock(0.0)
    groups = {"g": QUOTA}
    node = ClusterNode(NodeConfig("a"), 1, clock, lambda: groups)
    assert node.receive(sent(report("b", 1, 0, {"g": 40.0, "x7": 20.0}), clock), None, 0.0).accepted
    assert node.receive(sent(report("b", 2, 1, {"g": 45.0}), clock), None, 0.0).accepted  # x7 unchanged
    groups["x7"] = ResourceGroup("x7", publish_msgs=50.0)
    node.apply_config()
    node.usage_map.fold_group("x7")  # as the node does when it first computes a limit of x7
    assert node.usage_map.groups["x7"]["b"].usage.publish.admitted_messages == 20.0


def test_a_group_a_node_starts_serving_has_its_peers_figures_at_once() -> None:
    """A peer's entries of groups we do not serve are held unparsed (most of a report at
    PIP-82's size); the first ask of such a group parses them, so our first limit there
    leaves the busy peer its share. Dropped instead, the peer would read idle in it until it
    named the group again (peers report only what changed)."""
    clock = FakeClock(0.0)
    x7 = ResourceGroup("x7", publish_msgs=100.0)
    topic = Topic(clock, ["a", "b"], {"g": QUOTA, "x7": x7})
    a, b = topic.nodes["a"], topic.nodes["b"]
    for _ in range(int(round(6.0 / REACT))):
        clock.t = round(clock.t + REACT, 9)
        for _ in range(8):  # 80 a second, on a quota of 100
            b.limiter.acquire(x7, "publish", 1, 100, "t/ns")
        topic.step(abs(clock.t / TICK - round(clock.t / TICK)) < 1e-9)
    assert "x7" not in a.usage_map.folded and any(len(h.keys) for h in a.usage_map.members["b"].unparsed)
    assert a.limiter.acquire(x7, "publish", 1, 100, "t/ns").allowed
    assert a.usage_map.groups["x7"]["b"].usage.publish.demand_messages == pytest.approx(80, rel=0.15)
    ours = a.limiter.limit_in_force(x7, "publish")[0]
    assert ours <= 100 - 60  # b keeps at least the 60 of its 80 that it was using


# -- the clock ------------------------------------------------------------------------------------


def test_reports_carry_the_wall_time_of_the_instant_they_were_built_for() -> None:
    clock = FakeClock(100.0)
    node = ClusterNode(NodeConfig("a"), 1, clock, lambda: {"g": QUOTA})
    out = node.tick_report(40.0)  # built for t = 40 while the clock reads 100
    # A wall clock that ignored its argument (the daemon's before) would stamp t = 100.
    assert out.parts[0].publish_time_ms == int((EPOCH + 40.0) * 1000)


def test_the_daemons_wall_clock_maps_a_past_instant_to_the_wall_time_then() -> None:
    clock = WallClock()
    then = clock.now() - 5.0
    assert abs(clock.wall_ms(then) - (time.time() - 5.0) * 1000) < 50


def test_our_own_report_back_from_the_topic_is_not_a_member() -> None:
    clock = FakeClock(0.0)
    node = ClusterNode(NodeConfig("a"), 1, clock, lambda: {"g": QUOTA})
    data = serialize_report(node.hello_report(0.0)[0])
    clock.t = 0.1
    assert node.receive(data, None, 0.1).reason == REJECT_OWN
    assert node.usage_map.members == {}
    assert node.heard_at == 0.1  # our echo: the topic carries our reports


def test_a_shadowed_groups_report_carries_what_would_have_been_throttled() -> None:
    """Shadow mode: the broker is told yes, so the messages are admitted usage (they count in
    the shares), and the report says apart how many the limit would have throttled."""
    group = ResourceGroup("g", publish_msgs=100.0, shadow_mode=True)
    clock = FakeClock(0.0)
    node = ClusterNode(NodeConfig("a"), 1, clock, lambda: {"g": group})
    node.limiter.state(group, "publish", 0.0)  # made at t = 0; not settled yet: its limit is 0
    clock.t = 0.5
    # The limiter's decision is the real one (the API answers the broker yes beside it).
    assert not node.limiter.acquire(group, "publish", 5, 500, "t/ns").allowed
    entry = next(g for g in node.tick_report(1.0).parts[0].groups if g.group == "g")
    assert (entry.publish.admitted_messages, entry.publish.throttled_messages) == (5, 0)
    assert (entry.publish.shadow_throttled_messages, entry.publish.shadow_throttled_bytes) == (5, 500)


# -- what a node folds, and what an acknowledgement makes it recompute -------------------------


def sent(r: UsageReport, clock: FakeClock) -> bytes:
    """A report as it reaches a node from the topic: stamped with the wall time of now."""
    r.publish_time_ms = clock.wall_ms(clock.now())
    return serialize_report(r)


def test_an_acknowledgement_marks_dirty_only_the_groups_named_since_the_oldest_one() -> None:
    """Our own view of a group (the smallest figure a peer may hold) moves with the oldest
    acknowledgement only for groups we named after it: an acknowledgement marks those dirty,
    not every group we ever named."""
    clock = FakeClock(0.0)
    groups = {n: ResourceGroup(n, publish_msgs=100.0) for n in ("p", "q", "r")}
    node = ClusterNode(NodeConfig("a"), 1, clock, lambda: groups)
    for n in ("p", "q", "r"):
        node.limiter.state(groups[n], "publish")
    node.own.record(node.own.next_sequence(), 0.0, 3.0, {"p": usage(5.0), "q": usage(5.0), "r": usage(5.0)})
    assert node.receive(sent(report("b", 1, 0, {}, acks={"a": 1}), clock), None, 0.0).accepted
    node.recompute_changed(0.0)
    node.own.record(node.own.next_sequence(), 0.5, 3.0, {"q": usage(9.0)})  # report 2 names q alone
    assert node.receive(sent(report("b", 2, 1, {}, acks={"a": 2}), clock), None, 0.5).accepted
    assert node.dirty == {"q"} and not node.all_dirty


def test_own_report_passes_build_entries_only_for_groups_counted_or_last_reported(monkeypatch) -> None:
    """At PIP-82's size a daemon serves 5 000 groups and brokers ask for a few hundred a second:
    a tick reads the groups counted since their mark or our last tick, and those whose last
    report said they were busy (they must be reported idle), and builds entries for those of
    them it sends; a react reads only the buckets counted since their mark. The others read
    zero either way."""
    import rgd.cluster.node as node_module

    clock = FakeClock(0.0)
    groups = {f"g{i}": ResourceGroup(f"g{i}", publish_msgs=100.0) for i in range(200)}
    node = ClusterNode(NodeConfig("a", TICK, react_seconds=REACT), 1, clock, lambda: groups)
    for g in groups.values():
        node.limiter.acquire(g, "publish", 1, 10, "t/ns")  # every group busy once
    built: list[list[str]] = []
    group_entries = node_module.group_entries

    def counting(collected, states, registry, names=None):  # type: ignore[no-untyped-def]
        built.append(list(names or []))
        return group_entries(collected, states, registry, names)

    monkeypatch.setattr(node_module, "group_entries", counting)
    for step in range(1, 3 * int(TICK / REACT) + 1):  # three ticks; g7 asked in the last one
        clock.t = round(step * REACT, 9)
        if step > 2 * int(TICK / REACT):
            node.limiter.acquire(groups["g7"], "publish", 1, 10, "t/ns")
        if abs(clock.t / TICK - round(clock.t / TICK)) < 1e-9:
            out = node.tick_report(clock.t)
            if step < 3 * int(TICK / REACT):
                built.clear()
        else:
            node.react(clock.t)
    # Tick 1: every group is reported busy; tick 2: idle (said at once); then only g7 is
    # counted, and nothing else is left to say: its reacts build g7 alone, and the tick builds
    # what it sends (g7's rise went out early, so its figures may stand as sent).
    assert built[0] == ["g7"] and all(b == ["g7"] for b in built[:-1]), built
    assert built[-1] == sorted(out.sent) and set(out.sent) <= {"g7"}, (built, out.sent)


# -- message sizes in a group that limits messages and bytes together (P1's stated bound) -----


JOINT = ResourceGroup("j", publish_msgs=100.0, publish_bytes=20_000.0)


@pytest.mark.parametrize(("sizes", "after", "rate", "delay"), [
    ({"a": 550, "b": 80}, {"a": 200, "b": 270}, 140, 2),
    ({"a": 550, "b": 1000}, {"a": 80, "b": 80}, 95, 0),
    ({"a": 50, "b": 550}, {"a": 200, "b": 50}, 142, 1),
    ({"a": 80, "b": 80}, {"a": 550, "b": 270}, 169, 0),
    ({"a": 200, "b": 50}, {"a": 1000, "b": 80}, 125, 1),
])
def test_message_sizes_changing_under_a_joint_split_never_grant_more_than_the_quota(
        sizes: dict[str, int], after: dict[str, int], rate: int, delay: int) -> None:
    """Both daemons ask `rate` messages a second, more than the quota, at their message sizes;
    then the sizes change. A daemon whose messages grew larger leaves the other more messages
    in the joint split; it must take its own fewer before the report saying so is folded
    (each daemon takes no more than its share with any state of its own a peer may hold).
    At every step the limits sum to at most each quota (the invariant, checked literally)."""
    clock = FakeClock(0.0)
    topic = Topic(clock, ["a", "b"], {"j": JOINT}, delay=delay)
    for i, node in topic.nodes.items():
        node.limiter.state(JOINT, "publish")
        topic.publish(i, node.hello_report(0.0))

    def run(seconds: float, check: object = None) -> None:
        for _ in range(int(round(seconds / REACT))):
            clock.t = round(clock.t + REACT, 9)
            for who, node in topic.nodes.items():
                for _ in range(int(rate * REACT)):
                    node.limiter.acquire(JOINT, "publish", 1, sizes[who], "t/ns")
            topic.step(abs(clock.t / TICK - round(clock.t / TICK)) < 1e-9)
            if callable(check):
                check()

    sums: list[tuple[float, float]] = []

    def check() -> None:
        limits = [n.limiter.limit_in_force(JOINT, "publish") for n in topic.nodes.values()]
        sums.append((sum(m for m, _ in limits), sum(b for _, b in limits)))

    run(5.0, check)
    sizes.update(after)
    run(5.0, check)
    assert max(m for m, _ in sums) <= 100.0 * (1 + 1e-9)
    assert max(b for _, b in sums) <= 20_000.0 * (1 + 1e-9)


TWO_KINDS = ResourceGroup("k", publish_msgs=100.0, dispatch_msgs=100.0)


def test_a_fall_in_one_kind_lowers_its_limit_though_another_kind_rose_in_the_same_report() -> None:
    """a publishes 20 and dispatches 80 a second, b dispatches 80: dispatch splits 50 / 50.
    Then a publishes 40 and dispatches 10. Its report says both; b may take a's dispatch the
    moment it folds it, so a's dispatch limit must be down before the report goes out,
    though its publish figure rose (a report's figures are not one number that rises or
    falls)."""
    clock = FakeClock(0.0)
    topic = Topic(clock, ["a", "b"], {"k": TWO_KINDS})
    for i, node in topic.nodes.items():
        for kind in ("publish", "dispatch"):
            node.limiter.state(TWO_KINDS, kind)
        topic.publish(i, node.hello_report(0.0))
    load = {"a": {"publish": 20, "dispatch": 80}, "b": {"publish": 0, "dispatch": 80}}

    def ask(who: str) -> None:
        for kind, r in load[who].items():
            for _ in range(int(r * REACT)):
                topic.nodes[who].limiter.acquire(TWO_KINDS, kind, 1, 100, "t/ns")

    for _ in range(50):
        clock.t = round(clock.t + REACT, 9)
        ask("a")
        ask("b")
        topic.step(abs(clock.t / TICK - round(clock.t / TICK)) < 1e-9)
    a = topic.nodes["a"]
    assert a.limiter.limit_in_force(TWO_KINDS, "dispatch")[0] == pytest.approx(50.0, abs=1.0)
    load["a"] = {"publish": 40, "dispatch": 10}
    for _ in range(10):  # a tick of the new load, no step: nothing but the report recomputes a's limits
        clock.t = round(clock.t + REACT, 9)
        ask("a")
    now = clock.now()
    parts = a.tick_report(now).parts
    b = topic.nodes["b"]
    for part in parts:  # b folds it at once
        b.receive(serialize_report(part), None, now)
    b.recompute_changed(now)
    ours, theirs = (n.limiter.limit_in_force(TWO_KINDS, "dispatch")[0] for n in (a, b))
    assert theirs > 50.0  # b took what a gave up ...
    assert ours + theirs <= 100.0 + 1e-6  # ... which a had given up before its report went out


def test_a_lone_daemon_keeps_the_whole_quota_of_a_joint_group_as_its_figures_change() -> None:
    """A changed message size lowers our limits as a report leaves to guard peers that will
    fold it; alone there are none: 10 messages of 1 200 bytes asked just before a tick (a rate
    of 200 a second over its first 0.05 s) leave the limits at the quota (the joint split would
    cut the bytes limit to the messages times their size)."""
    group = ResourceGroup("gold", publish_msgs=1000.0, publish_bytes=10_485_760.0)
    clock = FakeClock(0.0)
    node = ClusterNode(NodeConfig("a", TICK, react_seconds=0.05), 1, clock, lambda: {"gold": group})
    for part in node.hello_report(0.0):
        node.receive(serialize_report(part), None, 0.0)
    for step in range(1, 61):  # 3 s in react intervals of 0.05 s
        clock.t = now = round(step * 0.05, 9)
        if step == 59:
            node.limiter.acquire(group, "publish", 10, 12_000, "acme/orders")
        if step % 20 == 0:
            for part in node.tick_report(now).parts:
                node.receive(serialize_report(part), None, now)
        node.recompute_changed(now)
        for part in node.react(now):
            node.receive(serialize_report(part), None, now)
    assert node.limiter.limit_in_force(group, "publish") == (1000.0, 10_485_760.0)


def _whole_messages_run(group: ResourceGroup, rates: dict[str, float], sizes: dict[str, int],
                        seconds: int) -> tuple[Topic, dict[int, int], dict[int, int], dict[int, float]]:
    """Nodes asked for one message at a time at `rates` (messages a second, of `sizes` bytes),
    for `seconds`: the topic, and per wall-clock second the messages and bytes admitted and
    the nodes' bytes limits in messages, summed (the most in that second)."""
    clock = FakeClock(0.0)
    topic = Topic(clock, list(rates), {group.name: group})
    for i, node in topic.nodes.items():
        node.limiter.state(group, "publish")
        topic.publish(i, node.hello_report(0.0))
    owed = dict.fromkeys(rates, 0.0)
    admitted: dict[int, int] = {}
    admitted_bytes: dict[int, int] = {}
    bound: dict[int, float] = {}
    for _ in range(int(seconds / REACT)):
        clock.t = round(clock.t + REACT, 9)
        second = math.floor(clock.t + 1e-9)  # the wall-clock second (EPOCH is a whole second)
        ticking = abs(clock.t / TICK - round(clock.t / TICK)) < 1e-9
        for who, rate in rates.items():
            owed[who] += rate * REACT
            while owed[who] >= 1.0:
                owed[who] -= 1.0
                ok = topic.nodes[who].limiter.acquire(group, "publish", 1, sizes[who], "t/ns").allowed
                admitted[second] = admitted.get(second, 0) + ok
                admitted_bytes[second] = admitted_bytes.get(second, 0) + ok * sizes[who]
        topic.step(ticking)
        in_messages = sum(topic.nodes[w].limiter.limit_in_force(group, "publish")[1] / sizes[w] for w in rates)
        bound[second] = max(bound.get(second, 0.0), in_messages)
    return topic, admitted, admitted_bytes, bound


def test_small_unequal_shares_take_their_turns_end_to_end() -> None:
    """Three nodes share 1 000 bytes/s, their messages 100, 130 and 70 bytes, with demands of
    2, 20 and 20 messages a second: bytes shares whose fractional messages differ. Each
    node's turns start where the fractions of the nodes before it by id end (their limits as
    reported), and in no wall-clock second do they admit more whole messages than their
    limits' sum in messages rounded up (literally counted, second by second)."""
    small = ResourceGroup("g", publish_bytes=1000.0)
    sizes = {"a": 100, "b": 130, "c": 70}
    topic, admitted, _, bound = _whole_messages_run(small, {"a": 2.0, "b": 20.0, "c": 20.0}, sizes, 40)
    steady = range(10, 39)
    over = {s: (admitted[s], bound[s]) for s in steady if admitted[s] > math.ceil(bound[s] - 1e-9)}
    assert not over, over
    assert sum(admitted[s] for s in steady) >= 0.95 * sum(bound[s] for s in steady)
    fractions = {i: n.limiter.limit_in_force(small, "publish")[1] / sizes[i] % 1.0 for i, n in topic.nodes.items()}
    assert min(abs(fractions["b"] - fractions["c"]), abs(fractions["a"] - fractions["c"])) > 0.05  # they differ
    places = {i: n.limiter.states[("g", "publish")].place for i, n in topic.nodes.items()}
    assert places["a"].before_bytes == 0.0
    assert places["b"].before_bytes == pytest.approx(fractions["a"], abs=0.02)
    assert places["c"].before_bytes == pytest.approx(fractions["a"] + fractions["b"], abs=0.02)


def test_where_one_more_message_would_pass_the_tolerance_the_nodes_round_down_together() -> None:
    """Three nodes saturating 37 850 bytes/s of 5 254-byte messages (7.2 a second): shares of
    about 2.36 messages each, whose fractions sum past one. Rounded up they would admit 8
    messages in some seconds, 11 % over; no second admits more than the quota plus 10 %, and
    the quota is still used (7 messages a second of 7.2)."""
    group = ResourceGroup("g", publish_bytes=37850.0)
    sizes = dict.fromkeys("abc", 5254)
    _, admitted, admitted_bytes, _ = _whole_messages_run(group, dict.fromkeys("abc", 20.0), sizes, 70)
    steady = range(10, 69)
    assert max(admitted_bytes[s] for s in steady) <= 37850.0 * 1.1, {s: admitted[s] for s in steady}
    assert sum(admitted[s] for s in steady) >= 6.9 * len(steady)
