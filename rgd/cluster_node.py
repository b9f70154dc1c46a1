"""One daemon's cluster logic without I/O: the tick, the usage map, the limiter.

The daemon (rgd/daemon.py) wraps this with Pulsar, HTTP and the usage log; the
simulator (sim/node.py) wraps it with a simulated topic and clock. So the
algorithm that converges in the simulator is, line for line, the one that runs.

A tick, in order:
  tick_report   collect the limiter's counters, suppress (PIP-82), build the
                report, put our own entry in the map as peers will see it
  receive       per message from the topic: vet, fold into the map (keeper)
  upkeep        evict silent members, expire idle entries (only while we hear
                the topic: during our own outage silence is ours, not theirs)
  announcement  a full report when a new member appeared, so its map is
                complete by its second tick
  recompute     the quota calculator for every limited group -> the limiter

Between ticks, `react` (every `react_seconds`: the daemon's timer, the
simulator's sub-step) folds what arrived, publishes an early report for any
group whose demand moved beyond the suppression tolerance (measured over the
last `react_window`), and recomputes the groups that changed: a demand shift is
met in a few delivery times instead of a tick or two. Our own increase counts
only once the report announcing it has been out for the measured delivery delay
plus one react interval (rgd/own_history.py, rgd/delivery_delay.py).

Outage: while we cannot hear the topic, shares stay as they were for
`outage_grace` seconds, then fall to quota / members-last-known-alive (never
the full quota a lone daemon would grant itself).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping

from rgd.groups import KINDS, ResourceGroup
from rgd.delivery_delay import DeliveryDelay
from rgd.limiter import Collected, Limiter, TickCounters, rate_of
from rgd.map_keeper import MapKeeper
from rgd.own_history import OwnHistory
from rgd.quota.calculator import PEER_VIEW_STRATEGIES, compute_limits
from rgd.quota.inputs import QuotaParams
from rgd.quota.model import GroupLimits
from rgd.report_builder import figures, group_entries, local_rates, peer_usage
from rgd.report_codec import HmacKeys, Rejected, decode_report
from rgd.suppression import SuppressionPolicy, SuppressionState, moved, select_reports
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport
from rgd.usage_map import UsageMap

REJECT_OWN = "own"  # our own report echoed by the topic: ignored, not an error
EARLY_BUDGET_MIN = 8  # early report entries per tick a daemon with few groups may always send
NEW_BUCKET_SECONDS = 0.05  # see start_seconds_for
# A window's demand must differ from the last reported one by more than this many messages
# counted in the window (see moved_beyond_counting).
EARLY_MIN_EVENTS = 2.0


def moved_beyond_counting(last: tuple[float, ...], now: tuple[float, ...], tolerance: float,
                          window_ticks: float) -> bool:
    """Whether a window's figures (rgd.report_builder.figures, per tick) moved beyond the
    tolerance *and* beyond what counting whole messages in a short window can tell apart.
    A window of w ticks counts rate * w messages, give or take one: at 4 msg/s a 0.4 s
    window reads 2.5 or 5 msg/s, both "moved" by the tolerance alone, and an early report
    of either would set every peer's view (and our own, as the min of what peers may hold)
    to a demand that never was. A figure counts as moved only if its difference over the
    window exceeds EARLY_MIN_EVENTS messages (in bytes: that many messages of the kind's
    mean size), so a real step (4 -> 16 msg/s) is still reported within the window."""
    for k in range(0, min(len(last), len(now)), 4):
        a, b = last[k:k + 4], now[k:k + 4]
        msgs = max(b[0] + b[2], a[0] + a[2])
        size = (max(b[1] + b[3], a[1] + a[3]) / msgs) if msgs > 0 else 0.0
        for i, (x, y) in enumerate(zip(a, b)):
            unit = size if i % 2 else 1.0
            diff = abs(x - y)
            if diff > tolerance * max(abs(x), abs(y)) and diff * window_ticks > EARLY_MIN_EVENTS * unit:
                return True
    return len(last) != len(now)


@dataclass(frozen=True)
class NodeConfig:
    node_id: str
    tick_seconds: float = 1.0
    strategy: str = "rgd"
    params: QuotaParams = field(default_factory=QuotaParams)
    suppression: SuppressionPolicy = field(default_factory=SuppressionPolicy)
    ttl_ticks: int = 3
    announce: bool = True  # a full report when a new member appears
    burst_seconds: float = 1.0
    max_debt_seconds: float = 10.0
    outage_grace: float = 10.0
    react_seconds: float = 0.1  # how often react() runs (early reports, recompute of what changed)
    early_reports: bool = True  # publish a group's report as soon as its demand moves (not only on the tick)
    # At most one early report per group per early_gap_ticks, and per tick at most max(8, groups)
    # early entries (and as many restated at the tick): report bytes/s <= 3 unsuppressed tick reports'.
    early_gap_ticks: float = 0.25
    start_seconds: float | None = None  # a new group's bucket starts with this much of its limit (None: full)

    @property
    def react_window(self) -> float:
        """Demand between ticks is measured over this long: short enough to see a shift
        within a few react intervals, long enough to smooth acquire granularity."""
        return max(2.0 * self.react_seconds, 0.2 * self.tick_seconds)

    @property
    def safety_ttl_ticks(self) -> int:
        """A group entry unconfirmed this long goes even without evidence of idleness:
        three refresh periods plus the TTL."""
        return 3 * (self.suppression.max_skipped_ticks + 1) + self.ttl_ticks


def start_seconds_for(strategy: str) -> float | None:
    """How much of its limit a new bucket starts with, per strategy. `rgd` splits a group
    nobody has reported equally, so with full buckets every daemon could spend a second of
    its share on top of it and the cluster admit up to twice the quota in the group's first
    second; 0.05 s bounds that to 5 %. The baselines start full, as the systems they
    reproduce do."""
    return NEW_BUCKET_SECONDS if strategy in PEER_VIEW_STRATEGIES else None


@dataclass
class TickReport:
    report: UsageReport
    sent: list[str]
    suppressed: int
    local_rates: dict[tuple[str, str], tuple[float, float]]  # this tick's admitted msgs/s, bytes/s
    # Groups left out of `report` because reported early this tick, restated with their current
    # demand (a second chance for peers that lost the early report); None if there are none.
    restated: UsageReport | None = None


@dataclass(frozen=True)
class Receipt:
    """What folding one message did."""

    report: UsageReport | None
    reason: str = ""  # why rejected ("" = accepted)
    lost: int = 0
    new_member: bool = False

    @property
    def accepted(self) -> bool:
        return not self.reason


class ClusterNode:
    def __init__(
        self,
        config: NodeConfig,
        incarnation: int,
        clock: Callable[[], float],
        wall_ms: Callable[[float], int],
        groups: Callable[[], Mapping[str, ResourceGroup]],
        keys: HmacKeys | None = None,
        hearing: bool = True,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.incarnation = incarnation
        self.clock = clock
        self.wall_ms = wall_ms
        self.groups = groups
        self.keys = keys
        self.sequence = 0
        self.ticks = 0
        self.usage_map = UsageMap()
        self.keeper = MapKeeper(
            self.usage_map, self.node_id, config.suppression.max_skipped_ticks + 1,
            config.ttl_ticks * config.tick_seconds, config.safety_ttl_ticks * config.tick_seconds,
        )
        self.suppression_state = SuppressionState()
        self.limiter = Limiter(clock, config.burst_seconds, config.max_debt_seconds,
                               initial_limits=self._initial_limits, start_seconds=config.start_seconds)
        # Our own entries as sent, to count our demand as peers may hold it (see calculator doc).
        self.history = OwnHistory()
        self.delay = DeliveryDelay(config.tick_seconds, 3.0 * config.tick_seconds)
        self._entries: dict[str, GroupUsage] = {}
        self._sent_this_tick: set[str] = set()
        # Between ticks: groups to recompute, counter snapshots for the windowed demand,
        # when each group was last reported early.
        self.dirty: set[str] = set()
        self.all_dirty = False
        self._snapshots: deque[tuple[float, dict[tuple[str, str], tuple[int, int, int, int]]]] = deque()
        self._early_at: dict[str, float] = {}
        self._early_this_tick: set[str] = set()
        self._last_figures: dict[str, tuple[float, ...]] = {}  # per group, as last sent (tick or early)
        self._early_mentions = 0  # group entries in early reports since the last tick
        self._born: dict[tuple[str, str], float] = {}  # when react first saw each (group, kind)
        self._window_figures: dict[str, tuple[float, ...]] = {}  # the last react's demand, per tick
        self._window_entries: dict[str, tuple[float, GroupUsage]] = {}  # ... and its entry (window length)
        self.early_reports_sent = 0
        # Outage state; `heard_since`: when we started hearing the topic (None: not hearing).
        self.hearing = hearing
        self.heard_since: float | None = clock() if hearing else None
        self._settled = False
        self._had_peers = False  # some peer has reported since we started
        self.deaf_since: float | None = None
        self.members_at_deafness = 1

    # -- the calculator ---------------------------------------------------------------------

    def members(self) -> set[str]:
        return set(self.usage_map.members) | {self.node_id}

    def safe_share_active(self, now: float | None = None) -> bool:
        if self.deaf_since is None:
            return False
        now = self.clock() if now is None else now
        return now - self.deaf_since > self.config.outage_grace

    def settled(self, now: float | None = None) -> bool:
        """We have heard the topic for a full tick (once: an outage later does not undo it,
        the map then holds the members we knew): every live peer has reported since (every
        daemon reports each tick), so the members we know are all there are."""
        if not self._settled:
            now = self.clock() if now is None else now
            self._settled = (self.hearing and self.heard_since is not None
                             and now - self.heard_since >= self.config.tick_seconds)
        return self._settled

    def fold_window(self) -> float:
        """How long after publishing a report every peer has it in force: the measured
        delivery delay plus one react interval (peers recompute what changed that often)."""
        return self.delay.seconds() + self.config.react_seconds

    def limits_for(self, group: ResourceGroup, now: float | None = None) -> GroupLimits:
        now = self.clock() if now is None else now
        members = self.members()
        if self.safe_share_active(now):
            n = max(1, self.members_at_deafness)
            return {k: (rate_of(group.rates(k)[0]) / n, rate_of(group.rates(k)[1]) / n) for k in KINDS}
        settled = self.settled(now)
        if settled and self.hearing and not self._had_peers and members == {self.node_id}:
            # We listened a full tick and nobody has ever reported: no peer can overshoot with
            # us. (Once we had peers, silence may be loss: an evicted peer may still be busy,
            # so we compute as usual, from our own demand.)
            return {k: (rate_of(group.rates(k)[0]), rate_of(group.rates(k)[1])) for k in KINDS}
        usage = self.usage_map.group_usage(group.name)
        previous = self.history.as_seen(group.name, now, self.fold_window())
        return compute_limits(group, usage, self.node_id, members, self.config.strategy,
                              self.config.params, previous=previous, settled=settled)

    def _initial_limits(self, group: ResourceGroup, kind: str) -> tuple[float, float]:
        return self.limits_for(group)[kind]

    def recompute(self, names: set[str] | None = None) -> None:
        """New local limits for every group the limiter knows (or those in `names`), one
        calculator call per group."""
        groups = self.groups()
        now = self.clock()
        known = {g for g, _ in self.limiter.states}
        for name in sorted(known if names is None else known & names):
            group = groups.get(name)
            if group is None:
                continue
            limits = self.limits_for(group, now)
            for kind in KINDS:
                if (name, kind) in self.limiter.states:
                    self.limiter.set_limit(group, kind, *limits[kind])
        if names is None:
            self.dirty.clear()
            self.all_dirty = False

    def apply_config(self) -> None:
        """After a config change: forget deleted groups everywhere, recompute now."""
        existing = set(self.groups())
        known = ({g for g, _ in self.limiter.states} | set(self.suppression_state.last_sent)
                 | set(self.usage_map.groups) | set(self.history.entries) | set(self._last_figures))
        for name in known - existing:
            self.forget_group(name)
        self.recompute()

    def forget_group(self, name: str) -> None:
        """A deleted group leaves every piece of state, so no later report names it: its
        bucket, its suppression and early-report state, our history, and the map's entries
        (ours and peers'; peers delete it from their maps on the same config change, and a
        late report of theirs that still names it only recreates entries no calculator reads,
        which the keeper expires like any idle entry)."""
        self.limiter.forget(name)
        self.suppression_state.last_sent.pop(name, None)
        self.suppression_state.skipped.pop(name, None)
        self.usage_map.groups.pop(name, None)
        for key in [k for k in self.keeper.streak if k[1] == name]:
            del self.keeper.streak[key]
        self.history.forget(name)
        for d in (self._entries, self._last_figures, self._early_at, self._window_figures, self._window_entries):
            d.pop(name, None)
        for key in [k for k in self._born if k[0] == name]:
            del self._born[key]
        self._sent_this_tick.discard(name)
        self._early_this_tick.discard(name)
        self.dirty.discard(name)

    # -- the tick ---------------------------------------------------------------------------

    def set_hearing(self, hearing: bool, now: float) -> bool:
        """Whether we can hear the topic now; returns True when hearing just came back."""
        recovered = hearing and not self.hearing
        if hearing:
            if recovered:
                self.usage_map.refresh_all(now)  # peers were silent because we were deaf
                self.heard_since = now
            self.deaf_since = None
        elif self.hearing:
            self.deaf_since = now
            self.members_at_deafness = len(self.members())
            self.heard_since = None
        self.hearing = hearing
        return recovered

    def _new_report(self, now: float, leaving: bool = False) -> UsageReport:
        self.sequence += 1
        return UsageReport(
            daemon_id=self.node_id, sequence=self.sequence, publish_time_ms=self.wall_ms(now),
            tick_ms=int(round(self.config.tick_seconds * 1000)), incarnation=self.incarnation,
            leaving=leaving,
        )

    def _include(self, report: UsageReport, names: list[str], now: float, skip: set[str] = frozenset()) -> None:
        tick_s = self.config.tick_seconds
        for name in sorted(names):
            report.groups.append(self._entries[name])
            if name not in skip:
                # Our own entry is what peers will see, so every daemon computes from the same map.
                usage = peer_usage(self._entries[name], tick_s)
                self.usage_map.set_local(self.node_id, name, usage, now)
                self.history.add(name, now, usage)
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)

    def tick_report(self, now: float) -> TickReport:
        """Collect and report: this tick's report (to publish) with its bookkeeping done."""
        tick_s = self.config.tick_seconds
        self._entries = group_entries(self.limiter.collect(), self.limiter.states, self.groups())
        rates = {(n, k): local_rates(gu, k, tick_s) for n, gu in self._entries.items() for k in KINDS}
        state = self.suppression_state  # tick reports only: early reports keep their own
        send, suppressed = select_reports(
            self.config.suppression, state, {n: figures(gu) for n, gu in self._entries.items()}
        )
        # A group reported early this tick whose demand still reads as reported early: its tick
        # counts average the old demand and the new one, and would set peers (and our own view)
        # back to a demand that no longer holds. The tick report still carries them (they are
        # the usage logs' accounting), and a restatement right after it says the current
        # (window) demand again: peers fold it last, and it is a second chance for peers that
        # lost the early report. A group whose bucket appeared within this tick (its counts
        # cover part of the tick) is restated too once the window measures it.
        tolerance = self.config.suppression.tolerance
        born = {g for (g, _), at in self._born.items() if now - at < tick_s - 1e-9}
        restate = [n for n in send if n in self._window_entries and any(self._window_figures[n])
                   and ((n in self._early_this_tick and n in self._last_figures
                         and not moved(self._last_figures[n], self._window_figures[n], tolerance))
                        or n in born)] if self.config.early_reports else []
        for name in send:
            self._last_figures[name] = state.last_sent[name]
        for name in restate:
            self._last_figures[name] = self._window_figures[name]
        self._early_this_tick = set()
        self._early_mentions = 0
        report = self._new_report(now)
        self._include(report, list(send), now)
        restated = self._restate(restate, now)
        self._sent_this_tick = set(send)
        self.ticks += 1
        self.limiter.recompute_at = now + tick_s
        self.history.prune(now, self.fold_window())
        for name in [g for g in self.history.entries if g not in self._entries]:
            self.history.forget(name)
        for key in [k for k in self._born if k not in self.limiter.states]:
            del self._born[key]
        return TickReport(report, sorted(send), len(suppressed), rates, restated)

    def not_published(self, out: TickReport) -> None:
        """The tick's report (and its restatement) never left us (no broker): give their
        sequence numbers back. Never sent means never lost; otherwise peers would count
        every tick of our outage as a gap in rgd_reports_lost_total."""
        self.sequence = out.report.sequence - 1

    def _restate(self, names: list[str], now: float) -> UsageReport | None:
        """The current demand of groups reported early this tick, again (restatement): the
        tick report leaves them out, and a peer that lost the early report would otherwise
        hold their old demand until the periodic refresh."""
        if not names:
            return None
        report = self._new_report(now)
        report.restatement = True
        span = min(self._window_entries[n][0] for n in names)
        report.tick_ms = max(1, int(round(span * 1000)))
        for name in sorted(names):
            window, gu = self._window_entries[name]
            if abs(window - span) > 1e-9:
                continue
            report.groups.append(gu)
            usage = peer_usage(gu, span)
            self.usage_map.set_local(self.node_id, name, usage, now)
            self.history.add(name, now, usage)
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)
        return report if report.groups else None

    def receive(self, data: bytes, properties: Mapping[str, str] | None, now: float) -> Receipt:
        """Vet one message from the topic and fold it."""
        try:
            report = decode_report(data, self.wall_ms(now), self.node_id, self.incarnation, properties, self.keys)
        except Rejected as exc:
            return Receipt(None, exc.reason)
        if report.daemon_id == self.node_id:
            return Receipt(report, REJECT_OWN)
        result, new = self.keeper.fold(report, now)
        if not result.accepted:
            return Receipt(report, result.reason)
        if report.leaving:
            self.delay.forget(report.daemon_id)
            self.all_dirty = True
        else:
            self._had_peers = True
            self.delay.observe(report.daemon_id, report.publish_time_ms, self.wall_ms(now))
            if new:
                self.all_dirty = True
            self.dirty.update(g.group for g in report.groups)
        return Receipt(report, "", result.lost, new)

    def upkeep(self, now: float) -> list[str]:
        """Evict silent members and expire idle entries; nothing while we are deaf."""
        if not self.hearing:
            return []
        gone = self.keeper.evict_silent(now)
        self.keeper.expire_groups(now)
        return gone

    def announcement(self, now: float) -> UsageReport | None:
        """A full (unsuppressed) report for a newcomer, or None if we have nothing to say."""
        if not self.config.announce:
            return None
        self.suppression_state = SuppressionState()
        send, _ = select_reports(
            self.config.suppression, self.suppression_state, {n: figures(gu) for n, gu in self._entries.items()}
        )
        if not send:
            return None
        report = self._new_report(now)
        report.restatement = True  # the same tick's counts again: log replays must not add them
        self._include(report, list(send), now, skip=self._sent_this_tick)
        return report

    # -- between ticks ----------------------------------------------------------------------

    def _window_counts(self, now: float) -> tuple[float, dict[tuple[str, str], TickCounters]] | None:
        """Snapshot the limiter's cumulative counters; the counts over the last react
        window (and its length), or None until a window's worth of snapshots exists."""
        snap = {
            key: (st.total_admitted_messages, st.total_admitted_bytes,
                  st.total_throttled_messages, st.total_throttled_bytes)
            for key, st in self.limiter.states.items()
        }
        self._snapshots.append((now, snap))
        for key in snap:
            self._born.setdefault(key, now)
        window = self.config.react_window
        while len(self._snapshots) > 1 and self._snapshots[1][0] <= now - window + 1e-9:
            self._snapshots.popleft()
        start, old = self._snapshots[0]
        span = now - start
        if span < window - 1e-9:
            return None
        counts: dict[tuple[str, str], TickCounters] = {}
        for key, new in snap.items():
            was = old.get(key)
            # A bucket created within the window is not measured yet: a fraction of a window
            # would be a noisy demand, and until its first report every member still computes
            # the equal split of a group nobody has reported.
            if was is not None:
                counts[key] = TickCounters(*(n - w for n, w in zip(new, was)))
        return span, counts

    def early_report(self, now: float) -> UsageReport | None:
        """A report of the groups whose demand over the last window moved beyond the
        suppression tolerance since they were last reported (or that are new, or went
        idle), at most one per group per `early_gap_ticks`. Its counts restate part of
        the current tick (`restatement`: log replays do not add them); its tick_ms is the
        window, so peers read rates from it as from any report."""
        measured = self._window_counts(now)
        if measured is None or not self.config.early_reports:
            return None
        span, counts = measured
        tick_s = self.config.tick_seconds
        gap = self.config.early_gap_ticks * tick_s
        collected = {key: Collected(c, frozenset(), 0) for key, c in counts.items()}
        measured = {g for g, _ in counts}
        entries = {n: gu for n, gu in group_entries(collected, self.limiter.states, self.groups()).items()
                   if n in measured}
        send: list[str] = []
        scale = tick_s / span
        self._window_figures = {}
        self._window_entries = {}
        # Budget, pooled over groups: early entries per tick at most the number of groups we
        # serve (at least EARLY_BUDGET_MIN); with the tick report and the tick's restatement
        # of early-reported groups, report bytes per second stay within three unsuppressed tick
        # reports' whatever the load; a few busy groups may use the share of the many quiet ones.
        budget = max(EARLY_BUDGET_MIN, len({g for g, _ in self.limiter.states})) - self._early_mentions
        for name, gu in entries.items():
            now_figures = tuple(x * scale for x in figures(gu))
            self._window_figures[name] = now_figures
            self._window_entries[name] = (span, gu)
            if now - self._early_at.get(name, -1e18) < gap:
                continue
            last = self._last_figures.get(name)
            idle = not any(now_figures)
            if last is None:
                changed = not idle
            else:
                # Going idle is a move like any other: a slow group's window may count nothing.
                changed = moved_beyond_counting(last, now_figures, self.config.suppression.tolerance,
                                                span / tick_s)
            if changed and len(send) < budget:
                send.append(name)
                self._last_figures[name] = now_figures
                self._early_at[name] = now
        if not send:
            return None
        report = self._new_report(now)
        report.restatement = True
        report.tick_ms = max(1, int(round(span * 1000)))
        for name in sorted(send):
            gu = entries[name]
            report.groups.append(gu)
            usage = peer_usage(gu, span)
            self.usage_map.set_local(self.node_id, name, usage, now)
            self.history.add(name, now, usage)
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)
        self.dirty.update(send)
        self._early_this_tick.update(send)
        self._early_mentions += len(send)
        self.early_reports_sent += 1
        return report

    def recompute_changed(self, now: float) -> None:
        """Recompute what changed since the last call: groups named by reports folded,
        groups we reported early, groups whose own increase has now been out long enough
        (and everything after a membership change)."""
        window = self.fold_window()
        pending = self.history.pending(now, window + 2.0 * self.config.react_seconds)
        if self.all_dirty:
            self.recompute()
            return
        names = self.dirty | set(pending)
        self.dirty = set()
        if names:
            self.recompute(names)

    def leaving_report(self, now: float) -> UsageReport:
        """Graceful shutdown: peers evict us at once instead of after the TTL."""
        return self._new_report(now, leaving=True)


__all__ = [
    "ClusterNode", "EARLY_BUDGET_MIN", "EARLY_MIN_EVENTS", "NEW_BUCKET_SECONDS", "NodeConfig", "REJECT_OWN", "Receipt", "TickReport",
    "moved_beyond_counting", "start_seconds_for",
]
