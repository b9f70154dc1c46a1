"""What a daemon folds at PIP-82's scale: its own groups and a bounded few others, vetted
entry by entry only where folded; the delivery delay and the calculator's split halves give
the same answers as before."""

from __future__ import annotations

import asyncio
import hashlib
import math

import pytest

from rgd.cluster.delivery_delay import DeliveryDelay
from rgd.cluster.node import ClusterNode, NodeConfig, evaluate
from rgd.cluster.report_codec import REJECT_INVALID, REJECT_MALFORMED, Rejected, decode_report, serialize_report
from rgd.config.groups import ResourceGroup
from rgd.config.settings import Settings, validate
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport

NOW_MS = 1_800_000_000_000


def _report(names: list[str], sender: str = "peer", sequence: int = 1) -> UsageReport:
    r = UsageReport(daemon_id=sender, sequence=sequence, publish_time_ms=NOW_MS, tick_ms=1000, incarnation=7)
    for i, name in enumerate(names):
        g = GroupUsage(group=name)
        g.publish.admitted_messages = 10 * (i + 1)
        g.publish.limit_messages = -1.0
        r.groups.append(g)
    return r


def test_keep_returns_only_the_chosen_entries_with_their_figures() -> None:
    data = _report(["a", "b", "c", "d"]).SerializeToString()
    out = decode_report(data, NOW_MS, "me", 1, keep=lambda names: names & {"b", "d"})
    assert [(g.group, g.publish.admitted_messages) for g in out.groups] == [("b", 20), ("d", 40)]
    assert (out.daemon_id, out.sequence, out.incarnation, out.tick_ms) == ("peer", 1, 7, 1000)


def test_keep_vets_folded_entries_and_skips_the_rest() -> None:
    r = _report(["a", "b"])
    r.groups[0].publish.limit_messages = math.nan  # absurd, in an entry we do not fold
    data = r.SerializeToString()
    assert [g.group for g in decode_report(data, NOW_MS, "me", 1, keep=lambda n: n & {"b"}).groups] == ["b"]
    with pytest.raises(Rejected) as exc:
        decode_report(data, NOW_MS, "me", 1, keep=lambda n: n & {"a"})
    assert exc.value.reason == REJECT_INVALID and "groups[0].publish.limit_messages" in str(exc.value)
    with pytest.raises(Rejected) as exc:
        decode_report(data, NOW_MS, "me", 1)  # without keep: everything is vetted, as before
    assert exc.value.reason == REJECT_INVALID


@pytest.mark.parametrize("names, where", [(["a", "b", "a"], "groups[2]"), (["a", "", "b"], "groups[1]")])
def test_keep_still_rejects_empty_or_repeated_names_anywhere(names: list[str], where: str) -> None:
    data = _report(names).SerializeToString()
    with pytest.raises(Rejected) as exc:
        decode_report(data, NOW_MS, "me", 1, keep=lambda n: set())
    assert exc.value.reason == REJECT_MALFORMED and where in str(exc.value)


def _node(served: list[str], held: int, registry: dict[str, ResourceGroup]) -> ClusterNode:
    clock = [100.0]
    node = ClusterNode(NodeConfig("me", unserved_groups_held=held), 1, lambda: clock[0],
                       lambda now: NOW_MS, lambda: registry)
    for name in served:
        node.limiter.acquire(registry[name], "publish", 1, 1, f"{name}/ns", now=clock[0])
    return node


def test_a_node_folds_its_groups_and_a_bounded_few_others() -> None:
    names = ["a", "b", "c", "d", "e", "f"]
    registry = {n: ResourceGroup(n, publish_msgs=100.0) for n in names}
    node = _node(["b", "e"], 2, registry)
    assert node.receive(_report(names).SerializeToString(), {}, 100.0).accepted
    # Served b and e; of the others, the first two in key order while there is room
    # (BLAKE2b-64 of the name, little-endian: a and c have the smallest of a, c, d, f).
    by_key = sorted("acdf", key=lambda n: int.from_bytes(hashlib.blake2b(n.encode(), digest_size=8).digest(), "little"))
    assert by_key[:2] == ["c", "a"]
    assert set(node.usage_map.groups) == {"a", "b", "c", "e"}
    assert node.usage_map.groups["c"]["peer"].usage.publish.admitted_messages == 30.0
    # The room is taken: d and f stay out; a and c, already held, are refreshed.
    second = _report(["a", "c", "d", "f"], sequence=2)
    second.groups[0].publish.admitted_messages = 555
    assert node.receive(second.SerializeToString(), {}, 101.0).accepted
    assert set(node.usage_map.groups) == {"a", "b", "c", "e"}
    assert node.usage_map.groups["a"]["peer"].usage.publish.admitted_messages == 555.0


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "no-index"])
def test_reports_vetted_before_any_fold_share_one_room(indexed: bool) -> None:
    """A daemon vets reports as they arrive and folds them later: the first round at PIP-82's
    scale (99 peers' full reports) is vetted before any is folded. The room for groups it
    does not serve is one budget across them, not one per report (each peer brought its own
    first groups in key order, and the map held 4 000 instead of 500)."""
    peers = 12
    others = {p: [f"p{p}-x{i}" for i in range(10)] for p in range(peers)}  # no group in two peers
    names = ["mine", *(g for group_names in others.values() for g in group_names)]
    registry = {n: ResourceGroup(n, publish_msgs=100.0) for n in names}
    node = _node(["mine"], 5, registry)
    encode = serialize_report if indexed else UsageReport.SerializeToString
    vetted = [node.vet(encode(_report(["mine", *others[p]], sender=f"peer{p}")), {}, 100.0) for p in range(peers)]
    for report in vetted:
        assert node.fold(report, 100.0).accepted
    unserved = set(node.usage_map.groups) - {"mine"}
    assert len(unserved) == 5, sorted(unserved)
    assert {f"peer{p}" for p in range(peers)} <= set(node.usage_map.groups["mine"])  # ours from every peer
    # Later reports refresh those five and add none.
    again = [node.vet(encode(_report(["mine", *others[p]], sender=f"peer{p}", sequence=2)), {}, 101.0)
             for p in range(peers)]
    for report in again:
        assert node.fold(report, 101.0).accepted
    assert set(node.usage_map.groups) - {"mine"} == unserved


def test_a_group_served_later_is_folded_from_then_on() -> None:
    registry = {n: ResourceGroup(n, publish_msgs=100.0) for n in ("a", "b")}
    node = _node(["a"], 0, registry)
    node.receive(_report(["a", "b"]).SerializeToString(), {}, 100.0)
    assert set(node.usage_map.groups) == {"a"}
    node.limiter.acquire(registry["b"], "publish", 1, 1, "b/ns", now=100.0)  # brokers start asking about b
    node.receive(_report(["a", "b"], sequence=2).SerializeToString(), {}, 101.0)
    assert set(node.usage_map.groups) == {"a", "b"}


def test_delivery_delay_cache_follows_every_sample() -> None:
    d = DeliveryDelay(default_seconds=1.0, cap_seconds=3.0)
    assert d.seconds() == 1.0
    # (peer, delay ms) -> the slowest peer's median after it, worked out by hand.
    for peer, ms, want in [("p", 10, 0.010), ("p", 30, 0.020), ("p", 20, 0.020), ("q", 50, 0.050),
                           ("q", 5000, 2.525), ("q", 9000, 3.0)]:
        d.observe(peer, 1000, 1000 + ms)
        assert d.seconds() == pytest.approx(want)
    d.forget("q")
    assert d.seconds() == pytest.approx(0.020)
    d.forget("p")
    assert d.seconds() == 1.0


def test_calculator_halves_in_a_thread_give_what_recompute_gives() -> None:
    names = [f"g{i}" for i in range(30)]
    registry = {n: ResourceGroup(n, publish_msgs=1000.0) for n in names}

    def busy_node() -> ClusterNode:
        node = _node(names, 0, registry)
        for seq, peer in enumerate(["p1", "p2"], 1):
            r = _report(names, sender=peer, sequence=seq)
            node.receive(r.SerializeToString(), {}, 100.0)
        for n in names[:10]:
            node.limiter.acquire(registry[n], "publish", 50, 50, f"{n}/ns", now=100.0)
        node.tick_report(101.0)
        return node

    inline, split = busy_node(), busy_node()
    inline.recompute()
    plan = split.recompute_plan(None)

    async def off_loop() -> list:
        return await asyncio.to_thread(lambda: [evaluate(inputs) for _, inputs in plan])

    split.apply_limits(plan, asyncio.run(off_loop()))
    for key, st in inline.limiter.states.items():
        other = split.limiter.states[key]
        assert (other.messages.rate, other.bytes.rate) == (st.messages.rate, st.bytes.rate)


def test_report_compression_setting_is_checked() -> None:
    assert validate(Settings(id="x", report_compression="lz4")).report_compression == "lz4"
    with pytest.raises(ValueError, match=r"report_compression.*'snappy'"):
        validate(Settings(id="x", report_compression="snappy"))


def test_the_tick_recomputes_what_changed_and_everything_when_shares_all_move() -> None:
    names = [f"g{i}" for i in range(8)]
    registry = {n: ResourceGroup(n, publish_msgs=100.0) for n in names}
    clock = [100.0]
    node = ClusterNode(NodeConfig("me", unserved_groups_held=0), 1, lambda: clock[0], lambda now: NOW_MS,
                       lambda: registry)
    for n in names:
        node.limiter.acquire(registry[n], "publish", 1, 1, f"{n}/ns", now=clock[0])
    node.receive(_report(names, sender="p1", sequence=1).SerializeToString(), {}, clock[0])
    assert node.tick_targets(clock[0]) is None  # a new member: every share moved
    node.recompute()
    # Nothing of ours sent this tick, one peer report naming g3 only.
    node._sent_this_tick = set()
    node.receive(_report(["g3"], sender="p1", sequence=2).SerializeToString(), {}, clock[0])
    assert node.tick_targets(clock[0]) == {"g3"}
    node.receive(_report(["g5"], sender="p2", sequence=1).SerializeToString(), {}, clock[0])
    assert node.tick_targets(clock[0]) is None  # p2 joined
    node.recompute()
    refresh = node.config.suppression.max_skipped_ticks + 1
    got = [node.tick_targets(clock[0]) for _ in range(refresh)]
    assert got[:-1] == [set()] * (refresh - 1) and got[-1] is None  # a full one per refresh period
