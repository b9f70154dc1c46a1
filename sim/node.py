"""One simulated daemon: the daemon's own parts, driven on the simulator's clock.

A tick is the daemon's tick (rgd/daemon.py), in the same order, with the same
pieces imported, not copied: `Limiter` (collect), `report_builder` +
`select_reports` (report), `report_codec.decode_report` + `UsageMap` (read), and
`compute_limits` (compute). Only the Pulsar session is replaced by the
simulated topic, and the clock by the simulator's.

Three behaviours the daemon needs for the `rgd` guarantees, which the simulator
therefore has (the daemon should adopt them; see sim/README.md):
- `previous`: for each group, our own entry as it was before this tick's report
  went into the map, passed to compute_limits;
- announce: when a new member appears, publish a full (unsuppressed) report at
  once, so the newcomer's map is complete by its second tick;
- upkeep under loss (sim/upkeep.py): a peer's group entry expires on evidence
  (K + 1 consecutive reports without it), not on age alone, and a member evicted
  for silence gets its entries back if it speaks again with the same incarnation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol

from rgd.groups import ResourceGroup
from rgd.limiter import Limiter
from rgd.quota.calculator import QuotaParams, compute_limits
from rgd.quota.model import GroupLimits, PeerUsage
from rgd.report_builder import figures, group_entries, peer_usage
from rgd.report_codec import Rejected, decode_report
from rgd.suppression import SuppressionState, select_reports
from rgd.usage_map import UsageMap
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport
from sim.profiles import Profile
from sim.upkeep import MapKeeper

# Simulated time 0 as a wall clock (2026-01-01T00:00:00Z), so reports and logs carry
# plausible Unix timestamps.
SIM_EPOCH = 1_767_225_600.0


def wall_ms(now: float) -> int:
    return int(round((SIM_EPOCH + now) * 1000))


class ReportSink(Protocol):
    """Where a node's reports go: the simulated topic, plus an optional usage log."""

    def publish(self, node: "SimNode", data: bytes, now: float) -> None: ...

    def received(self, node: "SimNode", report: UsageReport, data: bytes, now: float) -> None: ...


@dataclass
class NodeStats:
    reports: int = 0
    report_bytes: int = 0
    groups_sent: int = 0
    groups_suppressed: int = 0
    announcements: int = 0
    rejected: int = 0
    lost: int = 0


@dataclass
class SimNode:
    node_id: str
    incarnation: int
    phase: int  # sub-step of each tick at which this daemon ticks
    clock: Callable[[], float]
    strategy: str
    params: QuotaParams
    profile: Profile
    groups: Mapping[str, ResourceGroup]  # the cluster config, shared by all nodes
    sink: ReportSink
    burst_seconds: float = 1.0
    tick_seconds: float = 1.0
    limiter: Limiter = field(init=False)
    usage_map: UsageMap = field(default_factory=UsageMap)
    suppression_state: SuppressionState = field(default_factory=SuppressionState)
    inbox: list[bytes] = field(default_factory=list)
    sequence: int = 0
    # Our own entry per group as every peer has folded it (see module doc).
    previous: dict[str, PeerUsage | None] = field(default_factory=dict)
    keeper: MapKeeper = field(init=False)
    stats: NodeStats = field(default_factory=NodeStats)

    def __post_init__(self) -> None:
        self.limiter = Limiter(self.clock, self.burst_seconds, initial_limits=self._initial_limits)
        self.keeper = MapKeeper(
            self.usage_map, self.node_id, self.profile.suppression.max_skipped_ticks + 1,
            self.profile.ttl_ticks * self.tick_seconds, self.profile.safety_ttl_ticks * self.tick_seconds,
        )

    # -- the calculator ---------------------------------------------------------------------

    def members(self) -> set[str]:
        return set(self.usage_map.members) | {self.node_id}

    def limits_for(self, group: ResourceGroup) -> GroupLimits:
        return compute_limits(
            group, self.usage_map.group_usage(group.name), self.node_id, self.members(),
            self.strategy, self.params, previous=self.previous.get(group.name),
        )

    def _initial_limits(self, group: ResourceGroup, kind: str) -> tuple[float, float]:
        return self.limits_for(group)[kind]

    def recompute(self) -> None:
        for (name, kind) in list(self.limiter.states):
            group = self.groups.get(name)
            if group is None:
                continue
            msgs, nbytes = self.limits_for(group)[kind]
            self.limiter.set_limit(group, kind, msgs, nbytes)

    def apply_config(self) -> None:
        """After a config change: drop deleted groups, recompute now (as the daemon does)."""
        for name in {g for g, _ in self.limiter.states} - set(self.groups):
            self.limiter.forget(name)
        self.recompute()

    # -- traffic ----------------------------------------------------------------------------

    def offer(self, group: ResourceGroup, kind: str, messages: int, batch: int, message_bytes: int,
              now: float) -> int:
        """Brokers ask for `messages` in acquires of `batch`; returns how many were admitted."""
        admitted = 0
        namespace = f"{group.name}/ns"
        while messages > 0:
            n = min(batch, messages)
            messages -= n
            if self.limiter.acquire(group, kind, n, n * message_bytes, namespace, now=now).allowed:
                admitted += n
        return admitted

    # -- the tick ---------------------------------------------------------------------------

    def _report(self, now: float, entries: Mapping[str, GroupUsage], send: list) -> UsageReport:
        self.sequence += 1
        report = UsageReport(
            daemon_id=self.node_id, sequence=self.sequence, publish_time_ms=wall_ms(now),
            tick_ms=int(round(self.tick_seconds * 1000)), incarnation=self.incarnation,
        )
        for name in sorted(send):
            report.groups.append(entries[name])
        return report

    def _publish(self, report: UsageReport, now: float) -> None:
        data = report.SerializeToString()
        self.stats.reports += 1
        self.stats.report_bytes += len(data)
        self.sink.publish(self, data, now)

    def tick(self, now: float) -> None:
        tick_s = self.tick_seconds
        # collect
        entries = group_entries(self.limiter.collect(), self.limiter.states, self.groups)
        current = {n: figures(gu) for n, gu in entries.items()}
        # report
        send, suppressed = select_reports(self.profile.suppression, self.suppression_state, current)
        self.stats.groups_sent += len(send)
        self.stats.groups_suppressed += len(suppressed)
        own = {g: e.get(self.node_id) for g, e in self.usage_map.groups.items()}
        self.previous = {g: e.usage for g, e in own.items() if e is not None}
        report = self._report(now, entries, send)
        for name in send:
            self.usage_map.set_local(self.node_id, name, peer_usage(entries[name], tick_s), now)
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)
        self._publish(report, now)
        # read
        newcomers = self._read(now)
        self.keeper.evict_silent(now)
        self.keeper.expire_groups(now)
        if newcomers and self.profile.announce:
            self._announce(now, entries, set(send))
        # compute
        self.recompute()

    def _read(self, now: float) -> list[str]:
        newcomers: list[str] = []
        inbox, self.inbox = self.inbox, []
        for data in inbox:
            try:
                report = decode_report(data, wall_ms(now), self.node_id, self.incarnation)
            except Rejected:
                self.stats.rejected += 1
                continue
            result, new = self.keeper.fold(report, now)
            if not result.accepted:
                self.stats.rejected += 1
                continue
            self.stats.lost += result.lost
            self.sink.received(self, report, data, now)
            if new:
                newcomers.append(report.daemon_id)
        return newcomers

    def _announce(self, now: float, entries: Mapping[str, GroupUsage], already_sent: set[str]) -> None:
        """A full report right away, so the newcomer hears every active group of ours."""
        self.suppression_state = SuppressionState()
        current = {n: figures(gu) for n, gu in entries.items()}
        send, _ = select_reports(self.profile.suppression, self.suppression_state, current)
        if not send:
            return
        self.stats.announcements += 1
        report = self._report(now, entries, send)
        for name in send:
            if name not in already_sent:
                self.usage_map.set_local(self.node_id, name, peer_usage(entries[name], self.tick_seconds), now)
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)
        self._publish(report, now)

    def leave(self, now: float) -> None:
        """Graceful shutdown: the leaving report, so peers evict us at once."""
        self.sequence += 1
        report = UsageReport(
            daemon_id=self.node_id, sequence=self.sequence, publish_time_ms=wall_ms(now),
            tick_ms=int(round(self.tick_seconds * 1000)), incarnation=self.incarnation, leaving=True,
        )
        self._publish(report, now)


__all__ = ["SimNode", "ReportSink", "NodeStats", "SIM_EPOCH", "wall_ms"]
