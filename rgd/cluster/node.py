"""One daemon's cluster logic without I/O: reports out, reports in, limits.

The daemon (rgd/daemon) wraps this with Pulsar, HTTP and the usage log; the simulator
(sim/node.py) wraps it with a simulated topic and clock. Both hand it the same `Clock`.

The protocol and why the cluster stays within its quota are in docs/design/protocol.md.
In one sentence: each daemon counts its own demand as the smallest figure any peer may
still hold of it (peers acknowledge what they hold), and admits nothing once a peer that
stopped acknowledging it may have evicted it (its lease).

A tick: `tick_report` (collect the limiter's counters, suppress what barely moved, name
every group changed since the oldest acknowledgement) -> `receive` each message ->
`upkeep` (evict members silent past their lease) -> `recompute`. Between ticks, `react`:
fold what arrived, recompute what changed, and publish at once a report that raises a
demand (so the acknowledgement round trip starts now) or answers one that asked.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from rgd.cluster.own_reports import OwnReports
from rgd.cluster.report_builder import (
    MAX_REPORT_BYTES,
    bound_report,
    counter_figures,
    figures,
    group_entries,
    peer_usage,
    split_points,
)
from rgd.cluster.report_codec import (
    REPLAY_WINDOW_MS,
    HmacKeys,
    Rejected,
    Unfolded,
    check_plausible,
    decode_scoped,
    groups_cap,
)
from rgd.cluster.suppression import SuppressionPolicy, SuppressionState, select_reports
from rgd.cluster.usage_map import UsageMap, member_tag
from rgd.config.groups import KINDS, QuotaCeilings, ResourceGroup
from rgd.limiting.limiter import Collected, KindState, Limiter, Place, TickCounters, largest_bucket_seconds, rate_of
from rgd.limiting.token_bucket import DEFAULT_BURST_SECONDS
from rgd.limiting.window_turns import layout_for, whole_and_fraction
from rgd.quota.calculator import (
    PEER_VIEW_STRATEGIES,
    UNSET,
    CalculatorCall,
    calculate_many,
    splits_jointly,
    start_seconds_for,
)
from rgd.quota.inputs import QuotaParams
from rgd.quota.model import IDLE, GroupLimits, KindRates, PeerUsage
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport

__all__ = [
    "REJECT_OWN", "Clock", "ClusterNode", "FoldOutcome", "NodeConfig", "TickOutcome", "Vetted", "start_seconds_for",
]

REJECT_OWN = "own"  # our own report back from the topic: not an error
MAX_LEASE_FACTOR = 3.0  # a lease never grows beyond this many configured leases, however slow the round trips
MIN_WINDOW = 0.001  # seconds: a window is never taken as shorter (a bucket born this instant)
EARLY_WINDOW_TICKS = 0.2  # a group with demand is measured over at least this much of a tick
EARLY_MIN_MESSAGES = 2.0  # ... and a rise of more than this many messages in the window
LOW_RATE_MESSAGES = 2.0  # a figure under this many messages a tick is measured until as many arrive
LOW_RATE_TICKS = 4.0  # ... or this many ticks pass


class Clock(Protocol):
    """The one clock the node reads, the daemon's and the simulator's alike: monotonic seconds,
    and the wall-clock time of any such instant (reports carry wall time; a wall clock that
    ignored its argument would stamp a past instant with now)."""

    def now(self) -> float: ...

    def wall_ms(self, at: float) -> int: ...


@dataclass(frozen=True)
class NodeConfig:
    node_id: str
    tick_seconds: float = 1.0
    strategy: str = "rgd"
    params: QuotaParams = field(default_factory=QuotaParams)
    suppression: SuppressionPolicy = field(default_factory=SuppressionPolicy)
    lease_ticks: float = 3.0  # silent this long, a member is evicted; we stop admitting before
    burst_seconds: float = DEFAULT_BURST_SECONDS
    max_debt_seconds: float = 10.0
    react_seconds: float = 0.1
    early_reports: bool = True
    start_seconds: float | None = None

    @property
    def lease_seconds(self) -> float:
        return self.lease_ticks * self.tick_seconds

    @property
    def guarded(self) -> bool:
        """Acknowledged own demand, leases and settling apply (strategy `rgd`); the baselines
        reproduce systems that have none of them."""
        return self.strategy in PEER_VIEW_STRATEGIES


@dataclass(frozen=True)
class TickOutcome:
    report: UsageReport
    parts: list[UsageReport]  # the report split to fit the broker's limit (usually [report])
    sent: list[str]
    suppressed: int
    local_rates: dict[tuple[str, str], tuple[float, float]]  # this tick's admitted msgs/s, bytes/s


@dataclass(frozen=True)
class FoldOutcome:
    report: UsageReport | None
    reason: str = ""  # why rejected ("" = accepted)
    lost: int = 0
    new_member: bool = False

    @property
    def accepted(self) -> bool:
        return not self.reason


@dataclass(frozen=True, slots=True)
class Vetted:
    """A message from the topic, decoded and vetted (ClusterNode.vet): the entries of groups
    we fold, parsed, and the rest held as they came (None: nothing left unparsed)."""

    report: UsageReport
    unfolded: Unfolded | None = None


def _busy(group: ResourceGroup) -> PeerUsage:
    """A member we do not hold in sync: as if it asked for the whole quota of every kind."""
    kinds = {}
    for kind in KINDS:
        m, b = (rate_of(r) for r in group.rates(kind))
        m, b = (0.0 if math.isinf(m) else m), (0.0 if math.isinf(b) else b)
        kinds[kind] = KindRates(m, b) if m or b else IDLE
    return PeerUsage(kinds["publish"], kinds["dispatch"], 1, kinds["replication"])


def _ceilings(groups: Mapping[str, ResourceGroup], earlier: deque[tuple[float, dict[str, ResourceGroup]]],
              now: float) -> Mapping[str, ResourceGroup]:
    """What a peer's report is vetted against: our groups, and for a lease and a round trip after a
    config change the higher of old and new quotas (`earlier`, whose expired changes go here)."""
    while earlier and earlier[0][0] <= now:
        earlier.popleft()
    return QuotaCeilings(groups, [changed for _, changed in earlier]) if earlier else groups


def _suspect(group: ResourceGroup | None) -> PeerUsage:
    """A peer's entry that failed vetting after its report was folded: as busy as the quota allows."""
    return _busy(group) if group is not None else PeerUsage()


def _closed(group: ResourceGroup) -> GroupLimits:
    """Our limits without a lease: nothing admitted of a limited rate (an unlimited one stays so)."""
    return {k: tuple(0.0 if r >= 0 else math.inf for r in group.rates(k)) for k in KINDS}  # type: ignore[misc]


def _totals(st: KindState) -> tuple[int, ...]:
    """A bucket's cumulative counts: admitted, throttled and shadow-throttled messages and bytes."""
    return (st.total_admitted_messages, st.total_admitted_bytes, st.total_throttled_messages,
            st.total_throttled_bytes, st.total_shadow_throttled_messages, st.total_shadow_throttled_bytes)


def _keys_of(name: str, states: Mapping[tuple[str, str], KindState]) -> list[tuple[str, str]]:
    """The group's buckets among `states` (one per kind brokers asked for)."""
    return [(name, kind) for kind in KINDS if (name, kind) in states]


def _span(st: KindState, at: float, now: float) -> float:
    """The length of a bucket's window since `at`: at least what the usage recorded in it
    covers (KindState.recorded_span: a record comes after the fact)."""
    return max(now - at, st.recorded_span, MIN_WINDOW)


def _rate(totals: tuple[int, ...], counted: tuple[int, ...], span: float) -> tuple[float, float]:
    """Demand (messages, bytes) a second over a window of `span` seconds, from cumulative totals."""
    return ((totals[0] - counted[0] + totals[2] - counted[2]) / span,
            (totals[1] - counted[1] + totals[3] - counted[3]) / span)


def _window(st: KindState, totals: tuple[int, ...], mark: tuple[float, tuple[int, ...]],
            tick_mark: tuple[float, tuple[int, ...]] | None, now: float) -> tuple[tuple[int, ...], float]:
    """A bucket's window for a report (the counts at its start, its length): since its mark, or
    since the tick's start (`tick_mark`, at a tick) where that reads higher."""
    counted, span = mark[1], _span(st, mark[0], now)
    if tick_mark is not None and tick_mark[0] < mark[0]:
        whole_tick = _span(st, tick_mark[0], now)
        if _rate(totals, tick_mark[1], whole_tick) > _rate(totals, counted, span):
            return tick_mark[1], whole_tick
    return counted, span


def _arrived(st: KindState, counted: tuple[int, ...]) -> int:
    """Messages asked for at a bucket (admitted or throttled) since the mark that read `counted` (_totals)."""
    return st.total_admitted_messages + st.total_throttled_messages - counted[0] - counted[2]


def _long_enough(span: float, counted: tuple[int, ...], st: KindState, latest: PeerUsage | None, kind: str,
                 shortest: float, tick: float) -> bool | None:
    """Whether a bucket's (`st`'s) window of `span` seconds since its mark (`counted`) measures it:
    at least `shortest`; at a low rate (its last figure, `latest`, under LOW_RATE_MESSAGES a
    tick), once as many arrived or LOW_RATE_TICKS passed; None (either) while idle with nothing
    arrived. A tick's count of 0 or 1 says little of a rate of a message or so a tick, and the
    smallest of such figures (our acknowledged demand) would read idle nearly always."""
    if span < shortest:
        return False
    was = latest.kind(kind).demand_messages if latest is not None else 0.0
    if was * tick >= LOW_RATE_MESSAGES:
        return True
    arrived = _arrived(st, counted)
    if not was:
        return True if arrived > 0 else None
    return arrived >= LOW_RATE_MESSAGES or span >= LOW_RATE_TICKS * tick - 1e-9


def _per_tick(totals: tuple[int, ...], counted: tuple[int, ...], f: float) -> tuple[int, ...]:
    """Counts since `counted`, scaled by `f` to one tick and rounded to whole messages (what a
    report carries), a window with any demand reading at least one message (of its mean size,
    admitted or throttled as most of them were): rounded to none, it would read idle."""
    d = [v - c for v, c in zip(totals, counted, strict=True)]
    out = [round(x * f) for x in d]
    if out[0] + out[2] == 0 and d[0] + d[2] > 0:
        i = 0 if d[0] >= d[2] else 2
        out[0:4] = [0, 0, 0, 0]
        out[i], out[i + 1] = 1, round(d[i + 1] / d[i])
    return tuple(out)


def _demand(usage: PeerUsage | None) -> tuple[float, ...]:
    if usage is None:
        return _NO_DEMAND
    p, d, r = usage.publish, usage.dispatch, usage.replication  # KINDS, in order
    return (p.demand_messages, p.demand_bytes, d.demand_messages, d.demand_bytes,
            r.demand_messages, r.demand_bytes)


_NO_DEMAND = (0.0,) * (2 * len(KINDS))


def _may_lower(after: tuple[float, ...], before: tuple[float, ...], sizes_matter: bool) -> bool:
    """Whether peers folding figures `after` (`_demand`) where they held `before` may grant
    themselves more than they did, so our limits must come down before the report goes out:
    some figure fell, or, where `sizes_matter` (a group split jointly, and peers to fold it),
    any changed (a larger message size of ours leaves peers more messages). Alone a changed
    size guards nobody (and would cut a lone daemon's bytes to its messages times their
    size), while a fall still recomputes, which is what brings a lone daemon's limits to its
    figures. Guarded strategy only: the others count their newest figures as they are, so a
    recompute at the report would raise their limits as often as lower them."""
    return any(a < b for a, b in zip(after, before, strict=True)) or (sizes_matter and after != before)


@dataclass(frozen=True, slots=True)
class _CallContext:
    """The node's state every calculator call of one recompute shares (ClusterNode._call)."""

    members: frozenset[str]
    out_of_sync: tuple[str, ...]  # members we never held whole: busy in every group
    oldest_held: int  # the oldest of our sequences whose state a live member may hold (ClusterNode._oldest_held)


class ClusterNode:
    def __init__(self, config: NodeConfig, incarnation: int, clock: Clock,
                 groups: Callable[[], Mapping[str, ResourceGroup]], keys: HmacKeys | None = None,
                 limiter_class: type[Limiter] = Limiter) -> None:
        self.config = config
        self.node_id = config.node_id
        self.incarnation = incarnation
        self.tag = member_tag(config.node_id, incarnation)
        self.clock = clock
        self.groups = groups
        self.keys = keys
        now = clock.now()
        self.started = now
        self.deaf_since = now  # when we last began listening to the topic (our start, or the end of a cut)
        self.usage_map = UsageMap(default_lease=config.lease_seconds,
                                  replay_window=REPLAY_WINDOW_MS / 1000.0 if keys is not None else None,
                                  vet=lambda report: self._check_plausible(report, self.clock.now()),
                                  suspect=lambda name: _suspect(groups().get(name)))
        self.own = OwnReports()
        self.suppression = SuppressionState[str]()
        self.limiter = limiter_class(clock.now, config.burst_seconds, config.max_debt_seconds,
                                     initial_limits=self._initial_limits, start_seconds=config.start_seconds,
                                     wall_offset=clock.wall_ms(now) / 1000.0 - now)
        self.ticks = 0
        self.settled_at: float | None = None if config.guarded else now
        self.applied: dict[str, int] = {}  # per member: its state we hold and computed with
        self.dirty: set[str] = set()
        self.all_dirty = True
        self.ack_due = False
        self._asked_at = 0  # our latest report that asked for acknowledgements
        self.left = False
        # When the topic last carried anything to us, ours or a peer's: a daemon that hears
        # nothing for a lease is cut off, whoever it still counts as members.
        self.heard_at: float | None = None
        self.namespaces_trimmed = 0  # namespace names left out of reports, not yet counted by the daemon
        # Per (group, kind): our clock and the cumulative counters at the group's last report
        # (a report's figures are the rates since then, so every figure is one window's).
        self._marks: dict[tuple[str, str], tuple[float, tuple[int, ...]]] = {}
        self._tick_marks: dict[tuple[str, str], tuple[float, tuple[int, ...]]] = {}  # ... and at our last tick
        # The keys counted since their mark (a superset: the limiter's `counted`, taken as read).
        # A key outside it has nothing since its mark, so it cannot have risen: reacts, twenty a
        # tick, read these alone instead of every bucket (10 000 at PIP-82's size).
        self._since_mark: set[tuple[str, str]] = set()
        # ... of those, the ones whose rise test (_risen) may have changed since it last read them:
        # counted since, or whose window was too short then. Nothing counted, a window's rate only
        # falls as it grows, so a key read as not risen stays so until it counts again.
        self._untested: set[tuple[str, str]] = set()
        self.limiter.take_counted()  # starts the limiter's tracking (it has no state yet)
        self._lease_was_valid = False
        # Round trips (send -> acknowledgement) measured lately: (our clock, seconds).
        self._round_trips: list[tuple[float, float]] = []
        self._echo_delays: list[tuple[float, float]] = []  # (our clock, seconds) our reports took to come back
        # The send time of our newest report folded back: every report that reached the topic
        # before it has been folded (one topic, delivered in order), however late we read.
        self.read_through = -math.inf
        self._echoed = False
        # Groups as last applied, and per recent config change the groups it changed, as they
        # were, until when a peer's report may still have been counted under them.
        self._applied_groups: dict[str, ResourceGroup] = dict(groups())
        self._earlier: deque[tuple[float, dict[str, ResourceGroup]]] = deque()
        self._own_marked = 0  # our sequence when an acknowledgement last marked our named groups dirty (fold)

    # -- premises ---------------------------------------------------------------------------

    def settled(self, now: float | None = None) -> bool:
        """We have listened to the topic for a tick plus its delivery delay (measured on our
        first report to come back): a live member's report of that tick has had time to
        arrive (P3)."""
        if self.settled_at is None:
            return False
        return (self.clock.now() if now is None else now) >= self.settled_at

    def round_trip(self, now: float) -> float:
        """The longest round trip (our report out -> a peer's acknowledgement back) of the
        last few ticks, and at least what a peer's answer takes: our echo's delay both ways and
        a react interval at each end. How long a lease must be to be renewed before it ends."""
        horizon = now - 5 * self.config.tick_seconds
        self._round_trips = [(at, rtt) for at, rtt in self._round_trips if at >= horizon]
        self._echo_delays = [(at, d) for at, d in self._echo_delays if at >= horizon]
        echoed = 2 * self._longest_echo() + 2 * self.config.react_seconds
        return max([echoed, *(rtt for _, rtt in self._round_trips)])

    def announced_lease(self, now: float) -> float:
        """The lease our reports announce: the configured one, or a tick more than a round trip
        where that is longer (a shorter one could never be renewed); the longest before our first
        echo told us the topic's delay (the reports a peer acknowledges first are those). Safety
        does not depend on the value: peers evict us by what we announced."""
        if not self._echoed:
            return MAX_LEASE_FACTOR * self.config.lease_seconds
        return self._measured_lease(now)

    def _measured_lease(self, now: float) -> float:
        longest = MAX_LEASE_FACTOR * self.config.lease_seconds
        return min(longest, max(self.config.lease_seconds, self.round_trip(now) + self.config.tick_seconds))

    def lease_end(self) -> float:
        """Until when every member that held our state keeps us (our clock): see OwnReports.lease_end;
        and a lease after we last heard the topic at all (alone, or beside members that never
        acknowledged us, that is what ends it when we are cut off). A react interval early, since our
        limits move only at a react. A member that never acknowledged us does not count: it counts us
        as busy until it holds our state, or it is still settling (P3), admitting nothing. One that
        acknowledged us and no longer does has dropped us: we admit nothing until it holds us again."""
        acks = [m.holds_of_us for m in self.usage_map.members.values() if m.acked_us]
        heard = -math.inf if self.heard_at is None else self.heard_at + self.config.lease_seconds
        return min(self.own.lease_end(acks), heard) - self.config.react_seconds

    def lease_valid(self, now: float) -> bool:
        return not self.config.guarded or (self.settled(now) and now < self.lease_end())

    def unacknowledging(self, now: float) -> list[str]:
        """Members whose acknowledgement of us is too old to keep our lease (readiness)."""
        return sorted(d for d, m in self.usage_map.members.items()
                      if m.acked_us and self.own.lease_end([m.holds_of_us]) - self.config.react_seconds <= now)

    def members(self) -> set[str]:
        return {*self.usage_map.members, self.node_id}

    def awaiting_acks(self) -> bool:
        """Whether a live member has yet to acknowledge our latest report that asked (answers then fold at once)."""
        return self._asked_at > 0 and self._acked() < self._asked_at

    def _subscribed_before(self) -> float:
        """How long before its first report reached us a member may have subscribed: the
        topic's delay (the longest our recent echoes took; the settling premise P3 takes the
        same) and a tick between a daemon's subscription and its first report."""
        return self._longest_echo() + self.config.tick_seconds

    def _read_to(self) -> float:
        """How far (our clock) we have read the topic. Our newest echo was sent at
        `read_through`, so every report that reached the topic before it has been folded (one
        topic, delivered in order), and no report reaches us sooner than the least delay our
        recent echoes took. So a member whose last report we folded at `last_seen` published
        nothing from then (less that delay) to this (less the same delay): `silent` compares
        the two. Reading late lengthens delays and holds back the echo, never this; on a
        steady delay it is when our newest echo arrived."""
        return self.read_through + min((d for _, d in self._echo_delays), default=0.0)

    def _longest_echo(self) -> float:
        """The longest delay our recent reports took to come back to us: the topic's delay."""
        return max((d for _, d in self._echo_delays), default=0.0)

    def _acked(self) -> int:
        """The oldest of our sequences a live member acknowledged (ours if we are alone)."""
        members = self.usage_map.members.values()
        return min((m.holds_of_us for m in members), default=self.own.sequence)

    def _oldest_held(self, now: float) -> int:
        """The oldest of our sequences whose state a live member may hold (the acknowledged
        minimum counts our demand from it). A member that has not acknowledged us yet holds
        nothing of ours or a state it heard since it subscribed, which was no earlier than its
        first report's delivery less `_subscribed_before`: the state as of then, not our whole
        history. One that acknowledged us and no longer does may hold anything (and has ended
        our lease)."""
        floor = self.own.sequence
        lookback = self._subscribed_before()
        for m in self.usage_map.members.values():
            floor = min(floor, m.holds_of_us if m.acked_us else self.own.sent_before(m.joined - lookback))
        return floor

    # -- limits -----------------------------------------------------------------------------

    def _initial_limits(self, group: ResourceGroup, kind: str) -> tuple[float, float]:
        self.usage_map.fold_group(group.name)  # we serve it from now: peers' entries parsed as they come
        return self.limits_for(group)[kind]

    def _call(self, group: ResourceGroup, ctx: _CallContext | None = None) -> CalculatorCall:
        ctx = ctx or self._call_context(self.clock.now())
        view = self.usage_map.group_usage(group.name)  # a new dict: ours to change
        if ctx.out_of_sync:
            busy = _busy(group)
            for d in ctx.out_of_sync:
                view[d] = busy
        ours = self.own.latest(group.name)
        if ours is not None:
            view[self.node_id] = ours
        else:
            view.pop(self.node_id, None)
        guarded = self.config.guarded
        previous = self.own.as_held(group.name, ctx.oldest_held) if guarded else UNSET
        # Every state a peer may hold: read by jointly split kinds alone (compute_limits).
        held = self.own.held_states(group.name, ctx.oldest_held) if guarded and splits_jointly(group) else None
        return CalculatorCall(group, view, self.node_id, ctx.members, self.config.strategy,
                              self.config.params, previous, True, held or ())

    def _call_context(self, now: float) -> _CallContext:
        """What every group's calculator call reads alike, read once per recompute (not once per
        group: at PIP-82's scale that was 100 members walked for each of 5 000 groups)."""
        members = self.usage_map.members
        return _CallContext(frozenset(self.members()), tuple(d for d, m in members.items() if not m.in_sync),
                            self._oldest_held(now))

    def limits_for(self, group: ResourceGroup, now: float | None = None) -> GroupLimits:
        now = self.clock.now() if now is None else now
        if not self.lease_valid(now):
            return _closed(group)
        return calculate_many([self._call(group, self._call_context(now))])[0]

    def recompute(self, names: set[str] | None = None, now: float | None = None) -> None:
        """New limits for the groups we serve (`names` of them, or all), then acknowledge what
        they were computed with."""
        now = self.clock.now() if now is None else now
        groups = self.groups()
        states = self.limiter.states
        served = sorted({g for g, _ in states}) if names is None else sorted(n for n in names if _keys_of(n, states))
        targets = [groups[n] for n in served if n in groups]
        if self.lease_valid(now):
            ctx = self._call_context(now)
            limits = calculate_many([self._call(g, ctx) for g in targets])
        else:
            limits = [_closed(g) for g in targets]
        for group, lim in zip(targets, limits, strict=True):
            for kind in KINDS:
                if (group.name, kind) in self.limiter.states:
                    place = self._place(group, kind, lim[kind]) if self.limiter.takes_turns(group, kind, *lim[kind]) \
                        else None
                    self.limiter.set_limit(group, kind, *lim[kind], place)
        if names is None:
            self.dirty.clear()
            self.all_dirty = False
            self.applied = {d: m.held for d, m in self.usage_map.members.items()}

    def _place(self, group: ResourceGroup, kind: str, ours: tuple[float, float]) -> Place:
        """Where our turns at the last whole message lie among the group's members, in each
        dimension (rgd.limiting.window_turns): our stretch begins where the fractional
        messages of the members before us by id end, their shares as their reports said them
        (the limits in force), ours as `ours`. Every member lays out the same ids alike."""
        entries = self.usage_map.groups.get(group.name, {})
        mine = self.own.latest(group.name)
        rows: list[tuple[str, float, float, float]] = []  # (id, messages share, bytes share, mean message)
        for d, entry in entries.items():
            if d != self.node_id:
                k = entry.usage.kind(kind)
                rows.append((d, k.limit_messages, k.limit_bytes, k.mean_message))
        rows.append((self.node_id, *ours, mine.kind(kind).mean_message if mine is not None else 0.0))
        quotas = group.rates(kind)
        layouts = []
        for dim in (0, 1):
            before = fractions = whole = largest = 0.0
            under_one = False
            for d, *shares, mean in rows:
                unit = 1.0 if dim == 0 else mean
                if unit <= 0 or shares[dim] <= 0 or math.isinf(shares[dim]):
                    continue
                n, f = whole_and_fraction(shares[dim] / unit)
                fractions += f
                whole += n * unit
                largest = max(largest, unit)
                under_one |= n == 0
                if d < self.node_id:
                    before += f
            layouts.append(layout_for(before, fractions, whole, largest, quotas[dim], self.config.burst_seconds,
                                      under_one))
        return Place(len(rows), *layouts[0], *layouts[1])

    def _listen_again_if_deaf(self, now: float) -> None:
        """We have not heard the topic for a lease: we were cut off, and members may have
        joined or left meanwhile. Listen again before we believe our member list (P3)."""
        if (self.config.guarded and self.settled_at is not None
                and (self.heard_at is None or now - self.heard_at > self.config.lease_seconds)):
            self.settled_at = None
            self.deaf_since = now

    def recompute_changed(self, now: float) -> None:
        self._listen_again_if_deaf(now)
        valid = self.lease_valid(now)
        if valid != self._lease_was_valid:
            self.all_dirty = True
            self._lease_was_valid = valid
        if self.all_dirty:
            self.recompute(None, now)
        elif self.dirty:
            self.recompute(self.dirty, now)
        # Our limits hold to the lease's end itself (we stop a react interval early), however late we next recompute.
        self.limiter.lease_until = self.lease_end() + self.config.react_seconds if valid and self.config.guarded \
            else math.inf
        # Every fold so far is in our limits now: what we acknowledge.
        self.applied = {d: m.held for d, m in self.usage_map.members.items()}
        self.dirty = set()
        self.all_dirty = False

    def apply_config(self) -> None:
        """The group config changed: drop deleted groups, recompute every limit. A changed
        quota is judged as the higher of old and new for a lease and a round trip when vetting
        peers' reports: a peer's report covers a tick it may have spent under the old quota,
        and its config may change after ours."""
        groups = self.groups()
        now = self.clock.now()
        changed = {name: old for name, old in self._applied_groups.items()
                   if (new := groups.get(name)) is not None and new != old}
        if changed:
            self._earlier.append((now + self._measured_lease(now) + self.config.tick_seconds, changed))
        self._applied_groups = dict(groups)
        for name in {g for g, _ in self.limiter.states} - set(groups):
            self.limiter.forget(name)
            self.own.forget(name)
            for kind in KINDS:
                self._marks.pop((name, kind), None)
                self._tick_marks.pop((name, kind), None)
            self.suppression.last_sent.pop(name, None)
            self.suppression.skipped.pop(name, None)
        self.all_dirty = True

    # -- reports out ------------------------------------------------------------------------

    def _measured(self, now: float, keys: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The buckets among `keys` of groups with a window long enough to measure and none too
        short (_long_enough; a report's entry holds every kind of its group, all since one mark)."""
        keys, states, tick, latest = list(keys), self.limiter.states, self.config.tick_seconds, self.own.latest
        said = [(k[0], _long_enough(_span(st := states[k], (m := self._mark_of(k, now))[0], now), m[1], st,
                                    (u := latest(k[0])), k[1], self._shortest_window(u), tick)) for k in keys]
        waiting = {g for g, ok in said if ok is False} - {g for g, ok in said if ok}
        return [k for k in keys if k[0] not in waiting]

    def _window_counts(self, now: float, collected: Mapping[tuple[str, str], Collected] | None,
                       keys: list[tuple[str, str]]) -> dict[tuple[str, str], Collected]:
        """Each bucket's counts since its group's last report, per tick (so every report's
        figures read at one tick length whatever window they were measured over). At a tick
        (`collected` given), over the whole tick instead where that reads higher: after an early
        report of a burst, the rest of the tick alone would read below the demand, and our own
        demand counts as the smallest of our recent figures."""
        tick = self.config.tick_seconds
        scaled: dict[tuple[str, str], Collected] = {}
        states = self.limiter.states
        for key in keys:
            totals = _totals(st := states[key])
            counted, span = _window(st, totals, self._mark_of(key, now),
                                    self._tick_marks.get(key) if collected is not None else None, now)
            f = tick / span
            am, ab, tm, tb, sm, sb = _per_tick(totals, counted, f)
            counters = TickCounters(am, ab, tm, tb, shadow_throttled_messages=sm, shadow_throttled_bytes=sb)
            c = collected.get(key) if collected is not None else None
            scaled[key] = Collected(counters, c.namespaces if c else frozenset(), c.topics if c else 0)
        return scaled

    def _shortest_window(self, latest: PeerUsage | None) -> float:
        """The shortest window a group's demand is measured over: none for its first demand (a
        new group's first second matters), a fifth of a tick once it has some (a few asks in a
        shorter window read as noise, and the acknowledged minimum of noisy figures is low)."""
        if latest is None:  # the group's last figure (OwnReports.latest)
            return 0.0
        return max(self.config.react_seconds, EARLY_WINDOW_TICKS * self.config.tick_seconds) - 1e-9

    def _mark_of(self, key: tuple[str, str], now: float) -> tuple[float, tuple[int, ...]]:
        """The (group, kind)'s mark: where its current window starts, and its cumulative counts then.
        For a new bucket, its birth with nothing counted (not our start: a new group's demand reads
        as the rate it arrives at, and every message it counted is in its first report)."""
        mark = self._marks.get(key)
        if mark is None:
            mark = self._marks[key] = (min(self.limiter.states[key].born, now), (0,) * 6)
        return mark

    def _mark(self, now: float, names: Iterable[str]) -> None:
        states = self.limiter.states
        for name in names:
            for key in _keys_of(name, states):
                st = states[key]
                self._marks[key] = (now, _totals(st))
                st.recorded_from = None  # the next window's records cover from the last one before it
                self._since_mark.discard(key)
                self._untested.discard(key)

    def _report(self, now: float, fresh: Mapping[str, GroupUsage], leaving: bool = False) -> list[UsageReport]:
        """A report of `fresh` entries plus every group changed since the oldest member's
        acknowledgement (all groups with demand while a member acknowledged nothing or we know of
        none: a listener we have not heard holds nothing of ours), split; recorded as sent."""
        base = self._acked() if self.usage_map.members else 0
        tick_s = self.config.tick_seconds
        entries: dict[str, GroupUsage] = {}
        names = self.own.active() if base == 0 else self.own.changed_after(base)
        for name in names:
            if name not in fresh:
                entries[name] = self._restated(name, tick_s)
        entries.update(fresh)
        report = UsageReport(daemon_id=self.node_id, publish_time_ms=self.clock.wall_ms(now),
                             tick_ms=int(round(tick_s * 1000)), incarnation=self.incarnation, leaving=leaving,
                             members=len(self.usage_map.members) + 1, base=base,
                             lease_ms=int(self.announced_lease(now) * 1000))
        for d, seq in sorted(self.applied.items()):
            m = self.usage_map.members.get(d)
            if m is not None and seq > 0:
                report.ack_members.append(member_tag(d, m.incarnation))
                report.ack_sequences.append(seq)
        # A rise of any figure waits for acknowledgements; a report that may let peers grant
        # themselves more lowers our own limits before it goes out (see _may_lower).
        usages = {n: peer_usage(gu, tick_s) for n, gu in entries.items()}  # what peers will fold
        moves = {n: (_demand(usages[n]), _demand(self.own.latest(n))) for n in fresh}  # (after, before)
        report.ack_wanted = any(a > b for after, before in moves.values() for a, b in zip(after, before, strict=True))
        lowering: set[str] = set()
        if self.config.guarded:
            configured, peers = self.groups(), bool(self.usage_map.members)
            lowering = {n for n, (after, before) in moves.items() if _may_lower(
                after, before, peers and (g := configured.get(n)) is not None and splits_jointly(g))}
        report.groups.extend(entries[n] for n in sorted(entries))
        if report.ack_wanted:
            self._asked_at = self.own.sequence + 1
        self.namespaces_trimmed += bound_report(report).namespaces
        parts = [report]
        cuts = split_points(report, MAX_REPORT_BYTES)
        if cuts:
            groups = list(report.groups)
            del report.groups[cuts[0]:]
            for start, end in zip(cuts, [*cuts[1:], len(groups)], strict=True):
                part = UsageReport()
                part.CopyFrom(report)
                del part.groups[:]
                part.groups.extend(groups[start:end])
                parts.append(part)
        for i, part in enumerate(parts):
            part.sequence = self.own.next_sequence()
            if i:
                part.base = part.sequence - 1  # a part applies on top of the one before it
            named = {g.group: (None if (u := usages[g.group]).idle else u) for g in part.groups}
            self.own.record(part.sequence, now, report.lease_ms / 1000.0, named)
            for name, usage in named.items():
                self.usage_map.set_local(self.node_id, name, usage or PeerUsage(), now)
        if lowering:
            self.recompute(lowering, now)
        return parts

    def _restated(self, name: str, tick_s: float) -> GroupUsage:
        """Our latest state of a group again, as a report entry (for a member that lacks it)."""
        gu = GroupUsage(group=name)
        usage = self.own.latest(name)
        if usage is None:
            return gu
        group = self.groups().get(name)
        for kind in KINDS:
            k = usage.kind(kind)
            if k.idle:
                continue
            into = getattr(gu, kind)
            into.admitted_messages = round(k.admitted_messages * tick_s)
            into.admitted_bytes = round(k.admitted_bytes * tick_s)
            into.throttled_messages = round(k.throttled_messages * tick_s)
            into.throttled_bytes = round(k.throttled_bytes * tick_s)
            into.limit_messages = -1.0 if math.isinf(k.limit_messages) else k.limit_messages
            into.limit_bytes = -1.0 if math.isinf(k.limit_bytes) else k.limit_bytes
            if group is not None:
                into.quota_messages, into.quota_bytes = group.rates(kind)
        return gu

    def hello_report(self, now: float) -> list[UsageReport]:
        """Our first report, at start: peers learn us (and count us as busy until they hold our
        state), and its echo starts our settling."""
        parts = self._report(now, {})
        parts[-1].ack_wanted = self.config.guarded
        return parts

    def tick_report(self, now: float) -> TickOutcome:
        tick_s = self.config.tick_seconds
        collected = self.limiter.collect()
        states = self.limiter.states
        self._take_counted()
        keys = self._measured(now, states)
        # A group counted nothing since its mark and since our last tick (the collect) reads
        # zero; it has something to say only if its last report said otherwise (suppression's
        # last_sent; one last said idle stands as last sent below, as a zero entry would), so
        # the others' entries are not built at all (most of 5 000 groups, most ticks).
        moved = {k[0] for k in self._since_mark}
        moved.update(k[0] for k, c in collected.items() if not c.counters.idle)
        moved.update(n for n, last in self.suppression.last_sent.items() if any(last))
        scaled = self._window_counts(now, collected, [k for k in keys if k[0] in moved])
        configured = self.groups()
        measured = {g for g, _ in scaled}
        # A group reported moments ago (an early report) is not measured again over a window
        # too short to count in: it stands as last sent.
        current = {n: counter_figures(scaled, states, configured, n) for n in sorted(measured)}
        for name, last in self.suppression.last_sent.items():
            if name not in current and _keys_of(name, states):
                current[name] = last
        send, suppressed = select_reports(self.config.suppression, self.suppression, current)
        # Entries are built for the groups suppression lets through alone (most groups, most ticks, are not).
        entries = group_entries(scaled, states, configured, [n for n in send if n in measured])
        fresh = {n: entries[n] if n in entries else self._restated(n, tick_s) if _keys_of(n, states)
                 else GroupUsage(group=n) for n in send}
        parts = self._report(now, fresh)
        self._mark(now, {k[0] for k in keys})
        self._tick_marks = {key: (now, _totals(st)) for key, st in states.items()}
        self.ticks += 1
        self.limiter.recompute_at = now + self.config.react_seconds
        rates = {key: (c.counters.admitted_messages / tick_s, c.counters.admitted_bytes / tick_s)
                 for key, c in collected.items()}
        return TickOutcome(parts[0], parts, sorted(send), len(suppressed), rates)

    def react(self, now: float) -> list[UsageReport]:
        """Between ticks, after folding and recomputing: a report at once if a group's demand
        rose beyond the tolerance (peers make room and acknowledge it sooner), or if a peer's
        report asked for acknowledgements."""
        if not self.config.early_reports:
            return []
        risen = self._risen(now)
        renew = (self.config.guarded and bool(self.usage_map.members)
                 and self.lease_end() - now < max(self.round_trip(now), self.config.tick_seconds)
                 + 2 * self.config.react_seconds)
        if not risen and not self.ack_due and not renew:
            return []
        self.ack_due = False
        states = self.limiter.states
        counts = self._window_counts(now, None, self._measured(now, [k for n in risen for k in _keys_of(n, states)]))
        entries = group_entries(counts, states, self.groups(), sorted({g for g, _ in counts}))
        self.suppression.last_sent.update((name, figures(gu)) for name, gu in entries.items())
        self.suppression.skipped.update((name, 0) for name in entries)
        self._mark(now, risen)
        parts = self._report(now, entries)
        parts[-1].ack_wanted |= bool(renew)
        return parts

    def _risen(self, now: float) -> list[str]:
        """Groups whose demand since their last report is above the reported one by more than
        the tolerance and EARLY_MIN_MESSAGES in the window."""
        tolerance = self.config.suppression.tolerance
        out = set()
        states = self.limiter.states
        self._take_counted()
        for key in list(self._untested):
            st = states.get(key)
            if st is None:  # forgotten (its group left the config)
                self._since_mark.discard(key)
                self._untested.discard(key)
                continue
            at, counted = self._mark_of(key, now)
            span = _span(st, at, now)
            latest = self.own.latest(key[0])
            if span < self._shortest_window(latest):
                continue
            self._untested.discard(key)
            demand = _arrived(st, counted)
            if demand <= EARLY_MIN_MESSAGES:
                continue
            rate = demand / span
            was = latest.kind(key[1]).demand_messages if latest is not None else 0.0
            if rate > was * (1 + tolerance) and demand - was * span > EARLY_MIN_MESSAGES:
                out.add(key[0])
        return sorted(out)

    def _take_counted(self) -> None:
        counted = self.limiter.take_counted()
        self._since_mark |= counted
        self._untested |= counted

    def leaving_report(self, now: float) -> UsageReport:
        """Graceful shutdown: peers evict us at once instead of after our lease."""
        self.left = True
        return self._report(now, {}, leaving=True)[0]

    def unsent(self, parts: list[UsageReport]) -> None:
        """These reports never left us (no broker): never sent means never lost."""
        states = self.limiter.states
        for part in reversed(parts):
            self.own.unsent(part.sequence)
            # Their groups' rises are measured against our figures before them again.
            self._untested.update(k for g in part.groups for k in _keys_of(g.group, states) if k in self._since_mark)

    # -- reports in -------------------------------------------------------------------------

    def vet(self, data: bytes, properties: Mapping[str, str] | None, now: float) -> Vetted:
        """Decode and check one message from the topic (rgd.cluster.report_codec); raises Rejected."""
        report, unfolded = decode_scoped(data, self.clock.wall_ms(now), self.node_id, self.incarnation,
                                         self.usage_map.scope(), properties, self.keys, groups_cap(len(self.groups())))
        if report.daemon_id != self.node_id:
            self._check_plausible(report, now)
        return Vetted(report, unfolded)

    def _check_plausible(self, report: UsageReport, now: float) -> None:
        slack = largest_bucket_seconds(self.config.burst_seconds) + self.config.max_debt_seconds
        check_plausible(report, _ceilings(self.groups(), self._earlier, now), slack)

    def receive(self, data: bytes, properties: Mapping[str, str] | None, now: float) -> FoldOutcome:
        try:
            vetted = self.vet(data, properties, now)
        except Rejected as exc:
            return FoldOutcome(None, exc.reason)
        return self.fold(vetted.report, now, vetted.unfolded)

    def fold(self, report: UsageReport, now: float, unfolded: Unfolded | None = None) -> FoldOutcome:
        if report.daemon_id == self.node_id:
            if report.incarnation == self.incarnation:
                self.heard_at = now
                sent = self._sent_at(report.sequence)
                if sent > -math.inf:  # an echo of a report we no longer keep measures no delay
                    self._echo_delays.append((now, now - sent))
                    self.read_through = max(self.read_through, sent)
                    self._echoed = True
                    if self.settled_at is None:
                        # Listening from now (or our start) for a tick plus the delay this echo took.
                        delay = max(0.0, now - sent)
                        self.settled_at = max(now, self.deaf_since + self.config.tick_seconds + delay)
            return FoldOutcome(report, REJECT_OWN)
        member = self.usage_map.members.get(report.daemon_id)
        acked_before = member.acked_us if member is not None and member.incarnation == report.incarnation else 0
        in_sync_before = member is not None and member.in_sync
        acked_min = self._oldest_held(now)
        result = self.usage_map.fold(report, now, self.tag, unfolded)
        if not result.accepted:
            return FoldOutcome(report, result.reason)
        self.heard_at = now
        if result.new_member or report.leaving:
            self.all_dirty = True
        self.dirty |= result.changed
        self.ack_due |= report.ack_wanted
        member = self.usage_map.members.get(report.daemon_id)
        if member is not None and member.in_sync and not in_sync_before:
            self._own_marked = 0  # no longer counted busy: the next acknowledgement marks every group we named
        if member is not None and member.acked_us > acked_before:
            sent = self._sent_at(member.acked_us)
            if sent > -math.inf:  # an acknowledgement of a report we no longer keep measures nothing
                self._round_trips.append((now, now - sent))
            # Its acknowledgement may move our own view of the groups we named: those named since
            # the last acknowledgement (our newest figures), and when the oldest acknowledgement
            # moved, those named since it (OwnReports.as_held). Not every group we ever named:
            # at PIP-82's scale that recomputed 5 000 groups at each react.
            acked_now = self._oldest_held(now)
            if acked_now != acked_min or self.own.sequence != self._own_marked:
                self.dirty.update(self.own.changed_after(min(self._own_marked, acked_min, acked_now)))
                self._own_marked = self.own.sequence
        return FoldOutcome(report, "", result.lost, result.new_member)

    def _sent_at(self, sequence: int) -> float:
        return next((at for seq, at, _ in self.own.sent if seq == sequence), -math.inf)

    def upkeep(self, now: float) -> list[str]:
        """Evict members silent past their lease; forget what no member can still hold of ours.
        Silence is judged on the topic as far as we have read it (`_read_to`), not up to now:
        a receiver that reads late must not count as silent the members whose reports wait
        unread in its queues, and take their shares while they admit (P4)."""
        silent = self.usage_map.silent(self._read_to())
        for d in silent:
            self.usage_map.evict(d, now)
            self.applied.pop(d, None)
        self.usage_map.forget_departed(now)
        if silent:
            self.all_dirty = True
        # Our recent states stay: a member we learn of next may hold any of them.
        keep = min(self._acked(), self.own.sent_before(now - self._subscribed_before()))
        self.own.prune(keep, now - MAX_LEASE_FACTOR * self.config.lease_seconds)
        return silent
