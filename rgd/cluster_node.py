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

Outage: while we cannot hear the topic, shares stay as they were for
`outage_grace` seconds, then fall to quota / members-last-known-alive (never
the full quota a lone daemon would grant itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from rgd.groups import KINDS, ResourceGroup
from rgd.limiter import Limiter, rate_of
from rgd.map_keeper import MapKeeper
from rgd.quota.calculator import compute_limits
from rgd.quota.inputs import QuotaParams
from rgd.quota.model import GroupLimits, PeerUsage
from rgd.report_builder import figures, group_entries, local_rates, peer_usage
from rgd.report_codec import HmacKeys, Rejected, decode_report
from rgd.suppression import SuppressionPolicy, SuppressionState, select_reports
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport
from rgd.usage_map import UsageMap

REJECT_OWN = "own"  # our own report echoed by the topic: ignored, not an error


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

    @property
    def safety_ttl_ticks(self) -> int:
        """A group entry unconfirmed this long goes even without evidence of idleness:
        three refresh periods plus the TTL."""
        return 3 * (self.suppression.max_skipped_ticks + 1) + self.ttl_ticks


@dataclass
class TickReport:
    report: UsageReport
    sent: list[str]
    suppressed: int
    local_rates: dict[tuple[str, str], tuple[float, float]]  # this tick's admitted msgs/s, bytes/s


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
                               initial_limits=self._initial_limits)
        # Our own entry per group as every peer has folded it by now (see calculator doc).
        self.previous: dict[str, PeerUsage | None] = {}
        self._entries: dict[str, GroupUsage] = {}
        self._sent_this_tick: set[str] = set()
        # Outage state.
        self.hearing = True
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

    def limits_for(self, group: ResourceGroup) -> GroupLimits:
        members = self.members()
        if self.safe_share_active():
            n = max(1, self.members_at_deafness)
            return {k: (rate_of(group.rates(k)[0]) / n, rate_of(group.rates(k)[1]) / n) for k in KINDS}
        usage = self.usage_map.group_usage(group.name)
        if len(members) == 1 and self.ticks >= 1 and self.hearing:
            # We listened a full tick and nobody reported: no peer can overshoot with us,
            # so our newest demand counts at once.
            previous = usage.get(self.node_id)
        else:
            previous = self.previous.get(group.name)
        return compute_limits(group, usage, self.node_id, members, self.config.strategy,
                              self.config.params, previous=previous)

    def _initial_limits(self, group: ResourceGroup, kind: str) -> tuple[float, float]:
        return self.limits_for(group)[kind]

    def recompute(self) -> None:
        """New local limits for every group the limiter knows, one calculator call per group."""
        groups = self.groups()
        for name in {g for g, _ in self.limiter.states}:
            group = groups.get(name)
            if group is None:
                continue
            limits = self.limits_for(group)
            for kind in KINDS:
                if (name, kind) in self.limiter.states:
                    self.limiter.set_limit(group, kind, *limits[kind])

    def apply_config(self) -> None:
        """After a config change: drop deleted groups' buckets, recompute now."""
        for name in {g for g, _ in self.limiter.states} - set(self.groups()):
            self.limiter.forget(name)
        self.recompute()

    # -- the tick ---------------------------------------------------------------------------

    def set_hearing(self, hearing: bool, now: float) -> bool:
        """Whether we can hear the topic now; returns True when hearing just came back."""
        recovered = hearing and not self.hearing
        if hearing:
            if recovered:
                self.usage_map.refresh_all(now)  # peers were silent because we were deaf
            self.deaf_since = None
        elif self.hearing:
            self.deaf_since = now
            self.members_at_deafness = len(self.members())
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
                self.usage_map.set_local(self.node_id, name, peer_usage(self._entries[name], tick_s), now)
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)

    def tick_report(self, now: float) -> TickReport:
        """Collect and report: this tick's report (to publish) with its bookkeeping done."""
        tick_s = self.config.tick_seconds
        self.previous = {g: e[self.node_id].usage for g, e in self.usage_map.groups.items() if self.node_id in e}
        self._entries = group_entries(self.limiter.collect(), self.limiter.states, self.groups())
        rates = {(n, k): local_rates(gu, k, tick_s) for n, gu in self._entries.items() for k in KINDS}
        send, suppressed = select_reports(
            self.config.suppression, self.suppression_state, {n: figures(gu) for n, gu in self._entries.items()}
        )
        report = self._new_report(now)
        self._include(report, list(send), now)
        self._sent_this_tick = set(send)
        self.ticks += 1
        return TickReport(report, sorted(send), len(suppressed), rates)

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

    def leaving_report(self, now: float) -> UsageReport:
        """Graceful shutdown: peers evict us at once instead of after the TTL."""
        return self._new_report(now, leaving=True)
