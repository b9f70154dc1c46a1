"""From one tick of limiter counters to report entries and usage-map values (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from rgd.cluster.usage_map import entry_usage
from rgd.config.groups import KINDS, ResourceGroup
from rgd.limiting.limiter import Collected, KindState
from rgd.quota.model import INF, PeerUsage
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage, UsageReport


def _wire_limit(x: float) -> float:
    return -1.0 if x == INF else x


def kind_usage(c: Collected | None, st: KindState | None, group: ResourceGroup | None, kind: str,
               into: KindUsage | None = None) -> KindUsage:
    """One kind of a group entry (filled `into` an entry's own field when given: building
    a separate message and copying it in cost a third of the tick's report at 5 000 groups)."""
    k = KindUsage() if into is None else into
    if c is not None:
        k.admitted_messages = c.counters.admitted_messages
        k.admitted_bytes = c.counters.admitted_bytes
        k.throttled_messages = c.counters.throttled_messages
        k.throttled_bytes = c.counters.throttled_bytes
        k.shadow_throttled_messages = c.counters.shadow_throttled_messages
        k.shadow_throttled_bytes = c.counters.shadow_throttled_bytes
    if st is not None:
        k.limit_messages = _wire_limit(st.messages.rate)
        k.limit_bytes = _wire_limit(st.bytes.rate)
    else:
        k.limit_messages = k.limit_bytes = -1.0
    if group is not None:
        k.quota_messages, k.quota_bytes = group.rates(kind)
    else:
        k.quota_messages = k.quota_bytes = -1.0
    return k


def is_silent(k: KindUsage) -> bool:
    """Whether a kind says nothing an absent one does not: no traffic, no limit, no quota.

    Receivers read a kind absent from an entry as idle and unlimited (the daemons' fold,
    rgd.cluster.usage_map.group_rates, and the report job's decoder alike; an rgd older than the
    replication kind never sent it). Most groups limit one kind, so the other two of a typical
    entry are silent: 77 of its 182 bytes at PIP-82's scale. Left out, a report is 40 % smaller
    before compression, and so is what every peer's client holds decompressed in its receive
    queue while a round of reports is vetted (about 20 MB a second at that scale)."""
    return (not (k.admitted_messages or k.admitted_bytes or k.throttled_messages or k.throttled_bytes)
            and k.limit_messages == -1.0 and k.limit_bytes == -1.0
            and k.quota_messages == -1.0 and k.quota_bytes == -1.0)


def drop_silent_kinds(gu: GroupUsage) -> GroupUsage:
    """`gu` without the kinds that say nothing (see is_silent); in place."""
    for kind in KINDS:
        if gu.HasField(kind) and is_silent(getattr(gu, kind)):
            gu.ClearField(kind)
    return gu


def _silent(c: Collected | None, st: KindState | None, group: ResourceGroup | None, kind: str) -> bool:
    """is_silent of what kind_usage would build from these, without building it."""
    if c is not None and not c.counters.idle:
        return False
    if st is not None and (st.messages.rate != INF or st.bytes.rate != INF):
        return False
    if group is None:
        return True
    qm, qb = group.rates(kind)
    return qm == -1.0 and qb == -1.0


def group_entries(
    collected: Mapping[tuple[str, str], Collected],
    states: Mapping[tuple[str, str], KindState],
    groups: Mapping[str, ResourceGroup],
    names: Sequence[str] | None = None,
) -> dict[str, GroupUsage]:
    """One GroupUsage per group the limiter knows, whether active or idle this tick (or per
    group of `names`, in that order: the tick report builds them a slice at a time). A kind
    with nothing to say is left out (is_silent)."""
    out: dict[str, GroupUsage] = {}
    if names is None:
        names = sorted({g for g, _ in collected} | {g for g, _ in states})
    for name in names:
        gu = GroupUsage(group=name)
        namespaces: set[str] = set()
        topics = 0
        group = groups.get(name)
        for kind in KINDS:
            c = collected.get((name, kind))
            if c is not None:
                namespaces |= c.namespaces
                topics += c.topics
            st = states.get((name, kind))
            if not _silent(c, st, group, kind):
                kind_usage(c, st, group, kind, into=getattr(gu, kind))
        gu.namespaces.extend(sorted(namespaces))
        gu.topics = topics
        out[name] = gu
    return out


def figures(gu: GroupUsage) -> tuple[float, ...]:
    """The numbers suppression compares: usage, demand and shadow-throttled counts of every kind."""
    out: list[float] = []
    for kind in KINDS:
        out += _kind_figures(getattr(gu, kind))
    return tuple(out)


def counter_figures(collected: Mapping[tuple[str, str], Collected], states: Mapping[tuple[str, str], KindState],
                    groups: Mapping[str, ResourceGroup], name: str) -> tuple[float, ...]:
    """figures() of the entry group_entries would build for group `name`, read from the
    counters without building it: a report's suppression compares the figures of every group
    that moved (5 000 at PIP-82's scale) and lets a few hundred through, whose entries alone
    need building."""
    out: list[float] = []
    group = groups.get(name)
    for kind in KINDS:
        c = collected.get((name, kind))
        if c is None or (c.counters.idle and _silent(c, states.get((name, kind)), group, kind)):
            out += _NO_FIGURES  # a kind left out of the entry reads as zeros
        else:
            out += _kind_figures(c.counters)
    return tuple(out)


# A kind's figures, from its entry (KindUsage) or from the counters it is built from.
_kind_figures = attrgetter("admitted_messages", "admitted_bytes", "throttled_messages", "throttled_bytes",
                           "shadow_throttled_messages", "shadow_throttled_bytes")
_NO_FIGURES = (0, 0, 0, 0, 0, 0)


def peer_usage(gu: GroupUsage, tick_s: float) -> PeerUsage:
    """What peers will fold from this entry: the same conversion as usage_map.entry_usage."""
    return entry_usage(gu, tick_s)


def local_rates(gu: GroupUsage, kind: str, tick_s: float) -> tuple[float, float]:
    k: KindUsage = getattr(gu, kind)
    return k.admitted_messages / tick_s, k.admitted_bytes / tick_s


# Pulsar refuses messages over maxMessageSize (5 MB by default). A report it refuses
# drops this daemon out of every peer's map, and the peers hand themselves its share.
# The namespace lists are the only part of a report that brokers' asks can grow (the
# group entries are bounded by the config), and no peer computes with them: they are
# for the usage log's readers. So they are what gives way, never a group entry.
MAX_NAMESPACES_PER_ENTRY = 32
MAX_REPORT_BYTES = 4 * 1024 * 1024  # a megabyte below the broker's limit: properties, signature, framing


@dataclass(frozen=True)
class Trimmed:
    namespaces: int = 0  # namespace names left out of the report
    over_budget: bool = False  # still over MAX_REPORT_BYTES with every namespace list gone


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def bound_report(report: UsageReport, max_namespaces: int = MAX_NAMESPACES_PER_ENTRY,
                 max_bytes: int = MAX_REPORT_BYTES) -> Trimmed:
    """Cap each entry's namespace list, then empty the longest lists until the report fits.

    In place, before the report is serialized; group entries and their figures are
    never touched."""
    removed = 0
    for gu in report.groups:
        extra = len(gu.namespaces) - max_namespaces
        if extra > 0:
            del gu.namespaces[max_namespaces:]
            removed += extra
    size = report.ByteSize()
    if size <= max_bytes:
        return Trimmed(removed)
    for gu in sorted((g for g in report.groups if g.namespaces), key=lambda g: -g.ByteSize()):
        before = gu.ByteSize()
        removed += len(gu.namespaces)
        del gu.namespaces[:]
        after = gu.ByteSize()
        size -= before + _varint_len(before) - after - _varint_len(after)  # the entry and its length prefix
        if size <= max_bytes:
            break
    return Trimmed(removed, report.ByteSize() > max_bytes)


HEADER_SLACK = 24  # bytes: a continuation's longer sequence varint, the index field's tag and length
INDEX_BYTES_PER_ENTRY = 8  # UsageReport.group_keys, filled when the report is serialized (report_codec.index_report)


def split_points(report: UsageReport, max_bytes: int = MAX_REPORT_BYTES) -> list[int]:
    """Where to cut `report.groups` so that each part, sent as a report of its own with this
    report's header, is at most `max_bytes` once serialized with its index (8 bytes an
    entry): the index at which each part after the first begins (empty when it fits).

    Why split rather than drop: a report the broker refuses drops its sender out of every
    peer's map, and the peers hand themselves its share. Group entries are what the
    calculators read, so when trimming the namespace lists (bound_report) is not enough
    (tens of thousands of groups with traffic on one daemon), the entries go out in
    consecutive reports. Suppression already makes every report a partial one (an entry not
    named keeps its last value at the peer), so a peer folds each part like any report."""
    header = UsageReport(daemon_id=report.daemon_id, sequence=report.sequence,
                         publish_time_ms=report.publish_time_ms, tick_ms=report.tick_ms, leaving=report.leaving,
                         incarnation=report.incarnation, restatement=report.restatement,
                         members=report.members).ByteSize()
    budget = max_bytes - header - HEADER_SLACK
    cuts: list[int] = []
    used = 0
    for i, gu in enumerate(report.groups):
        size = gu.ByteSize()
        cost = 1 + _varint_len(size) + size + INDEX_BYTES_PER_ENTRY  # tag, length, entry, its key
        if used and used + cost > budget:
            cuts.append(i)
            used = 0
        used += cost
    return cuts


__all__ = [
    "HEADER_SLACK",
    "INDEX_BYTES_PER_ENTRY",
    "MAX_NAMESPACES_PER_ENTRY",
    "MAX_REPORT_BYTES",
    "Trimmed",
    "bound_report",
    "counter_figures",
    "drop_silent_kinds",
    "figures",
    "group_entries",
    "is_silent",
    "kind_usage",
    "local_rates",
    "peer_usage",
    "split_points",
]
