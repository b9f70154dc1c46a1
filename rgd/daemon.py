"""Daemon wiring: HTTP server, Pulsar session supervisor, tick loop, config watcher.

Each concern is a small asyncio task; `stop()` publishes the `leaving` report,
cancels the tasks in reverse order and releases the broker it started.

One tick (DESIGN §1), on one clock:
  collect   limiter counters since the last tick
  report    suppressed per PIP-82, signed, published, logged
  read      drain reports received since the last tick into the usage map
  compute   the quota calculator for every limited group -> limiter.set_limit
"""

from __future__ import annotations

import asyncio
import logging

import os
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from rgd.api.app import build_app
from rgd.config_file import ConfigDocument, ConfigError, load_config
from rgd.config_store import ConfigChange, ConfigStore
from rgd.embedded_broker import EmbeddedBroker, start_or_join
from rgd.groups import KINDS, ResourceGroup
from rgd.limiter import Limiter, rate_of
from rgd.metrics import Metrics
from rgd.quota.calculator import compute_limits
from rgd.quota.model import INF, GroupLimits, PeerUsage
from rgd.report_builder import figures, group_entries, local_rates, peer_usage
from rgd.report_codec import HmacKeys, Rejected, decode_report
from rgd.settings import Settings
from rgd.suppression import SuppressionPolicy, SuppressionState, select_reports
from rgd.transport import PulsarSession, Received
from rgd.usage_map import EVICT_LEAVING, EVICT_TTL, UsageMap
from rgd.wire.usage_report_pb2 import UsageReport

log = logging.getLogger("rgd.daemon")

MAX_INBOX = 10_000  # reports waiting for the next tick; beyond this the oldest are dropped


class Daemon:
    def __init__(self, settings: Settings, config_doc: ConfigDocument | None = None) -> None:
        self.settings = settings
        self.clock = time.monotonic
        self.incarnation = int(time.time() * 1000)
        self.sequence = 0
        self.metrics = Metrics()
        self.config = ConfigStore()
        self.config_doc = config_doc
        if config_doc is not None:
            self.config.set_base(config_doc.registry)
        self.usage_map = UsageMap()
        self.limiter = Limiter(
            self.clock, settings.burst, settings.max_debt, initial_limits=self._initial_limits
        )
        self.suppression = SuppressionPolicy(settings.report_tolerance, settings.report_every)
        self.suppression_state = SuppressionState()
        self.hmac_keys = HmacKeys.load(settings.report_hmac_keys_file) if settings.report_hmac_keys_file else None
        self.admin_tokens = _load_tokens(settings.admin_tokens_file)
        self.last_local_rates: dict[tuple[str, str], tuple[float, float]] = {}
        # Our own usage-map entry per group as of the previous tick: what every peer has
        # folded by now (the calculator grants increases only once peers have seen them).
        self.previous_self: dict[str, PeerUsage | None] = {}
        self.inbox: asyncio.Queue[Received] = asyncio.Queue(MAX_INBOX)
        self.session: PulsarSession | None = None
        self.pending_changes: list[ConfigChange] = []
        self.broker: EmbeddedBroker | None = None
        self.pulsar_url = settings.pulsar_url
        self.usage_log: Any = None
        self.ticks = 0
        self.last_connected = self.clock()
        self.members_at_disconnect = 1  # daemons known alive when the broker went away
        self.disconnected = False
        self.started = False
        self._tasks: list[asyncio.Task] = []
        self._runner: web.AppRunner | None = None
        self._config_generation_applied = -1
        self.bound_port: int | None = None
        self.stopping = asyncio.Event()
        self.metrics.attach(self)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        if not self.pulsar_url:
            host = s.host_port[0]
            if host not in ("127.0.0.1", "localhost", "::1"):
                log.warning("listening on %s with the embedded broker: this daemon hears no peer on "
                            "another machine, so a multi-node cluster would admit N x the quota; "
                            "set --pulsar-url to the shared Pulsar cluster", host)
            self.broker = await asyncio.to_thread(start_or_join, s.data_dir)
            self.pulsar_url = self.broker.url
        self._open_usage_log()
        app = build_app(self)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        host, port = s.host_port
        site = web.TCPSite(self._runner, host, port, reuse_address=True, backlog=1024)
        await site.start()
        self.bound_port = self._runner.addresses[0][1] if self._runner.addresses else port
        self._tasks = [
            asyncio.create_task(self._supervise_pulsar(), name="pulsar"),
            asyncio.create_task(self._tick_loop(), name="tick"),
        ]
        if self.config_doc is not None:
            self._tasks.append(asyncio.create_task(self._watch_config_file(), name="config-watch"))
        self.started = True
        log.info("rgd %s listening on %s:%s, broker %s", s.id, host, self.bound_port, self.pulsar_url)

    async def stop(self) -> None:
        """Graceful: tell peers we leave, then release everything we hold."""
        if not self.started:
            return
        self.started = False
        if self.session is not None and self.session.connected:
            try:
                data = await asyncio.wait_for(self._publish(self._leaving_report()), 2.0)
                if self.usage_log is not None:
                    self.usage_log.append_published(data)
            except Exception as exc:
                log.warning("could not publish the leaving report: %s", exc)
        for task in reversed(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.session is not None:
            await self.session.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self.usage_log is not None:
            self.usage_log.close()
        if self.broker is not None:
            await asyncio.to_thread(self.broker.stop)

    def _leaving_report(self) -> UsageReport:
        """Graceful shutdown: peers evict us at once instead of after the TTL."""
        self.sequence += 1
        return UsageReport(
            daemon_id=self.settings.id, sequence=self.sequence, publish_time_ms=int(time.time() * 1000),
            tick_ms=int(round(self.settings.tick * 1000)), incarnation=self.incarnation, leaving=True,
        )

    def _open_usage_log(self) -> None:
        try:
            from rgd.usage_log import UsageLog
        except ImportError:
            return
        s = self.settings
        self.usage_log = UsageLog(
            s.log_dir, s.id, segment_max_bytes=s.log_segment_bytes, segment_max_age_s=s.log_segment_age,
            archive_uri=s.archive_uri or None, retention_s=s.log_retention,
            keep_receipt_payloads=s.log_receipt_payloads,
        )

    def log_lag(self) -> list[tuple[str, str, float]] | None:
        if self.usage_log is None:
            return None
        lag = self.usage_log.lag()
        return [
            ("rgd_log_unarchived_records", "Records in closed segments not yet archived", lag.unarchived_records),
            ("rgd_log_undeleted_records", "Records past retention not yet deleted", lag.undeleted_records),
            ("rgd_log_oldest_unarchived_age_seconds", "Age of the oldest closed segment not yet archived",
             lag.oldest_unarchived_age_s),
        ]

    # -- readiness -------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        connected = self.session is not None and self.session.connected
        detail = {
            "broker_connected": connected,
            "broker_url": self.pulsar_url,
            "ticks": self.ticks,
            "members": sorted(set(self.usage_map.members) | {self.settings.id}),
            "safe_share": self.safe_share_active,
            "config_file": self.config_doc.path if self.config_doc else None,
        }
        # Ready once one full tick has run with the broker up: by then we have heard
        # our peers, so our limits are a share, not a guess.
        return connected and self.ticks >= 1, detail

    @property
    def safe_share_active(self) -> bool:
        return self.disconnected and self.clock() - self.last_connected > self.settings.outage_grace

    # -- pulsar ----------------------------------------------------------------------------

    async def _supervise_pulsar(self) -> None:
        backoff = 0.2
        while True:
            session = PulsarSession(self.pulsar_url, self.settings, f"rgd-{self.settings.id}-{self.incarnation}")
            try:
                await session.open()
            except asyncio.CancelledError:
                await session.close()
                raise
            except Exception as exc:
                log.warning("pulsar session to %s failed to open: %s (retry in %.1fs)", self.pulsar_url, exc, backoff)
                await session.close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = 0.2
            self.session = session
            self.metrics.broker_reconnects.inc()
            self.metrics.broker_connected.set(1)
            self.last_connected = self.clock()
            await self._flush_changes()
            receive = asyncio.create_task(self._receive_loop(session))
            config = asyncio.create_task(self._config_loop(session))
            try:
                await asyncio.gather(receive, config)
            except asyncio.CancelledError:
                receive.cancel()
                config.cancel()
                raise
            except Exception as exc:  # the client gave up on this session: open a new one
                log.warning("pulsar session failed: %s; reopening", exc)
                receive.cancel()
                config.cancel()
                self.session = None
                self.metrics.broker_connected.set(0)
                await session.close()

    async def _receive_loop(self, session: PulsarSession) -> None:
        while True:
            msg = await session.receive_report()
            if self.inbox.full():
                self.inbox.get_nowait()
                self.metrics.reports_rejected.labels("inbox_full").inc()
            self.inbox.put_nowait(msg)

    async def _config_loop(self, session: PulsarSession) -> None:
        while True:
            data = await session.read_config()
            try:
                change = ConfigChange.decode(data)
            except ValueError as exc:
                self.metrics.config_rejected.inc()
                log.warning("config topic: rejected a change: %s", exc)
                continue
            if self.config.apply(change):
                self.metrics.config_changes.inc()
                self._apply_config()

    async def submit_change(self, change: ConfigChange) -> bool:
        """An admin write: apply here at once, then publish so every daemon applies it.

        Returns False when Pulsar is unreachable: the change is queued and published
        when the session (re)opens; versions make the late publish safe."""
        if self.config.apply(change):
            self.metrics.config_changes.inc()
            self._apply_config()
        self.pending_changes.append(change)
        return await self._flush_changes()

    async def _flush_changes(self) -> bool:
        while self.pending_changes:
            session = self.session
            if session is None or not session.connected:
                return False
            change = self.pending_changes[0]
            try:
                await asyncio.wait_for(session.publish_config(change.encode(), change.key), 5.0)
            except Exception as exc:
                log.warning("config change %s not published yet: %s", change.key, exc)
                return False
            self.pending_changes.pop(0)
        return True

    async def _publish(self, report: UsageReport) -> bytes:
        data = report.SerializeToString()
        props = self.hmac_keys.sign(data) if self.hmac_keys else None
        assert self.session is not None
        await self.session.publish_report(data, props)
        return data

    # -- config ----------------------------------------------------------------------------

    async def _watch_config_file(self) -> None:
        """Poll the file (mtime + size + digest). Polling, not inotify: Kubernetes
        ConfigMaps swap a symlink, which inotify watchers on the file miss."""
        assert self.config_doc is not None
        path = Path(self.config_doc.path)
        last_stat: tuple[float, int] | None = None
        while True:
            await asyncio.sleep(min(1.0, self.settings.tick))
            try:
                st = path.stat()
                key = (st.st_mtime, st.st_size)
            except OSError:
                key = None
            if key == last_stat:
                continue
            last_stat = key
            try:
                doc = load_config(path)
            except ConfigError as exc:
                self.metrics.config_reloads.labels("error").inc()
                log.error("config reload failed, keeping the last good config: %s", exc)
                continue
            if doc.digest == self.config_doc.digest:
                continue
            self.config_doc = doc
            self.config.set_base(doc.registry)
            self.metrics.config_reloads.labels("ok").inc()
            log.info("config reloaded from %s", path)
            self._apply_config()

    def _apply_config(self) -> None:
        """After any config change: drop deleted groups, recompute limits now."""
        groups = self.config.effective.groups
        for name in {g for g, _ in self.limiter.states} - set(groups):
            self.limiter.forget(name)
        self.recompute()

    # -- tick ------------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        tick = self.settings.tick
        next_at = self.clock() + tick
        while True:
            await asyncio.sleep(max(0.0, next_at - self.clock()))
            next_at += tick
            if next_at < self.clock():  # we fell behind (a paused process): skip, don't burst
                next_at = self.clock() + tick
            started = time.perf_counter()
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("tick failed")
            self.metrics.tick_seconds.observe(time.perf_counter() - started)

    async def tick(self) -> None:
        s = self.settings
        now = self.clock()
        tick_s = s.tick
        self.previous_self = {
            g: (e[s.id].usage if s.id in e else None) for g, e in self.usage_map.groups.items()
        }
        # collect
        collected = self.limiter.collect()
        entries = group_entries(collected, self.limiter.states, self.config.effective.groups)
        for name, gu in entries.items():
            for kind in KINDS:
                self.last_local_rates[(name, kind)] = local_rates(gu, kind, tick_s)
        # report
        send, suppressed = select_reports(
            self.suppression, self.suppression_state, {n: figures(gu) for n, gu in entries.items()}
        )
        self.metrics.groups_suppressed.inc(len(suppressed))
        self.sequence += 1
        report = UsageReport(
            daemon_id=s.id, sequence=self.sequence, publish_time_ms=int(time.time() * 1000),
            tick_ms=int(round(tick_s * 1000)), incarnation=self.incarnation,
        )
        for name in sorted(send):
            report.groups.append(entries[name])
            # Our own entry is what peers will see, so every daemon computes from the same map.
            self.usage_map.set_local(s.id, name, peer_usage(entries[name], tick_s), now)
        self.usage_map.touch_self(s.id, self.incarnation, self.sequence, now, report.publish_time_ms)
        connected = self.session is not None and self.session.connected
        self._track_connection(connected, now)
        if connected:
            try:
                data = await asyncio.wait_for(self._publish(report), tick_s)
                self.metrics.reports_published.inc()
                if self.usage_log is not None:
                    self.usage_log.append_published(data)
            except Exception as exc:
                self.metrics.publish_errors.inc()
                log.warning("report %d not published: %s", self.sequence, exc)
        self.metrics.broker_connected.set(1 if connected else 0)
        # read
        self._drain_inbox(now)
        if connected:
            # While we cannot hear the topic, silence is ours, not our peers': keep them.
            ttl = s.ttl_ticks * tick_s
            for _ in self.usage_map.evict_silent(now, ttl, keep=s.id):
                self.metrics.evictions.labels(EVICT_TTL).inc()
            self.usage_map.expire_groups(now, (s.report_every + s.ttl_ticks + 1) * tick_s)
        # compute
        self.recompute()
        self.ticks += 1
        if self.usage_log is not None:
            self.usage_log.maintain()

    def _track_connection(self, connected: bool, now: float) -> None:
        if connected:
            if self.disconnected:
                # Back: give every peer a fresh TTL from now, they were silent because we were.
                self.usage_map.refresh_all(now)
                log.info("broker reachable again; reconverging")
            self.disconnected = False
            self.last_connected = now
        elif not self.disconnected:
            self.disconnected = True
            self.members_at_disconnect = len(self.members())
            log.warning("broker unreachable; keeping the last shares for %.0fs, then quota/%d",
                        self.settings.outage_grace, self.members_at_disconnect)

    def _drain_inbox(self, now: float) -> None:
        s = self.settings
        now_ms = int(time.time() * 1000)
        while not self.inbox.empty():
            msg = self.inbox.get_nowait()
            try:
                report = decode_report(msg.data, now_ms, s.id, self.incarnation, msg.properties, self.hmac_keys)
            except Rejected as exc:
                self.metrics.reports_rejected.labels(exc.reason).inc()
                log.debug("rejected report: %s", exc)
                continue
            if report.daemon_id == s.id:
                continue  # our own report, echoed by the topic
            result = self.usage_map.fold(report, now)
            if not result.accepted:
                self.metrics.reports_rejected.labels(result.reason).inc()
                continue
            self.metrics.reports_received.inc()
            if result.lost:
                self.metrics.reports_lost.inc(result.lost)
            if report.leaving:
                self.metrics.evictions.labels(EVICT_LEAVING).inc()
            if self.usage_log is not None:
                self.usage_log.append_receipt(report, msg.data, time.time())

    def members(self) -> set[str]:
        return set(self.usage_map.members) | {self.settings.id}

    def _initial_limits(self, group: ResourceGroup, kind: str) -> tuple[float, float]:
        return self._limits_for(group)[kind]

    def _limits_for(self, group: ResourceGroup) -> GroupLimits:
        members = self.members()
        if self.safe_share_active:
            # Outage past the grace: we cannot see our peers, so our last shares may no
            # longer add up. Quota / daemons last known alive: never the full quota.
            n = max(1, self.members_at_disconnect)
            return {k: (rate_of(m) / n, rate_of(b) / n) for k, (m, b) in ((k, group.rates(k)) for k in KINDS)}
        usage = self.usage_map.group_usage(group.name)
        me = self.settings.id
        if len(members) == 1 and self.ticks >= 1:
            # We listened a full tick and nobody reported: no peer can overshoot with us,
            # so our newest demand counts at once.
            previous = usage.get(me)
        else:
            previous = self.previous_self.get(group.name)
        return compute_limits(group, usage, me, members, self.settings.strategy, previous=previous)

    def recompute(self) -> None:
        started = time.perf_counter()
        groups = self.config.effective.groups
        self.metrics.safe_share.set(1 if self.safe_share_active else 0)
        for (name, kind), st in list(self.limiter.states.items()):
            group = groups.get(name)
            if group is None:
                continue
            limits = self._limits_for(group)
            msgs, nbytes = limits[kind]
            self.limiter.set_limit(group, kind, msgs, nbytes)
        self.metrics.calc_seconds.observe(time.perf_counter() - started)

    # -- admin stats -----------------------------------------------------------------------

    def group_stats(self, group: ResourceGroup) -> dict[str, Any]:
        now = self.clock()
        daemons: dict[str, Any] = {}
        for daemon_id, entry in self.usage_map.groups.get(group.name, {}).items():
            doc: dict[str, Any] = {"report_age_seconds": round(now - entry.updated, 3), "reports": entry.usage.reports}
            for kind in KINDS:
                k = entry.usage.kind(kind)
                doc[kind] = {
                    "admitted_messages_per_second": k.admitted_messages,
                    "admitted_bytes_per_second": k.admitted_bytes,
                    "demand_messages_per_second": k.demand_messages,
                    "demand_bytes_per_second": k.demand_bytes,
                    "limit_messages_per_second": None if k.limit_messages == INF else k.limit_messages,
                    "limit_bytes_per_second": None if k.limit_bytes == INF else k.limit_bytes,
                }
            daemons[daemon_id] = doc
        return {"group": group.name, "quota": group.to_admin(), "daemons": daemons,
                "members": sorted(self.members())}


def _load_tokens(path: str) -> frozenset[str]:
    tokens: set[str] = set()
    if path:
        for line in Path(path).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                tokens.add(line.strip())
    env = os.environ.get("RGD_ADMIN_TOKEN", "")
    if env:
        tokens.add(env)
    return frozenset(tokens)


