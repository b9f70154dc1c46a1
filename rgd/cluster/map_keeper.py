"""Usage-map upkeep that survives report loss: evidence-based group expiry and tombstones.

Expiring a group entry by age alone, and forgetting a member silent for the
TTL, both make a busy peer look idle or gone under report loss; every daemon
that believes so hands itself that peer's share, and the cluster overshoots
until the peer's next periodic report (up to report_every ticks under
suppression). The keeper applies two rules on top of the map (they need only
what a report already carries):
- a peer's group entry is dropped when K + 1 *consecutive* reports of that peer
  (sequence numbers without a gap) did not mention the group: an active group is
  in at least one of any K + 1 consecutive reports, so the peer went idle and its
  "idle" report was lost. Otherwise the entry stays until `safety_ttl`;
- a member evicted for silence leaves a tombstone; if it speaks again with the
  same incarnation it was only unlucky, and its group entries come back at once;
- silence means more under loss: the keeper measures the topic's loss (sequence
  gaps against reports delivered, decayed over the last few hundred reports) and
  evicts only after as many report intervals as it takes for that many lost
  reports in a row to be unlikely (FALSE_EVICTION_ODDS), never sooner than the
  TTL. At 10 % loss three reports in a row go missing once in a thousand
  intervals; a cluster of busy daemons lives through many thousands, and every
  false eviction of a busy peer handed its share to everybody else for a tick or
  two (the largest cause of overshoot left in the simulator's fuzzing). The price
  is that a crashed daemon's share is reclaimed later on a lossy topic (eight
  intervals at 30 % loss instead of three). Our own reports, back from the topic,
  count as well (own_echo);
- a member's silence is judged by what its peers heard too: every tick report lists
  the members its sender folded a report of since its previous one (`heard`, as
  CRC-32 tags of their ids, `member_tag`). A member another peer heard is alive as of
  that peer's tick, less the tick and the delivery delay (vouched). Losing a live
  member's reports for the whole TTL then also takes losing, for every such witness,
  its report of the member or ours of it: at 16.5 % loss among 14 daemons one daemon
  lost five reports in a row of a busy peer, evicted it and took its share, 12.9 % over
  the quota for a tick (fuzz case 426 of seed 1). With witnesses the TTL needs fewer
  intervals for the same odds (silence_ttl), so a crashed daemon's share is also
  reclaimed sooner on a lossy topic. A member silent to us for the safety TTL goes
  whatever others say: a peer's word keeps nobody forever;
- for the same reason an entry without evidence of idleness outlives `safety_ttl`
  where the measured loss makes losing that many refreshes in a row too likely
  (entry_ttl). A gap resets the idle streak, so under heavy loss the safety TTL was
  the only way an entry went, and three refreshes of a steady group (one every
  K + 1 ticks under suppression) all lost is once in 150 at 19 % loss: the peer
  forgot a busy member's usage in that group and took its share, 45 % over the quota
  until the next refresh (fuzz case 361 of seed 1).
A restarted member (new incarnation) loses the entries of its old incarnation.

Identity (against replays and a flood of made-up ids):
- with signed reports (`replay_window_seconds` set), a member that leaves or is
  evicted is remembered, with its last (incarnation, sequence), for that long (as
  long as any of its reports can still pass the clock check): a report of that
  incarnation at or below that sequence, or of an older incarnation, is a replay
  (rejected: "replay"), so a departed daemon's genuine signed reports cannot bring
  its ghost back to take a share. Unsigned, the memory would guard nothing (anyone
  can write a fresh report) and a forged report with a huge sequence would lock the
  real daemon out for the window, so there is none;
- at most `max_members` members ("member_limit"), and when `admissions_per_second`
  is set, new members are admitted from a token bucket ("member_rate") that holds
  `admission_burst`, or as many as there are established members (heard again an
  interval after joining, and lately) if more, and refills at that rate or at the
  established members per report interval. A newcomer that is refused is admitted
  with a later report (a daemon reports every tick), so a cluster's daemons starting
  together are all members within a few intervals (100 in 7); a burst of made-up ids
  sent once adds `admission_burst` and then that rate. Ids that keep reporting like
  daemons are counted as daemons: without signatures, behaviour is all there is.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from rgd.cluster.usage_map import Entry, FoldResult, UsageMap
from rgd.wire.usage_report_pb2 import UsageReport

REJECT_REPLAY = "replay"
REJECT_MEMBER_LIMIT = "member_limit"
REJECT_MEMBER_RATE = "member_rate"
MAX_MEMBERS = 1024  # daemons in the map, ourselves included
MAX_DEPARTED = 4 * MAX_MEMBERS  # departed members remembered (the oldest go first beyond this)
# Silence of a live member long enough to evict it should be this unlikely under the measured loss.
FALSE_EVICTION_ODDS = 1e-4
# An unconfirmed group entry lives at most this many refresh periods (plus the TTL) however
# lossy the topic: 63 s at the defaults, the odds met up to 40 % loss.
MAX_ENTRY_REFRESHES = 10
# The loss estimate forgets with this half-life (reports folded), and starts as if this many
# reports had arrived without a gap, so a few early gaps do not stretch the TTL at once.
LOSS_HALF_LIFE_REPORTS = 200.0
LOSS_PRIOR_REPORTS = 10.0


def member_tag(daemon_id: str) -> int:
    """A member as `UsageReport.heard` names it: the CRC-32 of its id (4 bytes on the wire
    where ids run to tens; two members of one cluster sharing a tag only lets one vouch
    for the other's liveness, and the safety TTL bounds that)."""
    return zlib.crc32(daemon_id.encode())


def _all_lost_rarely(p: float) -> int:
    """How many reports in a row must all be lost, at loss rate 0 < p < 1, for that to be
    as unlikely as FALSE_EVICTION_ODDS: what silence_ttl and entry_ttl wait for."""
    return math.ceil(math.log(FALSE_EVICTION_ODDS) / math.log(p) - 1e-9)


@dataclass
class MapKeeper:
    usage_map: UsageMap
    self_id: str
    refresh_reports: int  # K + 1: an active group is in one of any this many consecutive reports
    ttl_seconds: float  # member eviction after silence
    safety_ttl_seconds: float  # an entry unconfirmed this long goes anyway
    streak: dict[tuple[str, str], int] = field(default_factory=dict)  # (member, group) -> reports without it
    tombstones: dict[str, tuple[int, float, dict[str, Entry]]] = field(default_factory=dict)
    replay_window_seconds: float | None = None  # how long departed members are remembered; None: not at all
    max_members: int = MAX_MEMBERS
    admissions_per_second: float | None = None  # None: new members are admitted at any rate
    admission_burst: float = 8.0
    # member -> (incarnation, last sequence, when it left or was evicted)
    departed: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    _admission_tokens: float = field(default=-1.0, init=False)  # -1: full (set on first use)
    _admission_at: float = field(default=0.0, init=False)
    _established: tuple[float, int] = field(default=(-math.inf, 0), init=False)  # (when counted, how many)
    # member -> groups it may have an entry in (a superset: checked against the map when
    # read), so folding one report visits that member's groups, not every group in the map.
    held_by: dict[str, set[str]] = field(default_factory=dict)
    # How often a live member reports at least (a tick); None: silence is judged by the TTL alone.
    report_interval_seconds: float | None = None
    _delivered: float = field(default=LOSS_PRIOR_REPORTS, init=False)  # decayed reports folded
    _lost: float = field(default=0.0, init=False)  # decayed reports missed (sequence gaps)
    _own_echo: int = field(default=0, init=False)  # the highest of our own sequences the topic brought back
    # member -> the latest receipt-time equivalent at which a peer heard it (see vouch)
    vouched: dict[str, float] = field(default_factory=dict)
    # member -> when it last told us whom it heard: the witnesses silence_ttl counts
    witnessed_at: dict[str, float] = field(default_factory=dict)
    _by_tag: dict[int, str] = field(default_factory=dict, init=False)  # member_tag -> member
    _tags_stale: bool = field(default=True, init=False)

    def loss_rate(self) -> float:
        """The share of peers' reports the topic lost lately (sequence gaps)."""
        return self._lost / (self._lost + self._delivered)

    def silence_ttl(self, witnesses: int = 0) -> float:
        """How long a member may be silent before it is evicted: the TTL, or longer where
        the measured loss makes that much silence of a live member too likely (at most
        the safety TTL, after which its entries would go anyway).

        `witnesses`: other members that tell whom they heard (see vouch). In an interval a
        live member then goes unheard only if its report to us is lost and, for each
        witness, its report to the witness or the witness's to us: p (1 - (1 - p)^2)^w,
        losses taken as independent. A witness's word is up to its tick older than the
        report it heard (vouch dates it so), one interval more."""
        p = self.loss_rate()
        if self.report_interval_seconds is None or p <= 0.0:
            return self.ttl_seconds
        if p >= 1.0:
            return self.safety_ttl_seconds
        intervals = _all_lost_rarely(p)
        if witnesses > 0:
            q = p * (1.0 - (1.0 - p) ** 2) ** witnesses
            intervals = min(intervals, (_all_lost_rarely(q) if q > 0.0 else 1) + 1)
        return min(self.safety_ttl_seconds, max(self.ttl_seconds, intervals * self.report_interval_seconds))

    def entry_ttl(self) -> float:
        """How long a peer's group entry may go unconfirmed (no report naming the group, no
        evidence of idleness) before it is dropped: the safety TTL (three refresh periods
        plus the TTL), or as many refresh periods as it takes for that many lost refreshes
        in a row to be unlikely (FALSE_EVICTION_ODDS) under the measured loss, up to
        MAX_ENTRY_REFRESHES. Dropping the entry of a member that is still busy hands its
        share to everybody else; keeping one of a member that went idle only wastes it."""
        p = self.loss_rate()
        if self.report_interval_seconds is None or p <= 0.0:
            return self.safety_ttl_seconds
        refreshes = MAX_ENTRY_REFRESHES if p >= 1.0 else min(MAX_ENTRY_REFRESHES, _all_lost_rarely(p))
        extra = max(0, refreshes - 3) * self.refresh_reports * self.report_interval_seconds
        return self.safety_ttl_seconds + extra

    def own_echo(self, sequence: int) -> None:
        """One of our own reports, back from the topic: the topic loses our reports as it
        loses peers', so gaps in our own sequence count too. In a cluster of two this
        doubles what the estimate learns from; a small cluster at 10 % loss otherwise saw
        its first gap after tens of seconds, and evicted a busy peer on the TTL alone until
        then (fuzz case 2 of seed 1: three reports in a row lost before the first gap)."""
        if sequence <= self._own_echo:
            return  # a duplicate, or one that came back out of order (counted as lost then)
        if self._own_echo:
            self._count_delivery(sequence - self._own_echo - 1)
        self._own_echo = sequence

    def _count_delivery(self, lost: int) -> None:
        decay = 0.5 ** (1.0 / LOSS_HALF_LIFE_REPORTS)
        self._delivered = self._delivered * decay + 1.0
        self._lost = self._lost * decay + lost

    def fold(self, report: UsageReport, now: float, delay: float = 0.0) -> tuple[FoldResult, bool]:
        """Fold one report; returns the result and whether the sender is new to us.
        `delay`: how long reports take to reach us (dates what the sender says it heard)."""
        sender = report.daemon_id
        known = self.usage_map.members.get(sender)
        if known is None:
            refused = self._refuse_newcomer(report, now)
            if refused:
                return FoldResult(False, refused), False
        result = self.usage_map.fold(report, now)
        if not result.accepted or report.leaving:
            if report.leaving and result.accepted:
                self.tombstones.pop(sender, None)
                self._forget_streaks(sender)
                self._remember_departed(sender, report.incarnation, report.sequence, now)
                self.held_by.pop(sender, None)
                self._forget_word(sender)
            return result, False
        if known is None:
            self.departed.pop(sender, None)
            self._tags_stale = True
        if report.heard:
            self.vouch(sender, report.heard, now - report.tick_ms / 1000.0 - delay, now)
        new = known is None or known.incarnation != report.incarnation
        if not new:
            self._count_delivery(result.lost)
        if known is not None and known.incarnation != report.incarnation:
            self._drop_old_incarnation(report)
        if known is None:
            self._restore(report)
        mentioned = {g.group for g in report.groups}
        held = self.held_by.setdefault(sender, set())
        held |= mentioned
        groups = self.usage_map.groups
        for group in list(held):
            entries = groups.get(group)
            if entries is None or sender not in entries:
                held.discard(group)
                continue
            key = (sender, group)
            if group in mentioned:
                self.streak[key] = 0
            elif result.lost or new:
                # A gap, whatever report reveals it (an early report or restatement too): the
                # group may have been in the lost report.
                self.streak[key] = 0
            elif report.restatement:
                continue  # an early or announcement report names only some groups: no evidence
            else:
                self.streak[key] = self.streak.get(key, 0) + 1
        return result, new

    def vouch(self, witness: str, tags: Iterable[int], alive_at: float, now: float) -> None:
        """`witness` folded a report of each member named by `tags` since its previous tick
        report: each was alive as of `alive_at` (our receipt of the witness's report less
        its tick and the delivery delay), in the terms of `Member.last_seen` (a receipt
        time). A tag of no member we know (one the witness knows and we do not, or a
        collision with a departed one) vouches for nobody: a peer's word admits no one."""
        members = self.usage_map.members
        for tag in tags:
            member = self._by_tag.get(tag)
            if member is None or member not in members:
                if self._tags_stale:
                    self._by_tag = {member_tag(m): m for m in members}
                    self._tags_stale = False
                    member = self._by_tag.get(tag)
                if member is None or member not in members:
                    continue
            if member not in (witness, self.self_id) and self.vouched.get(member, -math.inf) < alive_at:
                self.vouched[member] = alive_at
        self.witnessed_at[witness] = now

    def _forget_word(self, member: str) -> None:
        self.vouched.pop(member, None)
        self.witnessed_at.pop(member, None)

    def _refuse_newcomer(self, report: UsageReport, now: float) -> str:
        """Why a report from a daemon not in the map is refused ("" = admit it)."""
        gone = self.departed.get(report.daemon_id)
        if gone is not None and (report.incarnation, report.sequence) <= gone[:2]:
            return REJECT_REPLAY
        if report.leaving:
            return ""  # evicts nothing, admits nobody
        if len(self.usage_map.members) >= self.max_members:
            return REJECT_MEMBER_LIMIT
        rate = self.admissions_per_second
        if rate is not None:
            # The allowance grows with the established members (see `established`): as many
            # newcomers per report interval as there are. A fixed 2 a tick after a burst of 8
            # kept a daemon starting among PIP-82's 100 brokers deaf to most of them for 45 s
            # (their reports rejected, their demand unknown); now 100 are members
            # within 7 intervals. Made-up ids sent once never become established, so a
            # burst of them still adds 8 and then 2 a tick.
            established = self.established(now)
            burst = max(self.admission_burst, float(established))
            if self.report_interval_seconds:
                rate = max(rate, established / self.report_interval_seconds)
            if self._admission_tokens < 0:
                self._admission_tokens = burst
            else:
                self._admission_tokens = min(burst, self._admission_tokens + (now - self._admission_at) * rate)
            self._admission_at = now
            if self._admission_tokens < 1.0:
                return REJECT_MEMBER_RATE
            self._admission_tokens -= 1.0
        return ""

    def established(self, now: float) -> int:
        """Members heard from at least an interval after they joined, and within the last two
        intervals: daemons, as far as behaviour tells. Counted at most four times an interval (a
        flood of newcomers would otherwise count the members for each of its reports)."""
        interval = self.report_interval_seconds
        if not interval:
            return 0
        counted_at, count = self._established
        if now - counted_at < interval / 4 and now >= counted_at:
            return count
        count = sum(1 for m in self.usage_map.members.values()
                    if m.last_seen - m.joined >= interval and now - m.last_seen <= 2 * interval)
        self._established = (now, count)
        return count

    def _remember_departed(self, member: str, incarnation: int, sequence: int, now: float) -> None:
        if self.replay_window_seconds is None:
            return
        was = self.departed.get(member)
        if was is None or (incarnation, sequence) > was[:2]:
            self.departed[member] = (incarnation, sequence, now)
        while len(self.departed) > MAX_DEPARTED:
            del self.departed[min(self.departed, key=lambda d: self.departed[d][2])]

    def _drop_old_incarnation(self, report: UsageReport) -> None:
        mentioned = {g.group for g in report.groups}
        for group, entries in self.usage_map.groups.items():
            if group not in mentioned:
                entries.pop(report.daemon_id, None)
        self._forget_streaks(report.daemon_id)

    def _restore(self, report: UsageReport) -> None:
        tomb = self.tombstones.pop(report.daemon_id, None)
        if tomb is None or tomb[0] != report.incarnation:
            return
        mentioned = {g.group for g in report.groups}
        for group, entry in tomb[2].items():
            if group not in mentioned:
                self.usage_map.groups.setdefault(group, {}).setdefault(report.daemon_id, entry)
                self.held_by.setdefault(report.daemon_id, set()).add(group)

    def _forget_streaks(self, member: str) -> None:
        for key in [k for k in self.streak if k[0] == member]:
            del self.streak[key]

    def witnesses(self, now: float) -> set[str]:
        """Members that told us whom they heard within the TTL (see silence_ttl)."""
        members = self.usage_map.members
        return {w for w, at in self.witnessed_at.items() if w in members and now - at <= self.ttl_seconds}

    def silent(self, now: float) -> list[str]:
        """Members to evict: unheard, by us and by every witness, for their silence TTL, or
        unheard by us for the safety TTL whatever witnesses say."""
        um = self.usage_map
        witnesses = self.witnesses(now)
        ttl = {0: self.silence_ttl()}
        out = []
        for d, m in um.members.items():
            if d == self.self_id or now - m.last_seen <= self.ttl_seconds:
                continue
            w = len(witnesses) - (d in witnesses)
            if w not in ttl:
                ttl[w] = self.silence_ttl(w)
            heard = max(m.last_seen, self.vouched.get(d, -math.inf))
            if now - heard > ttl[w] or now - m.last_seen > self.safety_ttl_seconds:
                out.append(d)
        return out

    def evict_silent(self, now: float) -> list[str]:
        um = self.usage_map
        gone = self.silent(now)
        for d in gone:
            m = um.members[d]
            self.tombstones[d] = (m.incarnation, now, {g: e[d] for g, e in um.groups.items() if d in e})
            self._remember_departed(d, m.incarnation, m.sequence, now)
            um.evict(d)
            self._forget_word(d)
        for d in [d for d, (_, at, _) in self.tombstones.items() if now - at > self.safety_ttl_seconds]:
            del self.tombstones[d]
        window = self.replay_window_seconds
        for d in [d for d, (_, _, at) in self.departed.items() if window is None or now - at > window]:
            del self.departed[d]
        return gone

    def expire_groups(self, now: float, touched: set[str] | None = None) -> int:
        """Drop idle or unconfirmed entries (see the module doc); the groups that lost one
        are added to `touched` (their shares change)."""
        dropped = 0
        ttl = self.entry_ttl()
        for group, entries in self.usage_map.groups.items():
            for member in list(entries):
                if member == self.self_id:
                    continue
                idle = self.streak.get((member, group), 0) >= self.refresh_reports
                if idle or now - entries[member].updated > ttl:
                    del entries[member]
                    self.streak.pop((member, group), None)
                    dropped += 1
                    if touched is not None:
                        touched.add(group)
        for group in [g for g, e in self.usage_map.groups.items() if not e]:
            del self.usage_map.groups[group]
        return dropped


__all__ = [
    "MAX_DEPARTED",
    "MAX_ENTRY_REFRESHES",
    "MAX_MEMBERS",
    "REJECT_MEMBER_LIMIT",
    "REJECT_MEMBER_RATE",
    "REJECT_REPLAY",
    "MapKeeper",
    "member_tag",
]
