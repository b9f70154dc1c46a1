"""One simulated daemon: rgd's ClusterNode on the simulator's clock and topic.

Everything a daemon decides (collect, suppress, report, vet and fold, evict, compute) is
`rgd.cluster.node.ClusterNode`, the same object the real daemon drives, with the same
`Clock` interface; this wrapper only replaces Pulsar with the simulated topic (`ReportSink`)
and counts what happened for the results table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from rgd.cluster.node import REJECT_OWN, ClusterNode, NodeConfig, start_seconds_for
from rgd.cluster.report_codec import serialize_report
from rgd.cluster.usage_map import UsageMap
from rgd.config.groups import ResourceGroup
from rgd.limiting.limiter import Limiter
from rgd.limiting.token_bucket import DEFAULT_BURST_SECONDS
from rgd.quota.calculator import QuotaParams
from rgd.quota.model import GroupLimits
from rgd.wire.usage_report_pb2 import UsageReport
from sim.profiles import Profile

# Simulated time 0 as a wall clock (2026-01-01T00:00:00Z), so reports and logs carry
# plausible Unix timestamps.
SIM_EPOCH = 1_767_225_600.0


def wall_ms(now: float) -> int:
    return int(round((SIM_EPOCH + now) * 1000))


@dataclass(frozen=True)
class SimClock:
    """The simulator's time through the node's Clock interface."""

    read: Callable[[], float]

    def now(self) -> float:
        return self.read()

    def wall_ms(self, at: float) -> int:
        return wall_ms(at)


class ReportSink(Protocol):
    """Where a node's reports go: the simulated topic, plus an optional usage log."""

    def publish(self, node: SimNode, data: bytes, now: float) -> None: ...

    def received(self, node: SimNode, report: UsageReport, data: bytes, now: float) -> None: ...


@dataclass
class NodeStats:
    reports: int = 0
    report_bytes: int = 0
    groups_sent: int = 0
    groups_suppressed: int = 0
    announcements: int = 0
    early_reports: int = 0
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
    burst_seconds: float = DEFAULT_BURST_SECONDS
    tick_seconds: float = 1.0
    react_seconds: float = 0.1  # one sub-step: react() runs at every one
    inbox: list[bytes] = field(default_factory=list)
    stats: NodeStats = field(default_factory=NodeStats)
    node: ClusterNode = field(init=False)
    _hello_due: bool = True

    def __post_init__(self) -> None:
        config = NodeConfig(
            self.node_id, self.tick_seconds, self.strategy, self.params, self.profile.suppression,
            float(self.profile.ttl_ticks), self.burst_seconds,
            react_seconds=self.react_seconds, early_reports=self.profile.react,
            start_seconds=start_seconds_for(self.strategy),
        )
        self.node = ClusterNode(config, self.incarnation, SimClock(self.clock), lambda: self.groups)

    @property
    def limiter(self) -> Limiter:
        return self.node.limiter

    @property
    def usage_map(self) -> UsageMap:
        return self.node.usage_map

    def limits_for(self, group: ResourceGroup) -> GroupLimits:
        return self.node.limits_for(group)

    def apply_config(self) -> None:
        self.node.apply_config()
        self.node.recompute_changed(self.clock())

    def asker(self, group: ResourceGroup, kind: str, message_bytes: int) -> Callable[[int, float], bool]:
        """How this daemon's brokers ask its limiter (sim/broker.py): n messages of
        `message_bytes` at a given instant -> admitted or not."""
        namespace = f"{group.name}/ns"
        limiter = self.node.limiter

        def ask(n: int, at: float) -> bool:
            return limiter.acquire(group, kind, n, n * message_bytes, namespace, now=at).allowed

        return ask

    def _publish(self, parts: list[UsageReport], now: float) -> None:
        for part in parts:
            data = serialize_report(part)
            self.stats.reports += 1
            self.stats.report_bytes += len(data)
            self.stats.groups_sent += len(part.groups)
            self.sink.publish(self, data, now)

    def tick(self, now: float) -> None:
        """The daemon's tick (see rgd/cluster/node.py), with the simulated topic as I/O."""
        out = self.node.tick_report(now)
        self.stats.groups_suppressed += out.suppressed
        self._publish(out.parts, now)
        self._read(now)
        self.node.upkeep(now)
        self.node.recompute_changed(now)

    def react(self, now: float) -> None:
        """Between ticks (every sub-step): fold what arrived, recompute what changed, publish
        a report at once if demand rose or a peer asked for acknowledgements."""
        if self._hello_due:
            self._hello_due = False
            self._publish(self.node.hello_report(now), now)
        if not self.profile.react:
            return
        self._read(now)
        self.node.recompute_changed(now)
        parts = self.node.react(now)
        if parts:
            self.stats.early_reports += 1
            self._publish(parts, now)

    def _read(self, now: float) -> None:
        inbox, self.inbox = self.inbox, []
        for data in inbox:
            receipt = self.node.receive(data, None, now)
            if receipt.reason == REJECT_OWN:
                continue
            if not receipt.accepted:
                self.stats.rejected += 1
                continue
            self.stats.lost += receipt.lost
            assert receipt.report is not None
            self.sink.received(self, receipt.report, data, now)

    def leave(self, now: float) -> None:
        """Graceful shutdown: the leaving report, so peers evict us at once."""
        self._publish([self.node.leaving_report(now)], now)


__all__ = ["SIM_EPOCH", "NodeStats", "ReportSink", "SimClock", "SimNode", "wall_ms"]
