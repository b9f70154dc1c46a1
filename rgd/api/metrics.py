"""Prometheus metrics (DESIGN §7), one registry per daemon.

Hot-path figures (admitted/throttled per group) live as plain ints in the
limiter and are turned into samples at scrape time by `LimiterCollector`, so
an acquire never touches a Prometheus lock. Everything per tick or rarer uses
ordinary prometheus-client objects.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rgd.api.connection_guard import connection_limit
from rgd.config.groups import KINDS, split_budget

if TYPE_CHECKING:
    from rgd.api.connection_guard import ConnectionGuard
    from rgd.api.daemon_view import ObservedState


MAX_PEER_SERIES = 20_000  # rgd_peer_usage_rate samples per scrape at most
# A per-group family is built and rendered this many samples at a time (see in_parts). 2 000
# still showed each scrape in the daemon's RSS at PIP-82's scale (bench/scale_probe.py: the
# seconds of the scrapes were the run's highest, at most 147-150 MB); at 500 they are not
# (143-145 MB), for ~260 parts a scrape instead of ~65 and the same worst scrape time.
SAMPLES_PER_PART = 500
# The label naming the remote cluster of a per-remote-cluster replication budget (Pulsar's
# replicatorDispatchRate entry), on every per-group family; empty for the group's own budget.
REMOTE = "remote_cluster"


def _finite(x: float) -> float:
    return -1.0 if x == math.inf else x


def http_connection_families(conns: ConnectionGuard | None, configured_limit: int) -> Iterator[Metric]:
    """The HTTP listeners' connections against the limit (`conns` is None until they listen:
    nothing open or shed yet)."""
    open_ = GaugeMetricFamily("rgd_http_connections", "HTTP connections open")
    open_.add_metric([], conns.open_connections if conns else 0)
    limit_ = GaugeMetricFamily("rgd_http_connection_limit", "HTTP connections kept open at most")
    limit_.add_metric([], conns.limit if conns else connection_limit(configured_limit))
    shed = CounterMetricFamily("rgd_http_connections_shed", "Connections closed or refused at the limit",
                               labels=["action"])
    shed.add_metric(["idle_closed"], conns.counts.idle_closed if conns else 0)
    shed.add_metric(["refused"], conns.counts.refused if conns else 0)
    yield from (open_, limit_, shed)


def in_parts(new_family: Callable[[], GaugeMetricFamily | CounterMetricFamily],
             samples: Iterable[tuple[list[str], float]]) -> Iterator[Metric]:
    """One family as consecutive parts of at most SAMPLES_PER_PART samples, each a family of
    the same name (at least one, so an empty family still has its header). Rendered by
    `exposition_chunks`, they are one family in the text. At 5 000 groups a per-group family
    is 10 000-20 000 samples, ~10 MB of label dicts, sample tuples and text while it is
    built and rendered: each scrape raised the daemon's RSS by that much
    (bench/scale_probe.py prints RSS every 5 s)."""
    family = new_family()
    count = 0
    for labels, value in samples:
        if count == SAMPLES_PER_PART:
            yield family
            family = new_family()
            count = 0
        family.add_metric(labels, value)
        count += 1
    yield family


class LimiterCollector(Collector):
    """Per-group families built one at a time, as the exposition asks for the next: at 5 000
    groups a scrape is ~10^5 samples, and building every family before rendering any held
    them all at once (with their text, ~60 MB of short-lived objects a scrape, measured with
    tracemalloc in bench/scale_probe.py's daemon), a peak the process keeps as RSS."""

    def __init__(self, daemon: ObservedState) -> None:
        self.daemon = daemon

    def collect(self) -> Iterator[Metric]:
        d = self.daemon
        yield from self._counters()
        yield from self._events()
        yield from self._shadow()
        yield from self._limits()
        yield from self._quotas()
        yield from self._used()
        yield from self._peer_usage()
        yield from self._fairness()
        oldest = GaugeMetricFamily("rgd_usage_map_oldest_report_age_seconds",
                                   "Age of the oldest report in the usage map")
        oldest.add_metric([], d.usage_map.oldest_report_age(d.clock()))
        members = GaugeMetricFamily("rgd_cluster_members", "Daemons in the usage map (self included)")
        members.add_metric([], len(d.usage_map.members))
        suspect = CounterMetricFamily("rgd_report_entries_suspect",
                                      "Peers' entries parsed after their report was folded that failed vetting "
                                      "(counted as busy as the quota allows)")
        suspect.add_metric([], d.usage_map.late_rejected)
        yield from (oldest, members, suspect)
        # Reports received and not yet folded: a daemon that reads the topic behind shows it
        # here first (and in memory: the inbox holds up to MAX_INBOX_BYTES), before the
        # inbox_full rejections and the reports lost that follow.
        inbox = GaugeMetricFamily("rgd_inbox_reports", "Reports received from the topic and not yet folded")
        inbox.add_metric([], d.inbox.qsize())
        inbox_bytes = GaugeMetricFamily("rgd_inbox_bytes", "Bytes of the reports received and not yet folded "
                                        "(the entries this daemon folds, as vetted on arrival)")
        inbox_bytes.add_metric([], d.inbox_bytes)
        yield from (inbox, inbox_bytes)
        if not d.behind_serving_process:  # else the serving process's listeners are the daemon's
            yield from http_connection_families(d.connection_guard, d.settings.http_max_connections)
        guard = d.log_guard
        if guard is not None:
            failing = GaugeMetricFamily("rgd_usage_log_failing",
                                        "1 while usage log writes fail (the limiter keeps running)")
            failing.add_metric([], 1 if guard.state.failing else 0)
            failures = CounterMetricFamily("rgd_usage_log_failures", "Times the usage log started failing")
            failures.add_metric([], guard.state.failures)
            dropped = CounterMetricFamily("rgd_usage_log_dropped_records",
                                          "Log records dropped while the log was failing")
            dropped.add_metric([], guard.state.dropped_records)
            yield from (failing, failures, dropped)
        lag = d.log_lag()
        if lag is not None:
            for name, help_text, value in lag:
                g = GaugeMetricFamily(name, help_text)
                g.add_metric([], value)
                yield g

    def _counters(self) -> Iterator[Metric]:
        for name, help_text, field in (
            ("rgd_admitted_messages", "Messages admitted", "total_admitted_messages"),
            ("rgd_admitted_bytes", "Bytes admitted", "total_admitted_bytes"),
            ("rgd_throttled_messages", "Messages denied", "total_throttled_messages"),
            ("rgd_throttled_bytes", "Bytes denied", "total_throttled_bytes"),
        ):
            states = list(self.daemon.limiter.states.items())
            yield from in_parts(partial(CounterMetricFamily, name, help_text, labels=["group", "kind", REMOTE]),
                                (([group, kind, remote], getattr(st, field)) for (budget, kind), st in states
                                 for group, remote in [split_budget(budget)]))

    def _events(self) -> Iterator[Metric]:
        states = list(self.daemon.limiter.states.items())
        yield from in_parts(
            lambda: CounterMetricFamily("rgd_throttled_events", "Denied requests by the limit that denied them",
                                        labels=["group", "kind", "reason", REMOTE]),
            (([group, kind, reason, remote], n) for (budget, kind), st in states
             for group, remote in [split_budget(budget)]
             for reason, n in list((st.throttled_events or {}).items())))

    def _shadow(self) -> Iterator[Metric]:
        """Shadow mode: asks that would have been throttled (and were admitted), by reason, and
        their volume (docs/operating/shadow-mode.md)."""
        states = [(key, st) for key, st in list(self.daemon.limiter.states.items()) if st.shadow_events]
        yield from in_parts(
            lambda: CounterMetricFamily("rgd_shadow_throttled_events",
                                        "Requests shadow mode let through that enforcing would have denied, "
                                        "by the limit that would have denied them",
                                        labels=["group", "kind", "reason", REMOTE]),
            (([group, kind, reason, remote], n) for (budget, kind), st in states
             for group, remote in [split_budget(budget)]
             for reason, n in list((st.shadow_events or {}).items())))
        for name, help_text, field in (
            ("rgd_shadow_throttled_messages", "Messages shadow mode admitted that enforcing would have denied",
             "total_shadow_throttled_messages"),
            ("rgd_shadow_throttled_bytes", "Bytes shadow mode admitted that enforcing would have denied",
             "total_shadow_throttled_bytes"),
        ):
            yield from in_parts(partial(CounterMetricFamily, name, help_text, labels=["group", "kind", REMOTE]),
                                (([group, kind, remote], getattr(st, field)) for (budget, kind), st in states
                                 for group, remote in [split_budget(budget)]))

    def _limits(self) -> Iterator[Metric]:
        states = list(self.daemon.limiter.states.items())
        yield from in_parts(
            lambda: GaugeMetricFamily("rgd_local_limit", "Local limit in force per second (-1 = unlimited)",
                                      labels=["group", "kind", "unit", REMOTE]),
            (([group, kind, unit, remote], _finite(bucket.rate)) for (budget, kind), st in states
             for group, remote in [split_budget(budget)]
             for unit, bucket in (("messages", st.messages), ("bytes", st.bytes))))

    def _quotas(self) -> Iterator[Metric]:
        budgets = self.daemon.config.effective.budget_map()
        keys = list(self.daemon.limiter.states)

        def samples() -> Iterator[tuple[list[str], float]]:
            for budget, kind in keys:
                g = budgets.get(budget)
                if g is not None:
                    group, remote = split_budget(budget)
                    qm, qb = g.rates(kind)
                    yield [group, kind, "messages", remote], qm
                    yield [group, kind, "bytes", remote], qb

        yield from in_parts(
            lambda: GaugeMetricFamily("rgd_quota", "Cluster-wide quota per second (-1 = unlimited)",
                                      labels=["group", "kind", "unit", REMOTE]), samples())

    def _used(self) -> Iterator[Metric]:
        rates = list(self.daemon.last_local_rates.items())
        yield from in_parts(
            lambda: GaugeMetricFamily("rgd_used_rate", "This daemon's admitted rate in the last tick",
                                      labels=["group", "kind", "unit", REMOTE]),
            (([group, kind, unit, remote], r) for (budget, kind), pair in rates
             for group, remote in [split_budget(budget)]
             for unit, r in (("messages", pair[0]), ("bytes", pair[1]))))

    def _fairness(self) -> Iterator[Metric]:
        """The live fairness gauges (rgd.api.fairness_gauges), as the last tick computed them."""
        figures = list(self.daemon.fairness.items())
        for name, help_text, index in (
            ("rgd_group_fairness_jain", "Jain's index of admitted over the max-min fair share of demand "
                                        "(1 = every daemon has the same fraction of its fair share)", 0),
            ("rgd_group_fair_share_error", "Largest deviation of a daemon's admitted rate from its max-min fair "
                                           "share, as a fraction of the quota", 1),
            ("rgd_group_quota_utilization", "Admitted rate of all daemons as a fraction of the quota", 2),
        ):
            yield from in_parts(partial(GaugeMetricFamily, name, help_text, labels=["group", "kind", "unit", REMOTE]),
                                (([group, kind, unit, remote], f[index]) for (budget, kind, unit), f in figures
                                 for group, remote in [split_budget(budget)]))

    def _peer_usage(self) -> Iterator[Metric]:
        # Every (group, daemon, kind) of the map is 150 000 series at PIP-82's scale (5 000
        # groups on 5 daemons each): more than a scrape should carry, and a second of the
        # daemon's CPU to render. So a kind that reported nothing admitted is left out (absent
        # means idle), and beyond MAX_PEER_SERIES samples the rest are only counted.
        emitted = dropped = 0

        def samples() -> Iterator[tuple[list[str], float]]:
            nonlocal emitted, dropped
            for budget, entries in list(self.daemon.usage_map.groups.items()):
                group, remote = split_budget(budget)
                for daemon_id, entry in list(entries.items()):
                    for kind in KINDS:
                        k = entry.usage.kind(kind)
                        if not (k.admitted_messages or k.admitted_bytes):
                            continue
                        if emitted >= MAX_PEER_SERIES:
                            dropped += 2
                            continue
                        yield [group, daemon_id, kind, "messages", remote], k.admitted_messages
                        yield [group, daemon_id, kind, "bytes", remote], k.admitted_bytes
                        emitted += 2

        yield from in_parts(lambda: GaugeMetricFamily("rgd_peer_usage_rate", "Admitted rate each daemon last reported",
                                                      labels=["group", "daemon", "kind", "unit", REMOTE]), samples())
        peer_dropped = GaugeMetricFamily("rgd_peer_usage_series_dropped",
                                         f"rgd_peer_usage_rate samples left out beyond {MAX_PEER_SERIES}")
        peer_dropped.add_metric([], dropped)
        yield peer_dropped


class _OneFamily(Collector):
    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterable[Metric]:
        return (self.family,)


def exposition_chunks(registry: Collector) -> Iterator[bytes]:
    """The text exposition of `registry`, one metric family (or part of one, see in_parts)
    at a time. Concatenated, the chunks are `generate_latest(registry)` with each family's
    parts as one family; streamed, only one part and its text are alive at once (a scrape at
    5 000 groups is ~8 MB of text)."""
    previous = None
    for family in registry.collect():
        text = generate_latest(_OneFamily(family))
        if family.name == previous:  # a further part: its samples, without the header again
            text = b"".join(line for line in text.splitlines(keepends=True) if not line.startswith(b"# "))
        previous = family.name
        yield text


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.reports_published = Counter("rgd_reports_published", "Usage reports published", registry=r)
        self.early_reports = Counter(
            "rgd_reports_early", "Reports published between ticks because a group's demand moved", registry=r
        )
        self.groups_suppressed = Counter(
            "rgd_report_groups_suppressed", "Group entries left out of a report by suppression", registry=r
        )
        self.reports_received = Counter("rgd_reports_received", "Reports received from peers", registry=r)
        self.reports_rejected = Counter(
            "rgd_reports_rejected", "Reports rejected, by reason", ["reason"], registry=r
        )
        self.reports_lost = Counter("rgd_reports_lost", "Reports missing from peers' sequences", registry=r)
        self.report_namespaces_trimmed = Counter(
            "rgd_report_namespaces_trimmed", "Namespace names left out of reports to keep them under the caps",
            registry=r,
        )
        self.publish_errors = Counter("rgd_report_publish_errors", "Reports that failed to publish", registry=r)
        self.evictions = Counter("rgd_evictions", "Daemons evicted from the usage map, by reason", ["reason"],
                                 registry=r)
        self.calc_seconds = Histogram(
            "rgd_quota_calculation_seconds", "Time to recompute all local limits",
            buckets=(1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0), registry=r,
        )
        self.tick_seconds = Histogram(
            "rgd_tick_seconds", "Time one tick took (collect, report, read, compute)",
            buckets=(1e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0), registry=r,
        )
        self.broker_connected = Gauge(
            "rgd_broker_connected", "1 when the Pulsar session is up and our own reports come back", registry=r
        )
        self.broker_unresponsive = Counter(
            "rgd_broker_unresponsive", "Times the broker stopped carrying our reports while its connection stayed up",
            registry=r,
        )
        # Between ticks the daemon folds what arrived, publishes early reports and recomputes what
        # changed: event-loop time that rgd_tick_seconds does not see, so both are needed to tell
        # how much of each second the cluster logic keeps brokers' asks waiting.
        self.react_seconds = Histogram(
            "rgd_react_seconds", "Time one react between ticks took (fold, early report, recompute)",
            buckets=(1e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0), registry=r,
        )
        self.broker_reconnects = Counter("rgd_broker_reconnects", "Pulsar sessions (re)opened", registry=r)
        # The safety argument's premises (docs/design/protocol.md): while the lease holds, our
        # limits are a share the cluster agreed to; without it we admit nothing.
        self.lease_valid = Gauge(
            "rgd_lease_valid", "1 while every member acknowledges us recently enough (we admit; P4)", registry=r)
        self.lease_seconds_left = Gauge(
            "rgd_lease_seconds_left", "Seconds until our lease ends unless a member acknowledges us again", registry=r)
        self.leases_expired = Counter(
            "rgd_leases_expired", "Times our lease ended (we stopped admitting until members heard us again)",
            registry=r)
        self.members_unacknowledging = Gauge(
            "rgd_members_unacknowledging",
            "Members whose last acknowledgement of us is older than the lease allows (P4)", registry=r)
        self.members_out_of_sync = Gauge(
            "rgd_members_out_of_sync",
            "Members whose whole state we do not hold yet: counted as busy in every group (P3)", registry=r)
        self.round_trip = Gauge(
            "rgd_round_trip_seconds",
            "Longest recent round trip (our report out, a peer's acknowledgement back; at least twice our "
            "report's echo delay plus two react intervals): how soon an increase of our demand is ours", registry=r)
        self.config_reloads = Counter("rgd_config_reloads", "Config file reloads, by result", ["result"], registry=r)
        self.config_changes = Counter("rgd_config_changes_applied", "Admin config changes applied", registry=r)
        self.config_rejected = Counter("rgd_config_changes_rejected", "Config topic messages rejected", registry=r)

    def render(self) -> bytes:
        return b"".join(self.chunks())

    def chunks(self) -> Iterator[bytes]:
        return exposition_chunks(self.registry)


__all__ = ["MAX_PEER_SERIES", "REMOTE", "SAMPLES_PER_PART", "LimiterCollector", "Metrics", "exposition_chunks",
           "http_connection_families", "in_parts"]
