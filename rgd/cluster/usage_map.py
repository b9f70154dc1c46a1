"""The usage map: every peer's state as of a sequence we hold, and what it acknowledged of ours.

Fed by reports from the topic, read by the quota calculator. The rules (docs/design/protocol.md):
- a daemon is a member from its first accepted report; a `leaving` report evicts it at once,
  and silence for its lease evicts it (`silent`);
- a new incarnation (restart) replaces the old one whole: nothing of the old one is kept;
- within an incarnation a sequence at or below the last one is a duplicate (rejected), and a
  jump counts the gap as lost reports;
- versioned state: a report's entries bring a receiver that holds the sender's state as of
  `base` or later to its state as of `sequence` (`held`); base 0 is the whole state, and a
  group it does not name is idle. A report whose base is beyond what we hold is still folded
  entry by entry (each entry is a figure the sender did report), but `held` stays: we
  acknowledge only a state we hold whole. A member whose state we never held whole
  (`in_sync` False) is counted as busy in every group by the node, because it may admit
  anything we do not know of.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from rgd.config.groups import KINDS
from rgd.quota.model import IDLE, INF, KindRates, PeerUsage
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage, UsageReport

__all__ = [
    "EVICT_LEAVING", "EVICT_TTL", "MAX_DEPARTED", "MAX_MEMBERS", "REJECT_MEMBER_LIMIT", "REJECT_REPLAY", "Entry",
    "FoldResult", "Member", "UsageMap", "entry_usage", "group_rates", "kind_rates", "member_tag",
]

EVICT_LEAVING = "leaving"
EVICT_TTL = "ttl"
REJECT_REPLAY = "replay"  # a departed member's old report again
REJECT_MEMBER_LIMIT = "member_limit"  # a new member beyond MAX_MEMBERS
MAX_MEMBERS = 1024  # peers in the map (a report acknowledges at most this many: report_codec)
MAX_DEPARTED = 4096  # departed members remembered (the oldest go first beyond this)


def member_tag(daemon_id: str, incarnation: int) -> int:
    """How acknowledgements name a member: CRC-32 of "id/incarnation" (4 bytes a member; a
    restarted member is a new one, so an acknowledgement of its predecessor never counts)."""
    return zlib.crc32(f"{daemon_id}/{incarnation}".encode())


@dataclass(slots=True)
class Member:
    incarnation: int
    sequence: int  # highest sequence accepted
    last_seen: float  # receiver's clock, last accepted report
    publish_time_ms: int
    lease: float  # seconds: silent this long, it is evicted (it stopped admitting before)
    held: int = 0  # the sequence whose whole state we hold (0: never held whole)
    acked_us: int = 0  # the highest of our sequences it acknowledged (this incarnation of ours)
    holds_us: bool = False  # its latest report acknowledged us (False after it evicted us)
    joined: float = 0.0
    groups: set[str] = field(default_factory=set)  # groups it has an entry for here

    @property
    def holds_of_us(self) -> int:
        """The sequence of ours whose state it holds now (0: nothing, or it dropped us)."""
        return self.acked_us if self.holds_us else 0

    @property
    def in_sync(self) -> bool:
        return self.held > 0


@dataclass(slots=True)
class Entry:
    usage: PeerUsage
    updated: float  # receiver's clock


@dataclass(frozen=True, slots=True)
class FoldResult:
    accepted: bool
    reason: str = ""  # why rejected: "duplicate", "stale_incarnation"
    lost: int = 0  # reports skipped in the sequence before this one
    new_member: bool = False
    changed: frozenset[str] = frozenset()  # groups whose entry for the sender changed


def kind_rates(k: KindUsage, tick_s: float) -> KindRates:
    """A report's per-tick counts as per-second rates; a limit < 0 means unlimited. An idle,
    unlimited kind is IDLE itself (most groups limit one kind: sharing one object saves
    building two of three kinds per folded entry)."""
    am, ab, tm, tb = k.admitted_messages, k.admitted_bytes, k.throttled_messages, k.throttled_bytes
    lm, lb = k.limit_messages, k.limit_bytes
    if not (am or ab or tm or tb) and lm < 0 and lb < 0:
        return IDLE
    per = 1.0 / tick_s
    return KindRates(am * per, ab * per, tm * per, tb * per, INF if lm < 0 else lm, INF if lb < 0 else lb)


def group_rates(g: GroupUsage, tick_s: float) -> dict[str, KindRates]:
    """Every kind of a report's group entry as rates; a kind the sender did not send is idle
    and unlimited, not limited to zero."""
    return {kind: kind_rates(getattr(g, kind), tick_s) if g.HasField(kind) else IDLE for kind in KINDS}


def entry_usage(g: GroupUsage, tick_s: float, reports: int = 1) -> PeerUsage:
    has = g.HasField
    return PeerUsage(kind_rates(g.publish, tick_s) if has("publish") else IDLE,
                     kind_rates(g.dispatch, tick_s) if has("dispatch") else IDLE,
                     reports,
                     kind_rates(g.replication, tick_s) if has("replication") else IDLE)


@dataclass
class UsageMap:
    groups: dict[str, dict[str, Entry]] = field(default_factory=dict)
    members: dict[str, Member] = field(default_factory=dict)
    default_lease: float = 3.0
    # Departed members' last (incarnation, sequence), kept for `replay_window` seconds: a
    # genuine (signed) report replayed after its sender left must not bring it back as a
    # member nobody can evict by silence while the replay goes on.
    # Only with signed reports (`replay_window` set): unsigned, anyone may forge a leave with a
    # huge sequence, and remembering it would lock the real member out.
    departed: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    replay_window: float | None = None

    def fold(self, report: UsageReport, now: float, our_tag: int) -> FoldResult:
        """Apply one vetted report from a peer, received at `now`. `our_tag`: how the peer's
        acknowledgements name us (member_tag of our id and incarnation)."""
        sender = report.daemon_id
        admitted = self._admit(report, now)
        if isinstance(admitted, FoldResult):
            return admitted
        member, lost = admitted
        if report.leaving:
            gone = frozenset(member.groups) if member is not None else frozenset()
            if member is not None:
                member.sequence = report.sequence
            self.evict(sender, now)
            return FoldResult(True, lost=lost, changed=gone)
        new = member is None
        if member is None:
            member = self.members[sender] = Member(report.incarnation, 0, now, 0, self.default_lease, joined=now)
        member.sequence = report.sequence
        member.last_seen = now
        member.publish_time_ms = report.publish_time_ms
        member.lease = report.lease_ms / 1000.0 if report.lease_ms else self.default_lease
        # What it holds of us now: a report that does not acknowledge us says it holds nothing
        # of ours (it evicted us, or lost our state), whatever it acknowledged before.
        member.holds_us = False
        for tag, seq in zip(report.ack_members, report.ack_sequences, strict=False):
            if tag == our_tag:
                member.acked_us = max(seq, member.acked_us)
                member.holds_us = True
        changed = self._apply(sender, member, report, now)
        if report.base <= member.held or report.base == 0:
            member.held = report.sequence
        return FoldResult(True, lost=lost, new_member=new, changed=changed)

    def _admit(self, report: UsageReport, now: float) -> tuple[Member | None, int] | FoldResult:
        """Who sent it: the member it continues (None: a new member) and the reports lost
        before it, or why it is rejected (a duplicate, an older incarnation, a replay)."""
        sender = report.daemon_id
        member = self.members.get(sender)
        if member is None:
            if sender in self.departed:
                incarnation, sequence, _ = self.departed[sender]
                if (report.incarnation, report.sequence) <= (incarnation, sequence):
                    return FoldResult(False, REJECT_REPLAY)
            if len(self.members) >= MAX_MEMBERS and not report.leaving:
                return FoldResult(False, REJECT_MEMBER_LIMIT)
            return None, 0
        if report.incarnation < member.incarnation:
            return FoldResult(False, "stale_incarnation")
        if report.incarnation > member.incarnation:  # a restart: the predecessor is gone, whole
            self.evict(sender, now)
            return None, 0
        if report.sequence <= member.sequence:
            return FoldResult(False, "duplicate")
        return member, report.sequence - member.sequence - 1

    def _apply(self, sender: str, member: Member, report: UsageReport, now: float) -> frozenset[str]:
        """The report's entries into the map (a whole-state report, base 0, drops every group
        it does not name: absent there is idle); the groups that changed."""
        changed: set[str] = set()
        if report.base == 0:
            named = {g.group for g in report.groups}
            for name in [n for n in member.groups if n not in named]:
                self._drop(sender, member, name)
                changed.add(name)
        tick_s = max(report.tick_ms, 1) / 1000.0
        for g in report.groups:  # an idle entry is kept: /stats shows every member's last report
            changed.add(g.group)
            self.groups.setdefault(g.group, {})[sender] = Entry(entry_usage(g, tick_s), now)
            member.groups.add(g.group)
        return frozenset(changed)

    def _drop(self, sender: str, member: Member, name: str) -> None:
        entries = self.groups.get(name)
        if entries is not None and entries.pop(sender, None) is not None and not entries:
            del self.groups[name]
        member.groups.discard(name)

    def set_local(self, self_id: str, group: str, usage: PeerUsage, now: float) -> None:
        """Our own entry as peers will hold it (for /stats and the calculator's view)."""
        self.groups.setdefault(group, {})[self_id] = Entry(usage, now)

    def evict(self, daemon: str, now: float = 0.0) -> None:
        member = self.members.pop(daemon, None)
        if member is not None:
            for name in list(member.groups):
                self._drop(daemon, member, name)
            if self.replay_window is not None:
                self.departed.pop(daemon, None)
                self.departed[daemon] = (member.incarnation, member.sequence, now)
                while len(self.departed) > MAX_DEPARTED:
                    del self.departed[next(iter(self.departed))]

    def forget_departed(self, now: float) -> None:
        """Departed members older than the replay window (a replay that old fails the clock check)."""
        window = self.replay_window
        if window is None:
            return
        for daemon in [d for d, (_, _, at) in self.departed.items() if now - at > window]:
            del self.departed[daemon]

    def silent(self, now: float) -> list[str]:
        """Members unheard for longer than their lease."""
        return [d for d, m in self.members.items() if now - m.last_seen > m.lease]

    def group_usage(self, group: str) -> Mapping[str, PeerUsage]:
        return {d: e.usage for d, e in self.groups.get(group, {}).items()}

    def oldest_report_age(self, now: float) -> float:
        return max((now - m.last_seen for m in self.members.values()), default=0.0)
