"""The usage map: every peer's state as of a sequence we hold, and what it acknowledged of ours.

Fed by reports from the topic, read by the quota calculator. The rules (docs/design/protocol.md):
- a daemon is a member from its first accepted report; a `leaving` report evicts it at once,
  and silence for its lease on the part of the topic we have read evicts it (`silent`);
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
- a peer's report names every group it serves (5 000 at PIP-82's size), of which we serve a
  few percent. Entries of groups we fold (`folded`: those the node asked for, `fold_group`)
  are parsed as they arrive; the rest are held as the raw bytes they came in
  (`Unfolded`, rgd.cluster.report_codec) and parsed when the node first asks for their
  group. Either way the map holds each member's whole state, so what it acknowledges is
  what it holds, and a group we start serving has every peer's figures at once.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from rgd.cluster.report_codec import FoldScope, Rejected, Unfolded, group_key, keys_among, parse_entry
from rgd.config.groups import KINDS
from rgd.quota.model import IDLE, INF, KindRates, PeerUsage
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage, UsageReport

__all__ = [
    "EVICT_LEAVING",
    "EVICT_TTL",
    "MAX_DEPARTED",
    "MAX_MEMBERS",
    "REJECT_MEMBER_LIMIT",
    "REJECT_REPLAY",
    "Entry",
    "FoldResult",
    "Member",
    "UnparsedEntries",
    "UsageMap",
    "entry_usage",
    "group_rates",
    "kind_rates",
    "member_tag",
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
class UnparsedEntries:
    """One report's entries held unparsed, sorted by index key; `alive` marks those still
    the member's latest (a later report naming the key supersedes one, a parse takes it)."""

    keys: np.ndarray  # uint64, ascending
    positions: np.ndarray  # into `entries`
    entries: Sequence[bytes]
    alive: np.ndarray  # bool
    tick_ms: int
    updated: float  # receiver's clock, when its report was folded

    @classmethod
    def of(cls, unfolded: Unfolded, tick_ms: int, now: float) -> UnparsedEntries:
        order = np.argsort(unfolded.keys, kind="stable")
        return cls(unfolded.keys[order], unfolded.positions[order], unfolded.entries,
                   np.ones(len(order), dtype=bool), tick_ms, now)

    def find(self, key: int) -> list[int]:
        """Indexes of live entries with this key (one, but for a 64-bit collision)."""
        i = int(np.searchsorted(self.keys, key))
        out = []
        while i < len(self.keys) and self.keys[i] == key:
            if self.alive[i]:
                out.append(i)
            i += 1
        return out

    def compacted(self) -> UnparsedEntries | None:
        """Fewer than half alive: the live ones copied out, so the rest of the report's bytes
        can go (None when none is alive)."""
        live = np.flatnonzero(self.alive)
        if not len(live):
            return None
        if 2 * len(live) >= len(self.keys):
            return self
        entries = [self.entries[p] for p in self.positions[live].tolist()]
        return UnparsedEntries(self.keys[live], np.arange(len(live)), entries, np.ones(len(live), dtype=bool),
                           self.tick_ms, self.updated)


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
    groups: set[str] = field(default_factory=set)  # groups it has a parsed entry for here
    unparsed: list[UnparsedEntries] = field(default_factory=list)  # its other entries, newest last

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


IDLE_USAGE = PeerUsage()


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
    # The groups whose entries are parsed as they arrive (see the module's docstring); a group
    # here has every member's entry parsed, one outside it none.
    folded: set[str] = field(default_factory=set)
    # An entry parsed after its report was folded is vetted then, by `vet` (the receiver's
    # plausibility check, raising Rejected); one that fails counts as `suspect(group)` (as busy
    # as the quota allows), since its report can no longer be refused whole.
    vet: Callable[[UsageReport], None] | None = None
    suspect: Callable[[str], PeerUsage] = lambda _group: IDLE_USAGE
    late_rejected: int = 0  # entries that failed `vet` when parsed after their report
    _folded_keys: dict[int, str] = field(default_factory=dict)  # folded groups by index key
    _scope: FoldScope | None = None

    def scope(self) -> FoldScope:
        """What a receiver parses of a report as it arrives: the entries of `folded` groups."""
        if self._scope is None:
            self._scope = FoldScope(self.folded)
        return self._scope

    def fold_group(self, name: str) -> bool:
        """Parse every member's held entry of `name` from now on (the node serves it); whether
        any member had one."""
        if name in self.folded:
            return False
        key = self._folding(name)
        found = False
        for daemon, member in self.members.items():
            for held in reversed(member.unparsed):
                if any(self._parse_one(daemon, member, held, i, name) for i in held.find(key)):
                    found = True
                    break
        return found

    def _folding(self, name: str) -> int:
        self.folded.add(name)
        key = group_key(name)
        self._folded_keys[key] = name
        self._scope = None
        return key

    def fold(self, report: UsageReport, now: float, our_tag: int, unfolded: Unfolded | None = None) -> FoldResult:
        """Apply one vetted report from a peer, received at `now`. `our_tag`: how the peer's
        acknowledgements name us (member_tag of our id and incarnation). `unfolded`: the
        report's entries its decoding left unparsed (rgd.cluster.report_codec.decode_scoped)."""
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
        changed = self._apply(sender, member, report, now, unfolded)
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

    def _apply(self, sender: str, member: Member, report: UsageReport, now: float,
               unfolded: Unfolded | None) -> frozenset[str]:
        """The report's entries into the map (a whole-state report, base 0, drops every group
        it does not name: absent there is idle); the groups folded that changed. An entry
        parsed here puts its group among the folded ones; one held unparsed supersedes the
        member's older entries of its key, and is parsed at once if its group is folded."""
        changed: set[str] = set()
        if report.base == 0:
            named = {g.group for g in report.groups}
            for name in [n for n in member.groups if n not in named]:
                self._drop(sender, member, name)
                changed.add(name)
            member.unparsed = []
        tick_s = max(report.tick_ms, 1) / 1000.0
        for g in report.groups:  # an idle entry is kept: /stats shows every member's last report
            changed.add(g.group)
            self.groups.setdefault(g.group, {})[sender] = Entry(entry_usage(g, tick_s), now)
            member.groups.add(g.group)
            if g.group not in self.folded:
                self._folding(g.group)
        changed |= self._hold(sender, member, report, now, unfolded)
        return frozenset(changed)

    def _hold(self, sender: str, member: Member, report: UsageReport, now: float,
              unfolded: Unfolded | None) -> set[str]:
        """The report's unparsed entries kept, the member's older ones of the same keys no longer
        its latest; those of groups folded since the report was decoded parsed now (their names)."""
        changed: set[str] = set()
        if member.unparsed:
            newer = np.fromiter((group_key(g.group) for g in report.groups), dtype=np.uint64,
                                count=len(report.groups))
            if unfolded is not None:
                newer = np.concatenate([newer, unfolded.keys])
            if len(newer):
                newer.sort()
                for held in member.unparsed:
                    held.alive &= ~keys_among(held.keys, newer)
        if unfolded is not None and len(unfolded):
            held = UnparsedEntries.of(unfolded, report.tick_ms, now)
            member.unparsed.append(held)
            if self.folded:
                for key in np.unique(held.keys[keys_among(held.keys, self.scope().keys)]).tolist():
                    name = self._folded_keys[key]
                    if any(self._parse_one(sender, member, held, i, name) for i in held.find(key)):
                        changed.add(name)
        member.unparsed = [c for h in member.unparsed if (c := h.compacted()) is not None]
        return changed

    def _parse_one(self, daemon: str, member: Member, held: UnparsedEntries, i: int, name: str) -> bool:
        """Held entry `i`, of group `name`'s key, parsed into the map, and vetted now (see `vet`);
        False when it names another group (a 64-bit key collision: it stays held). One that does
        not parse counts as `suspect`: its report can no longer be refused whole."""
        try:
            report = parse_entry(held.entries[int(held.positions[i])], held.tick_ms)
        except Rejected:
            report = None
        if report is not None and report.groups[0].group != name:
            return False
        held.alive[i] = False
        usage: PeerUsage | None = None
        if report is not None and self.vet is not None:
            try:
                self.vet(report)
            except Rejected:
                report = None
        if report is None:
            self.late_rejected += 1
            usage = self.suspect(name)
        else:
            usage = entry_usage(report.groups[0], max(held.tick_ms, 1) / 1000.0)
        self.groups.setdefault(name, {})[daemon] = Entry(usage, held.updated)
        member.groups.add(name)
        return True

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

    def silent(self, read_to: float) -> list[str]:
        """Members with no report folded for longer than their lease before `read_to`: how far
        (our clock) we have read the topic (rgd.cluster.node.ClusterNode._read_to)."""
        return [d for d, m in self.members.items() if read_to - m.last_seen > m.lease]

    def group_usage(self, group: str) -> dict[str, PeerUsage]:
        """Every member's entry of `group` (a new dict each call: the caller may change it)."""
        return {d: e.usage for d, e in self.groups.get(group, {}).items()}

    def oldest_report_age(self, now: float) -> float:
        return max((now - m.last_seen for m in self.members.values()), default=0.0)
