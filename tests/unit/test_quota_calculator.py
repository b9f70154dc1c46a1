"""compute_limits / allocate_group: the contract the daemon calls."""

from __future__ import annotations

import itertools
import math

import pytest

from rgd.config.groups import ResourceGroup
from rgd.quota.calculator import (
    STRATEGIES,
    UNSET,
    QuotaParams,
    allocate_group,
    as_peers_see_me,
    compute_limits,
    splits_jointly,
)
from rgd.quota.max_min_fair import floor_share
from rgd.quota.model import KindRates, PeerUsage

INF = math.inf
G = ResourceGroup("g", publish_msgs=300, publish_bytes=-1, dispatch_msgs=-1, dispatch_bytes=-1)


def pu(admitted: float, throttled: float = 0.0, limit: float = INF, reports: int = 5, nbytes: int = 1000) -> PeerUsage:
    return PeerUsage(
        KindRates(admitted, admitted * nbytes, throttled, throttled * nbytes, limit, INF),
        KindRates(),
        reports,
    )


def test_strategies_registry() -> None:
    assert set(STRATEGIES) == {"rgd", "pulsar", "doorman-proportional", "doorman-fair", "static"}
    with pytest.raises(ValueError, match="strategy: 'nope'"):
        compute_limits(G, {}, "a", {"a"}, "nope")


def test_unlimited_dimensions_are_inf() -> None:
    limits = compute_limits(G, {"a": pu(100)}, "a", {"a"}, previous=pu(100))
    assert set(limits) == {"publish", "dispatch", "replication"}
    assert math.isinf(limits["publish"][1]) and limits["dispatch"] == limits["replication"] == (INF, INF)
    free = ResourceGroup("free")
    for strategy in STRATEGIES:
        assert compute_limits(free, {"a": pu(5)}, "a", {"a"}, strategy) == {
            "publish": (INF, INF), "dispatch": (INF, INF), "replication": (INF, INF)}


def test_dimensions_are_independent() -> None:
    g = ResourceGroup("g", publish_msgs=300, publish_bytes=30_000)
    usage = {"a": pu(240, nbytes=10), "b": pu(90, nbytes=200)}  # bytes demand: 2400 vs 18000
    got = allocate_group(g, usage, {"a", "b"})
    assert got["a"]["publish"][0] > got["b"]["publish"][0]
    assert got["a"]["publish"][1] < got["b"]["publish"][1]


def test_binding_example_every_view_agrees() -> None:
    usage = {"a": pu(180, 60), "b": pu(90), "c": pu(30)}
    shares = allocate_group(G, usage, {"a", "b", "c"})
    msgs = {d: shares[d]["publish"][0] for d in shares}
    assert msgs == pytest.approx({"a": 180, "b": 90, "c": 30}, rel=0.02)
    assert sum(msgs.values()) <= 300 + 1e-9
    for d in usage:  # each daemon computing for itself finds the same share
        assert compute_limits(G, usage, d, {"a", "b", "c"}, previous=usage[d])["publish"][0] == pytest.approx(msgs[d])


def test_newcomer_with_an_empty_map_gets_a_bounded_start() -> None:
    # Not heard the topic for a tick yet: members it does not know may hold the quota.
    got = compute_limits(G, {}, "new", {"new"}, settled=False)["publish"][0]
    assert got == pytest.approx(QuotaParams().newcomer_fraction * 300)
    assert got < 300 / 10


def test_settled_and_alone_or_nobody_with_demand_splits_the_quota_equally() -> None:
    assert compute_limits(G, {}, "a", {"a"})["publish"][0] == pytest.approx(300)
    idle = {"b": pu(0)}
    assert compute_limits(G, idle, "a", {"a", "b", "c"}, previous=None)["publish"][0] == pytest.approx(100)


def test_first_report_counts_as_unseen() -> None:
    # Our first report is in the map but peers have not folded it: we keep the floor.
    usage = {"a": pu(200, 100, reports=1), "b": pu(100)}
    assert compute_limits(G, usage, "a", {"a", "b"}, previous=None)["publish"][0] == pytest.approx(
        floor_share(300, 2, QuotaParams()))
    # Without `previous` the first report (reports=1) is treated the same way.
    assert compute_limits(G, usage, "a", {"a", "b"})["publish"][0] == pytest.approx(floor_share(300, 2, QuotaParams()))


def test_increase_waits_for_peers_decrease_is_immediate() -> None:
    members = {"a", "b"}
    old = pu(50)
    up = pu(100, 150)  # demand 250 now; peers still see 50
    peers_view = allocate_group(G, {"a": old, "b": pu(200, 50)}, members)["a"]["publish"][0]
    mine = compute_limits(G, {"a": up, "b": pu(200, 50)}, "a", members, previous=old)["publish"][0]
    assert mine == pytest.approx(peers_view)
    later = compute_limits(G, {"a": up, "b": pu(200, 50)}, "a", members, previous=up)["publish"][0]
    assert later > mine
    down = pu(20)
    dropped = compute_limits(G, {"a": down, "b": pu(200, 50)}, "a", members, previous=up)["publish"][0]
    assert dropped < mine


def test_as_peers_see_me_takes_the_smaller_demand() -> None:
    view = as_peers_see_me({"a": pu(100, 50)}, "a", pu(80, 0))
    k = view["a"].publish
    assert k.demand_messages == 80 and k.admitted_messages == 80
    assert as_peers_see_me({"a": pu(1)}, "a", None) == {}
    assert as_peers_see_me({"b": pu(1)}, "a", UNSET) == {"b": pu(1)}


def test_baselines_ignore_previous() -> None:
    usage = {"a": pu(100, 50), "b": pu(100)}
    for strategy in ("pulsar", "doorman-fair", "static"):
        assert compute_limits(G, usage, "a", {"a", "b"}, strategy, previous=None) == \
            compute_limits(G, usage, "a", {"a", "b"}, strategy, previous=pu(1))


def test_deterministic_whatever_the_insertion_order() -> None:
    a = {"x": pu(10), "y": pu(500, 20), "z": pu(70)}
    b = dict(reversed(list(a.items())))
    for strategy in STRATEGIES:
        assert (allocate_group(G, a, ["z", "x", "y", "w"], strategy)
                == allocate_group(G, b, ["w", "y", "x", "z"], strategy))


def test_map_entries_outside_members_are_included() -> None:
    got = allocate_group(G, {"ghost": pu(100)}, {"a"})
    assert set(got) == {"a", "ghost"}


def test_quota_zero_blocks_and_params_flow_through() -> None:
    g0 = ResourceGroup("g0", publish_msgs=0)
    assert compute_limits(g0, {"a": pu(10)}, "a", {"a"}, previous=pu(10))["publish"][0] == 0
    p = QuotaParams(newcomer_fraction=0.1, idle_reserve_fraction=1.0)
    assert compute_limits(G, {}, "a", {"a"}, params=p, settled=False)["publish"][0] == pytest.approx(30)


def test_coupled_limits_fill_the_bytes_quota_that_message_bound_daemons_leave() -> None:
    # Fuzz case 1-249, g01/publish: 2113 msg/s and 10.32 MB/s; five daemons want 397 msg/s
    # each, in messages of 4.2-14.8 kB. Three are bound by messages and use 51 % of the bytes;
    # split in dominant shares summing to 1, the two large-message daemons got 341 and 146
    # msg/s and 7 % of the bytes quota went unused for good. The judge (sim/oracle.py) says
    # 397 and 173: d03's whole demand, d07 the bytes left.
    g = ResourceGroup("g", publish_msgs=2113, publish_bytes=10_320_000, dispatch_msgs=-1, dispatch_bytes=-1)
    sizes = {"d01": 4707, "d03": 6315, "d04": 4340, "d06": 4212, "d07": 14801}
    was = {"d01": 397, "d03": 341, "d04": 397, "d06": 397, "d07": 146}  # the old steady state
    usage = {d: PeerUsage(KindRates(was[d], was[d] * s, 397 - was[d], (397 - was[d]) * s, was[d], was[d] * s))
             for d, s in sizes.items()}
    got = {d: limits["publish"][0] for d, limits in allocate_group(g, usage, set(sizes)).items()}
    assert got["d03"] == pytest.approx(397, rel=0.01)
    assert got["d07"] == pytest.approx(173, rel=0.01)
    assert sum(got[d] * s for d, s in sizes.items()) <= 10_320_000 * (1 + 1e-9)


def test_a_slow_daemon_whose_bytes_bind_gets_a_message_of_its_own_size_as_headroom() -> None:
    # Fuzz case 1-398, g02/publish: 188.7 msg/s and 15.73 kB/s, twelve daemons offered 1.8 msg/s
    # each in messages of 75-955 bytes, a quarter of the bytes quota used. A demand of a few
    # messages a second is counted to one message, so whoever counted 1 in its last second gets
    # headroom of at least one more. d08's messages are 955 bytes: counted in messages only, that
    # headroom was 0.09 of a message (1 msg/s is 0.5 % of the messages quota, 955 B/s 6 % of the
    # bytes), d08 was held to 1.34 msg/s and its second message in a tick was denied.
    g = ResourceGroup("g", publish_msgs=188.7, publish_bytes=15_730, dispatch_msgs=-1, dispatch_bytes=-1)
    sizes = {"d05": 125, "d07": 365, "d08": 955, "d10": 135, "d11": 75, "d12": 106, "d14": 280, "d15": 364,
             "d16": 191, "d18": 111, "d22": 196, "d23": 110}
    counted = {d: 1.0 if d == "d08" else 2.0 for d in sizes}
    usage = {d: PeerUsage(KindRates(counted[d], counted[d] * s, 0.0, 0.0, 3.0, 3.0 * s)) for d, s in sizes.items()}
    got = allocate_group(g, usage, set(sizes))
    assert got["d08"]["publish"][0] >= 2.0
    assert sum(got[d]["publish"][1] for d in sizes) <= 15_730 * (1 + 1e-9)


@pytest.mark.parametrize("limited", list(itertools.product((False, True), repeat=6)))
def test_a_group_splits_jointly_when_some_kind_limits_both_its_messages_and_its_bytes(limited) -> None:
    # Six rates, each limited (0 blocks: not a positive limit) or unlimited (-1), in every combination.
    fields = ("publish_msgs", "publish_bytes", "dispatch_msgs", "dispatch_bytes",
              "replication_msgs", "replication_bytes")
    rates = dict(zip(fields, (100.0 if on else -1.0 for on in limited), strict=True))
    expected = (limited[0] and limited[1]) or (limited[2] and limited[3]) or (limited[4] and limited[5])
    assert splits_jointly(ResourceGroup("g", **rates)) is expected
    blocked = {f: 0.0 if r > 0 else r for f, r in rates.items()}
    assert splits_jointly(ResourceGroup("g", **blocked)) is False  # a blocked kind has no split at all
