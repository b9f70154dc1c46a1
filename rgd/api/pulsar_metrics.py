"""Pulsar's own resource-group metrics, so a Pulsar dashboard keeps working on rgd.

Opt-in (`--pulsar-metrics`): the same figures rgd exports as `rgd_*`, under the
names and labels Pulsar's broker registers in ResourceGroupService and
ResourceGroup (`pulsar_resource_group_*`, labels `ResourceGroup`,
`MonitoringClass`, and `RemoteBroker`/`RemoteBrokerName` for peers' usage:
Pulsar's ResourceGroup fills `RemoteBrokerName` with the remote cluster of a
per-remote-cluster replication entry, "" for everything else, and so does rgd).
The monitoring classes are Pulsar's enum names: Publish, Dispatch,
ReplicationDispatch.

Pulsar's counters grow once per aggregation period by that period's amount
(`calculated_*_quota` by the quota for the next period, `*_used` by the local
usage), so `rate()` over them gives per-second figures; these grow the same way
once per tick. Pulsar uses the Java simpleclient, whose text format appends
`_total` to counter samples as prometheus-client does here. Pulsar's summaries
carry 0.5/0.9 quantiles; prometheus-client's Summary exports `_count` and `_sum`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import Summary
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from rgd.config.groups import KINDS, split_budget

if TYPE_CHECKING:
    from rgd.api.daemon_view import ObservedState
    from rgd.wire.usage_report_pb2 import UsageReport

# rgd kind -> Pulsar's ResourceGroupMonitoringClass name.
_PULSAR_NAMES = {"publish": "Publish", "dispatch": "Dispatch", "replication": "ReplicationDispatch"}
MONITORING_CLASS = {kind: _PULSAR_NAMES[kind] for kind in KINDS}

Key = tuple[str, str]  # (group, kind)


class PulsarMetrics(Collector):
    """Per-tick accumulators plus a scrape-time view of the limiter and the usage map."""

    def __init__(self, daemon: ObservedState, registry: CollectorRegistry) -> None:
        self.daemon = daemon
        self.quota_messages: dict[Key, float] = defaultdict(float)
        self.quota_bytes: dict[Key, float] = defaultdict(float)
        self.reported: dict[Key, int] = defaultdict(int)
        self.remote_messages: dict[tuple[str, str, str], float] = defaultdict(float)
        self.remote_bytes: dict[tuple[str, str, str], float] = defaultdict(float)
        self.aggregate_seconds = Summary(
            "pulsar_resource_group_aggregate_usage_secs",
            "Time required to aggregate usage of all resource groups, in seconds.", registry=registry)
        self.calculate_seconds = Summary(
            "pulsar_resource_group_calculate_quota_secs",
            "Time required to calculate quota of all resource groups, in seconds.", registry=registry)
        registry.register(self)

    def on_tick(self, sent_groups: Iterable[str], aggregate_s: float, calculate_s: float) -> None:
        """After a tick's recompute: add this tick's quotas and reports (peers' usage: on_report)."""
        d = self.daemon
        tick_s = d.settings.tick
        self.aggregate_seconds.observe(aggregate_s)
        self.calculate_seconds.observe(calculate_s)
        for (group, kind), st in list(d.limiter.states.items()):
            m, b = st.limit
            if math.isfinite(m):
                self.quota_messages[(group, kind)] += m * tick_s
            if math.isfinite(b):
                self.quota_bytes[(group, kind)] += b * tick_s
        for group in sent_groups:
            for kind in MONITORING_CLASS:
                if (group, kind) in d.limiter.states:
                    self.reported[(group, kind)] += 1

    def on_report(self, report: UsageReport) -> None:
        """A peer's report folded: its counts are its usage since its previous report. Counted
        at receipt, from the report (exact), not from the usage map: peers report between ticks
        too (a demand shift), so an entry may be replaced before our tick sees it. Restatements
        repeat counts already reported (or not yet: early reports), and are not added."""
        if report.restatement or report.leaving:
            return
        for g in report.groups:
            for kind in MONITORING_CLASS:
                k = getattr(g, kind)
                self.remote_messages[(g.group, kind, report.daemon_id)] += k.admitted_messages
                self.remote_bytes[(g.group, kind, report.daemon_id)] += k.admitted_bytes

    def collect(self) -> Iterator[Metric]:
        d = self.daemon
        rg_mc = ["ResourceGroup", "MonitoringClass"]
        remote_labels = ["ResourceGroup", "MonitoringClass", "RemoteBroker", "RemoteBrokerName"]
        quota_b = CounterMetricFamily("pulsar_resource_group_calculated_bytes_quota",
                                      "Bytes quota calculated for resource group", labels=rg_mc)
        quota_m = CounterMetricFamily("pulsar_resource_group_calculated_messages_quota",
                                      "Messages quota calculated for resource group", labels=rg_mc)
        used_b = CounterMetricFamily("pulsar_resource_group_bytes_used",
                                     "Bytes locally used within this resource group "
                                     "during the last aggregation interval",
                                     labels=rg_mc)
        used_m = CounterMetricFamily("pulsar_resource_group_messages_used",
                                     "Messages locally used within this resource group "
                                     "during the last aggregation interval",
                                     labels=rg_mc)
        reported = CounterMetricFamily("pulsar_resource_group_local_usage_reported",
                                       "Number of times local usage was reported (vs. "
                                       "suppressed due to negligible change)",
                                       labels=rg_mc)
        remote_b = CounterMetricFamily("pulsar_resource_group_remote_usage_bytes_used",
                                       "Bytes used reported about this <RG, monitoring class> from a remote broker",
                                       labels=remote_labels)
        remote_m = CounterMetricFamily("pulsar_resource_group_remote_usage_messages_used",
                                       "Messages used reported about this <RG, monitoring class> from a remote broker",
                                       labels=remote_labels)
        remote_bg = GaugeMetricFamily("pulsar_resource_group_remote_usage_bytes_used_gauge",
                                      "Bytes used reported about this <RG, monitoring class> from a remote broker",
                                      labels=remote_labels)
        remote_mg = GaugeMetricFamily("pulsar_resource_group_remote_usage_messages_used_gauge",
                                      "Messages used reported about this <RG, monitoring class> from a remote broker",
                                      labels=remote_labels)
        # Pulsar's local families have no remote cluster: a group's replication to every remote
        # cluster is one (ResourceGroup, ReplicationDispatch) series, its budgets summed.
        local: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
        for (budget, kind), st in list(d.limiter.states.items()):
            row = local[(split_budget(budget)[0], kind)]
            row[0] += st.total_admitted_bytes
            row[1] += st.total_admitted_messages
            row[2] += self.quota_bytes.get((budget, kind), 0.0)
            row[3] += self.quota_messages.get((budget, kind), 0.0)
            row[4] = max(row[4], self.reported.get((budget, kind), 0))
        for (group, kind), (ub, um, qb, qm, rep) in local.items():
            labels = [group, MONITORING_CLASS[kind]]
            used_b.add_metric(labels, ub)
            used_m.add_metric(labels, um)
            quota_b.add_metric(labels, qb)
            quota_m.add_metric(labels, qm)
            reported.add_metric(labels, rep)
        # The remote families carry the remote cluster where Pulsar does: in RemoteBrokerName
        # (Pulsar fills it with the monitoring key's remote cluster, "" for none).
        for (budget, kind, peer), value in list(self.remote_bytes.items()):
            group, remote = split_budget(budget)
            remote_b.add_metric([group, MONITORING_CLASS[kind], peer, remote], value)
            remote_m.add_metric([group, MONITORING_CLASS[kind], peer, remote],
                                self.remote_messages[(budget, kind, peer)])
        me, tick_s = d.settings.id, d.settings.tick
        for budget, entries in list(d.usage_map.groups.items()):
            group, remote = split_budget(budget)
            for peer, entry in list(entries.items()):
                if peer == me:
                    continue
                for kind, monitoring_class in MONITORING_CLASS.items():
                    k = entry.usage.kind(kind)
                    remote_bg.add_metric([group, monitoring_class, peer, remote], k.admitted_bytes * tick_s)
                    remote_mg.add_metric([group, monitoring_class, peer, remote], k.admitted_messages * tick_s)
        yield from (quota_b, quota_m, used_b, used_m, reported, remote_b, remote_m, remote_bg, remote_mg)


__all__ = ["MONITORING_CLASS", "PulsarMetrics"]
