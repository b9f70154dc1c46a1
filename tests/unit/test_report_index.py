"""The report index (`group_keys`): a receiver parses only the entries it folds, and a
report whose index is missing, inconsistent or lying is read in full, as before.

Expected keys are computed here with hashlib directly (BLAKE2b, 8-byte digest, read
little-endian), not with the codec's helpers."""

from __future__ import annotations

import hashlib
import math

import pytest

from rgd.cluster.node import ClusterNode, NodeConfig
from rgd.cluster.report_codec import (
    MAX_MEMBERS,
    REJECT_INVALID,
    REJECT_MALFORMED,
    REJECT_SIGNATURE,
    REJECT_TOO_MANY_GROUPS,
    FoldScope,
    HmacKeys,
    Rejected,
    decode_report,
    index_report,
    serialize_report,
)
from rgd.config.groups import ResourceGroup
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport
from tests.support.fake_clock import FakeClock

NOW_MS = 1_800_000_000_000
CLOCK_AT = 100.0  # a node's monotonic now; its wall clock reads NOW_MS then


def node_clock() -> FakeClock:
    return FakeClock(CLOCK_AT, epoch_ms=NOW_MS - round(CLOCK_AT * 1000))


def key(name: str) -> bytes:
    return hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()


def entry(name: str, admitted: int) -> GroupUsage:
    g = GroupUsage(group=name)
    g.publish.admitted_messages = admitted
    g.publish.limit_messages = -1.0
    return g


def report(names: list[str], sender: str = "peer", sequence: int = 1) -> UsageReport:
    r = UsageReport(daemon_id=sender, sequence=sequence, publish_time_ms=NOW_MS, tick_ms=1000, incarnation=7)
    r.groups.extend(entry(n, 10 * (i + 1)) for i, n in enumerate(names))
    return r


def raw_entry(data: bytes) -> bytes:
    """Bytes as field 6 of a UsageReport (tag 0x32, one-byte length)."""
    assert len(data) < 128
    return bytes([0x32, len(data)]) + data


def with_index(header: UsageReport, entries: list[bytes], keys: list[bytes]) -> bytes:
    """A report assembled on the wire: header, raw entries, then field 9 (tag 0x4a)."""
    index = b"".join(keys)
    assert len(index) < 128
    return header.SerializeToString() + b"".join(raw_entry(e) for e in entries) + bytes([0x4A, len(index)]) + index


def decode(data: bytes, scope: FoldScope, **kw) -> UsageReport:
    return decode_report(data, NOW_MS, "me", 1, scope=scope, **kw)


def picked(r: UsageReport) -> list[tuple[str, int]]:
    return [(g.group, g.publish.admitted_messages) for g in r.groups]


def test_senders_index_every_entry_in_order() -> None:
    r = index_report(report(["b", "a", "zz/ü"]))
    assert r.group_keys == key("b") + key("a") + key("zz/ü")
    assert UsageReport.FromString(serialize_report(report(["x", "y"]))).group_keys == key("x") + key("y")


def test_only_the_folded_entries_are_parsed() -> None:
    # The middle entry is not a GroupUsage at all (a truncated field): skipped through the
    # index, it is never parsed; read in full, it makes the report malformed.
    header = report([]).SerializeToString()
    good = [entry(n, 10 * (i + 1)).SerializeToString() for i, n in enumerate(["a", "b", "c"])]
    broken = bytes([0x0A, 0x7F, 0x41])  # field 1, says 127 bytes, has 1
    data = with_index(UsageReport.FromString(header), [good[0], broken, good[2]], [key("a"), key("q"), key("c")])
    out = decode(data, FoldScope({"a", "c"}))
    assert picked(out) == [("a", 10), ("c", 30)]
    assert (out.daemon_id, out.sequence, out.incarnation, out.tick_ms, out.publish_time_ms) == (
        "peer", 1, 7, 1000, NOW_MS)
    with pytest.raises(Rejected) as exc:
        decode_report(data, NOW_MS, "me", 1)
    assert exc.value.reason == REJECT_MALFORMED


def test_a_report_without_index_is_read_in_full_with_the_same_choice() -> None:
    data = report(["a", "b", "c", "d"]).SerializeToString()  # an older sender: no group_keys
    assert picked(decode(data, FoldScope({"b", "d"}))) == [("b", 20), ("d", 40)]
    r = report(["a", "b"])
    r.groups[0].group = "b"  # repeated: only the full read sees it, and it still rejects it
    with pytest.raises(Rejected) as exc:
        decode(r.SerializeToString(), FoldScope({"b"}))
    assert exc.value.reason == REJECT_MALFORMED and "groups[1]" in str(exc.value)


@pytest.mark.parametrize("keys", [
    [key("a"), key("b")],  # one key short
    [key("a"), key("b"), key("c"), key("d")],  # one too many
    [key("a"), key("b"), key("c")[:7]],  # not a multiple of 8
])
def test_an_index_of_the_wrong_length_is_not_used(keys: list[bytes]) -> None:
    r = report(["a", "b", "c"])
    data = with_index(report([]), [g.SerializeToString() for g in r.groups], keys)
    r.groups[0].publish.limit_messages = math.nan
    bad = with_index(report([]), [g.SerializeToString() for g in r.groups], keys)
    assert picked(decode(data, FoldScope({"c"}))) == [("c", 30)]
    # Read in full: a wrong entry the index would have let us skip is seen (today's vetting
    # of the whole report applies only to names; values are vetted where folded).
    assert picked(decode(bad, FoldScope({"c"}))) == [("c", 30)]
    with pytest.raises(Rejected) as exc:
        decode(bad, FoldScope({"a"}))
    assert exc.value.reason == REJECT_INVALID


def test_a_lying_index_cannot_pass_an_entry_off_as_a_served_group() -> None:
    # Hostile: the entry is "x", the index gives it the key of "b", which we serve.
    data = with_index(report([]), [entry("x", 999).SerializeToString(), entry("y", 5).SerializeToString()],
                      [key("b"), key("y")])
    out = decode(data, FoldScope({"b"}))
    assert picked(out) == []  # read in full: neither x nor y is ours, and nothing is called b
    registry = {n: ResourceGroup(n, publish_msgs=100.0) for n in ("b", "x", "y")}
    node = ClusterNode(NodeConfig("me"), 1, node_clock(), lambda: registry)
    node.limiter.acquire(registry["b"], "publish", 1, 1, "b/ns", now=CLOCK_AT)
    assert node.receive(data, {}, CLOCK_AT).accepted
    assert "peer" not in node.usage_map.groups.get("b", {})
    # The index lied about a group we fold (b): the node read every entry, each under the name
    # it carries, whatever the index says.
    assert {g: {d: e.usage.publish.admitted_messages for d, e in entries.items()}
            for g, entries in node.usage_map.groups.items()} == {"x": {"peer": 999.0}, "y": {"peer": 5.0}}


def test_a_lying_index_over_a_repeated_name_is_read_in_full_and_rejected() -> None:
    # Two entries named b, the second indexed as "c": read in full, b is repeated.
    data = with_index(report([]), [entry("b", 1).SerializeToString(), entry("b", 2).SerializeToString()],
                      [key("b"), key("c")])
    with pytest.raises(Rejected) as exc:
        decode(data, FoldScope({"b", "c"}))
    assert exc.value.reason == REJECT_MALFORMED and "groups[1]" in str(exc.value)


def test_folded_entries_are_vetted_as_before() -> None:
    r = report(["a", "b", "c"])
    r.groups[1].publish.quota_messages = -5.0  # absurd, in an entry we fold
    with pytest.raises(Rejected) as exc:
        decode(serialize_report(r), FoldScope({"b"}))
    assert exc.value.reason == REJECT_INVALID and "groups[1].publish.quota_messages" in str(exc.value)
    r = report(["a", "b", "c"])
    r.groups[2].publish.quota_messages = -5.0  # ... and in one we skip: not read
    assert picked(decode(serialize_report(r), FoldScope({"b"}))) == [("b", 20)]
    # Two entries both named b, both indexed as b: repeated among the folded.
    twice = serialize_report(report(["a", "b", "b"]))
    with pytest.raises(Rejected) as exc:
        decode(twice, FoldScope({"b"}))
    assert exc.value.reason == REJECT_MALFORMED and "groups[2]" in str(exc.value)


def test_room_takes_the_smallest_keys_of_the_rest() -> None:
    names = [f"g{i}" for i in range(12)]
    data = serialize_report(report(names))
    others = sorted((n for n in names if n != "g5"), key=lambda n: int.from_bytes(key(n), "little"))
    out = decode(data, FoldScope({"g5"}, room=3))
    assert {g.group for g in out.groups} == {"g5", *others[:3]}
    assert [g.group for g in out.groups] == [n for n in names if n in {"g5", *others[:3]}]  # report order
    # The same choice by name for a report without an index.
    assert {g.group for g in decode(report(names).SerializeToString(), FoldScope({"g5"}, room=3)).groups} == {
        "g5", *others[:3]}


def test_entries_are_counted_and_signed_as_a_whole() -> None:
    data = serialize_report(report([f"g{i}" for i in range(20)]))
    with pytest.raises(Rejected) as exc:
        decode(data, FoldScope({"g1"}), max_groups=19)
    assert exc.value.reason == REJECT_TOO_MANY_GROUPS
    keys = HmacKeys((("k1", b"0123456789abcdef0123"),))
    props = keys.sign(data)
    assert picked(decode(data, FoldScope({"g1"}), keys=keys, properties=props)) == [("g1", 20)]
    r = UsageReport.FromString(data)
    r.group_keys = r.group_keys[8:] + r.group_keys[:8]  # the index changed after signing
    with pytest.raises(Rejected) as exc:
        decode(r.SerializeToString(), FoldScope({"g1"}), keys=keys, properties=props)
    assert exc.value.reason == REJECT_SIGNATURE


def test_a_node_folds_indexed_reports_like_full_ones() -> None:
    names = [f"g{i}" for i in range(40)]
    registry = {n: ResourceGroup(n, publish_msgs=100.0) for n in names}

    def node() -> ClusterNode:
        n = ClusterNode(NodeConfig("me"), 1, node_clock(), lambda: registry)
        for name in names[::5]:
            n.limiter.acquire(registry[name], "publish", 1, 1, f"{name}/ns", now=CLOCK_AT)
        return n

    indexed, plain = node(), node()
    for seq in (1, 2):
        r = report(names if seq == 1 else names[::3], sequence=seq)
        assert indexed.receive(serialize_report(r), {}, CLOCK_AT + seq / 10).accepted
        assert plain.receive(r.SerializeToString(), {}, CLOCK_AT + seq / 10).accepted

    def view(n: ClusterNode) -> dict:
        for name in names:  # as when the node serves them all (the others' entries are held unparsed)
            n.usage_map.fold_group(name)
        return {g: {d: e.usage for d, e in entries.items()} for g, entries in n.usage_map.groups.items()}

    assert view(indexed) == view(plain)
    # Both reports are whole states (base 0): the second's groups replace the first's.
    assert sorted(view(indexed)) == sorted(names[::3]) and len(names[::3]) == 14


def test_the_cap_needs_no_walk_unless_the_tag_byte_is_dense(monkeypatch) -> None:
    """Genuine reports hold the entry tag byte (0x32, '2') in names and figures too, so its
    count alone exceeds the cap for them; the view's entry count decides, without the
    Python walk, as long as the byte is within RAW_VIEW_TAG_FACTOR x the cap; beyond it the
    walk still runs first, and too many entries are rejected either way."""
    import rgd.cluster.report_codec as codec
    walks: list[int] = []
    real_walk = codec.count_groups

    def counted(data: bytes, stop_above: int) -> int:
        walks.append(stop_above)
        return real_walk(data, stop_above)

    monkeypatch.setattr(codec, "count_groups", counted)
    names = [f"g22{i}2" for i in range(300)]  # three tag bytes in each name
    data = serialize_report(report(names))
    assert data.count(b"\x32") > 300 and codec.raw_view_affordable(data.count(b"\x32"), 300)
    assert [g for g, _ in picked(decode(data, FoldScope({"g2252"}), max_groups=300))] == ["g2252"]
    assert walks == []
    with pytest.raises(Rejected) as exc:  # one entry over: the view counts it
        decode(data, FoldScope({"g2252"}), max_groups=299)
    assert exc.value.reason == REJECT_TOO_MANY_GROUPS and walks == []
    flood = report([]).SerializeToString() + b"\x32\x00" * (codec.RAW_VIEW_TAG_FACTOR * 100 + 1)
    with pytest.raises(Rejected) as exc:  # dense: walked, and stopped at the cap
        decode(flood, FoldScope({"g1"}), max_groups=100)
    assert exc.value.reason == REJECT_TOO_MANY_GROUPS and walks == [100]


def test_our_own_report_comes_back_with_its_header_alone() -> None:
    # Nothing folds our own entries: the echo needs the sequence and the publish time.
    # Even an entry that would not parse is not looked at; another incarnation of our id
    # is still a spoof.
    own = report([], sender="me", sequence=5)
    own.incarnation = 1
    broken = bytes([0x0A, 0x7F, 0x41])
    data = with_index(own, [entry("a", 1).SerializeToString(), broken], [key("a"), key("b")])
    own.groups.append(entry("a", 1))
    out = decode(data, FoldScope({"a", "b"}))
    assert len(out.groups) == 0
    assert (out.daemon_id, out.sequence, out.incarnation, out.tick_ms, out.publish_time_ms) == (
        "me", 5, 1, 1000, NOW_MS)
    own.incarnation = 2
    with pytest.raises(Rejected) as exc:
        decode(serialize_report(own), FoldScope({"a"}))
    assert exc.value.reason == "spoofed_self"


def test_the_member_count_the_acknowledgements_and_the_lease_survive_every_decode_path() -> None:
    def stamped(r: UsageReport) -> UsageReport:
        r.sequence, r.base = 9, 4
        r.members, r.complete, r.lease_ms, r.ack_wanted = 7, True, 3000, True
        r.heard.extend([3, 4_000_000_000])
        r.ack_members.extend([3, 4_000_000_000])
        r.ack_sequences.extend([12, 2**40])
        return r

    def header(x: UsageReport) -> tuple:
        return (x.sequence, x.base, x.members, x.complete, list(x.heard), list(x.ack_members),
                list(x.ack_sequences), x.lease_ms, x.ack_wanted)

    want = (9, 4, 7, True, [3, 4_000_000_000], [3, 4_000_000_000], [12, 2**40], 3000, True)
    data = serialize_report(stamped(report(["a", "b", "c"])))
    assert header(decode(data, FoldScope({"a", "b", "c"}))) == want  # every entry folded
    assert header(decode(data, FoldScope({"b"}))) == want  # picked through the index
    plain = stamped(report(["a", "b", "c"]))  # no index (an older sender): parsed whole, then filtered
    assert header(decode(plain.SerializeToString(), FoldScope({"b"}))) == want
    assert header(decode_report(data, NOW_MS, "me", 1)) == want  # no scope
    assert header(decode_report(data, NOW_MS, "me", 1, keep=lambda names: {"b"})) == want  # filtered copy


def test_a_report_that_acknowledges_more_members_than_a_map_holds_is_rejected() -> None:
    r = report(["a"])
    r.ack_members.extend(range(MAX_MEMBERS + 1))
    r.ack_sequences.extend([1] * (MAX_MEMBERS + 1))
    for scope in (FoldScope({"a"}), None):
        with pytest.raises(Rejected) as exc:
            decode_report(serialize_report(r), NOW_MS, "me", 1, scope=scope)
        assert exc.value.reason == "malformed" and "acknowledges 1025 members" in str(exc.value)
    r = report(["a"])
    r.ack_members.extend([1, 2])
    r.ack_sequences.extend([3])
    with pytest.raises(Rejected) as exc:
        decode_report(serialize_report(r), NOW_MS, "me", 1)
    assert exc.value.reason == "malformed" and "differ in length" in str(exc.value)
