"""The usage map `{group -> {daemon -> PeerUsage}}` and the membership it implies.

Fed by reports from the topic (and the daemon's own tick), read by the quota
calculator. Membership rules:
- a daemon is a member from its first accepted report (a heartbeat report with
  no groups counts: liveness is per daemon, usage per group);
- a `leaving` report evicts it at once; silence evicts it (rgd.cluster.map_keeper decides when);
- a new incarnation (restart) resets its sequence without counting loss;
- within an incarnation a sequence at or below the last one is a duplicate or
  out of order (rejected), and a jump counts the gap as lost reports.
A group absent from a report keeps its last value (PIP-82 suppression), until
the entry is older than `group_ttl` seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from rgd.config.groups import KINDS
from rgd.quota.model import IDLE, INF, KindRates, PeerUsage
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage, UsageReport

EVICT_LEAVING = "leaving"
EVICT_TTL = "ttl"


@dataclass(slots=True)
class Member:
    incarnation: int
    sequence: int
    last_seen: float  # receiver's clock
    publish_time_ms: int
    joined: float = 0.0  # receiver's clock: its first accepted report (kept across its restarts)


@dataclass(slots=True)
class Entry:
    usage: PeerUsage
    updated: float  # receiver's clock


@dataclass(frozen=True, slots=True)
class FoldResult:
    accepted: bool
    reason: str = ""  # why rejected: "duplicate", "stale_incarnation"
    lost: int = 0  # reports skipped in the sequence before this one


def kind_rates(k: KindUsage, tick_s: float) -> KindRates:
    """A report's per-tick counts as per-second rates; a limit < 0 means unlimited. An idle,
    unlimited kind is IDLE itself (equal to what would be built: most groups limit one kind,
    so two of a typical entry's three kinds are this, and sharing one object saves building
    them for every folded entry and lets min_kind skip them)."""
    am, ab, tm, tb = k.admitted_messages, k.admitted_bytes, k.throttled_messages, k.throttled_bytes
    lm, lb = k.limit_messages, k.limit_bytes
    if not (am or ab or tm or tb) and lm < 0 and lb < 0:
        return IDLE
    per = 1.0 / tick_s
    return KindRates(am * per, ab * per, tm * per, tb * per, INF if lm < 0 else lm, INF if lb < 0 else lb)


def group_rates(g: GroupUsage, tick_s: float) -> dict[str, KindRates]:
    """Every kind of a report's group entry as rates; a kind the sender did not send
    (an older rgd) is idle and unlimited, not limited to zero."""
    return {kind: kind_rates(getattr(g, kind), tick_s) if g.HasField(kind) else IDLE for kind in KINDS}


def entry_usage(g: GroupUsage, tick_s: float, reports: int = 1) -> PeerUsage:
    """`PeerUsage(reports=reports, **group_rates(g, tick_s))`, without the dict (per folded entry)."""
    has = g.HasField
    return PeerUsage(kind_rates(g.publish, tick_s) if has("publish") else IDLE,
                     kind_rates(g.dispatch, tick_s) if has("dispatch") else IDLE,
                     reports,
                     kind_rates(g.replication, tick_s) if has("replication") else IDLE)


@dataclass
class UsageMap:
    groups: dict[str, dict[str, Entry]] = field(default_factory=dict)
    members: dict[str, Member] = field(default_factory=dict)

    def fold(self, report: UsageReport, now: float) -> FoldResult:
        """Apply one validated report (see report_codec) received at `now`."""
        sender = report.daemon_id
        member = self.members.get(sender)
        lost = 0
        if member is not None:
            if report.incarnation < member.incarnation:
                return FoldResult(False, "stale_incarnation")
            if report.incarnation == member.incarnation:
                if report.sequence <= member.sequence:
                    return FoldResult(False, "duplicate")
                lost = report.sequence - member.sequence - 1
        if report.leaving:
            self.evict(sender)
            return FoldResult(True, lost=lost)
        self.members[sender] = Member(report.incarnation, report.sequence, now, report.publish_time_ms,
                                      member.joined if member is not None else now)
        tick_s = max(report.tick_ms, 1) / 1000.0
        groups = self.groups
        for g in report.groups:
            name = g.group
            entries = groups.get(name)
            if entries is None:
                entries = groups[name] = {}
            prev = entries.get(sender)
            entries[sender] = Entry(entry_usage(g, tick_s, prev.usage.reports + 1 if prev is not None else 1), now)
        return FoldResult(True, lost=lost)

    def set_local(self, self_id: str, group: str, usage: PeerUsage, now: float) -> None:
        """The daemon's own tick goes into the map like a peer's report."""
        entries = self.groups.setdefault(group, {})
        prev = entries.get(self_id)
        history = prev.usage.reports + 1 if prev is not None else 1
        entries[self_id] = Entry(replace(usage, reports=history), now)

    def touch_self(self, self_id: str, incarnation: int, sequence: int, now: float, publish_ms: int) -> None:
        was = self.members.get(self_id)
        self.members[self_id] = Member(incarnation, sequence, now, publish_ms, was.joined if was is not None else now)

    def evict(self, daemon: str) -> None:
        self.members.pop(daemon, None)
        for entries in self.groups.values():
            entries.pop(daemon, None)
        self._drop_empty()

    def expire_groups(self, now: float, group_ttl: float) -> int:
        """Drop group entries not refreshed for `group_ttl` seconds; returns how many."""
        dropped = 0
        for entries in self.groups.values():
            for d in [d for d, e in entries.items() if now - e.updated > group_ttl]:
                del entries[d]
                dropped += 1
        self._drop_empty()
        return dropped

    def refresh_all(self, now: float) -> None:
        """After our own outage: every member and entry counts as heard from now."""
        for m in self.members.values():
            m.last_seen = now
        for entries in self.groups.values():
            for e in entries.values():
                e.updated = now

    def _drop_empty(self) -> None:
        for g in [g for g, e in self.groups.items() if not e]:
            del self.groups[g]

    def group_usage(self, group: str) -> Mapping[str, PeerUsage]:
        return {d: e.usage for d, e in self.groups.get(group, {}).items()}

    def oldest_report_age(self, now: float) -> float:
        ages = [now - m.last_seen for m in self.members.values()]
        return max(ages) if ages else 0.0
