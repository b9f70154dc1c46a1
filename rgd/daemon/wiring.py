"""Daemon wiring: HTTP server, Pulsar session supervisor, tick loop, config watcher.

The cluster logic (collect -> report -> read -> compute) is `ClusterNode`'s,
without I/O, shared with the simulator; this module is its edges: publishing
and signing reports, vetting received ones into an inbox folded between ticks, the
usage log, metrics, config from the file and the config topic. Reports are
folded as they arrive (every react interval, a twentieth of a tick), not only on the tick. Each concern is
a small asyncio task; `stop()` publishes the `leaving` report, cancels the
tasks in reverse order and releases the broker it started.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rgd.api.app import build_app
from rgd.api.connection_guard import ConnectionGuard
from rgd.api.fairness_gauges import Fairness, map_fairness
from rgd.api.metrics import LimiterCollector, Metrics
from rgd.api.pulsar_metrics import PulsarMetrics
from rgd.api.sites import HttpListeners
from rgd.cluster.clock import WallClock
from rgd.cluster.node import REJECT_OWN, ClusterNode, NodeConfig, start_seconds_for
from rgd.cluster.report_codec import REJECT_MALFORMED, HmacKeys, Rejected, Unfolded, serialize_report
from rgd.cluster.suppression import SuppressionPolicy
from rgd.cluster.usage_map import EVICT_LEAVING, EVICT_TTL, UsageMap
from rgd.config.file import ConfigDocument, ConfigError
from rgd.config.groups import KINDS, ResourceGroup, budget_name, replicator_key
from rgd.config.reload import ConfigReloader
from rgd.config.settings import Settings
from rgd.config.store import ConfigChange, ConfigStore
from rgd.daemon.gc_pacing import GcPacer
from rgd.daemon.wake import sleep_until_woken
from rgd.limiting.limiter import Collected, Limiter
from rgd.quota.inputs import QuotaParams
from rgd.quota.model import INF
from rgd.transport.broker_liveness import BrokerLiveness, echo_deadline
from rgd.transport.embedded_broker import EmbeddedBroker, start_or_join
from rgd.transport.session import PulsarSession
from rgd.usage_log import UsageLog
from rgd.usage_log.accounting import Cumulative, TickAccounting
from rgd.usage_log.guard import LogGuard
from rgd.wire.usage_report_pb2 import UsageReport

log = logging.getLogger("rgd.daemon")

MAX_INBOX = 10_000  # reports waiting to be folded; beyond this the oldest are dropped
# ... and beyond this many bytes (of the entries we fold, as vetted on arrival): a daemon
# that falls behind would otherwise hold reports it will fold too late anyway.
MAX_INBOX_BYTES = 64 * 1024 * 1024
ACCOUNT_INLINE_KEYS = 500  # (group, kind)s a collect may hold for its accounting record to be built on the loop
REACTS_PER_TICK = 20  # between ticks: fold, early reports, recompute what changed, this often
STOP_TASKS_SECONDS = 5.0  # a graceful stop waits this long for its cancelled tasks to finish
DRAIN_SLICE = 0.004  # vetting and folding reports yield to the loop this often (seconds)


class _LoopSlice:
    """Long work on the event loop, let go every DRAIN_SLICE: `pause_if_due` yields to the
    loop (asks waiting) once that long has passed since the last pause."""

    def __init__(self) -> None:
        self.end = time.perf_counter() + DRAIN_SLICE

    async def pause_if_due(self) -> bool:
        """Whether it paused (whatever was checked before may have changed)."""
        if time.perf_counter() <= self.end:
            return False
        await asyncio.sleep(0)
        self.end = time.perf_counter() + DRAIN_SLICE
        return True


@dataclass(frozen=True)
class Inbound:
    """A report vetted as it arrived (ClusterNode.vet: the entries we fold parsed, the rest
    held unparsed), waiting in the inbox to be folded."""

    report: UsageReport
    raw: bytes  # the message as received, kept only when the usage log keeps receipts' payloads
    size: int  # what it holds, in bytes (MAX_INBOX_BYTES counts this)
    received_at: float  # wall clock, for the usage log's receipt
    unfolded: Unfolded | None = None  # the entries vetting left unparsed (ClusterNode.vet)


class Daemon:
    def __init__(self, settings: Settings, config_doc: ConfigDocument | None = None,
                 limiter_class: type[Limiter] = Limiter) -> None:
        self.settings = settings
        self.wall_clock = WallClock()
        self.clock = self.wall_clock.now
        # Set by the process's owner (`rgd run`): paces full garbage collections after each
        # tick (rgd.daemon.gc_pacing). None: the embedding process's collector is left alone.
        self.gc_pacer: GcPacer | None = None
        # Set by rgd.daemon.cluster_process: HTTP reaches us only through the serving process, on a
        # private socket, which names each request's client in a header (rgd.api.admin).
        self.behind_serving_process = False
        self.incarnation = int(time.time() * 1000)
        self.metrics = Metrics()
        self.config = ConfigStore(local_cluster=settings.cluster_name)
        self.config_doc = config_doc
        if config_doc is not None:
            self.config.set_base(config_doc.registry)
        self.node = ClusterNode(
            node_config_for(settings), self.incarnation, self.wall_clock,
            lambda: self.config.effective.budget_map(),  # groups and per-remote-cluster replication budgets
            HmacKeys.load(settings.report_hmac_keys_file) if settings.report_hmac_keys_file else None,
            limiter_class=limiter_class,
        )
        self._hello_sent = False  # our first report goes out as soon as the broker carries it
        self.limiter: Limiter = self.node.limiter  # the node's, for good: a plain attribute for the hot path
        self.limiter.shadow_all = settings.shadow
        # The live fairness gauges (rgd.api.fairness_gauges) and the tick they were computed at.
        self._fairness: tuple[int, dict[tuple[str, str, str], Fairness]] = (-1, {})
        # Every collect of the limiter (the tick's, in the node) is logged as this tick's accounting,
        # whatever the tick then publishes: the log's account of what brokers were told.
        self.accounting = TickAccounting(settings.id, self.incarnation, self.incarnation)
        self.limiter.on_collect = self._account
        # Large records are built off the loop, one at a time and in order (see _account).
        self._accounting_pool = ThreadPoolExecutor(1, thread_name_prefix="rgd-accounting")
        self._accounting_pending: list[asyncio.Future[tuple[bytes, Cumulative]]] = []
        self.admin_tokens = _load_tokens(settings.admin_tokens_file)
        self.last_local_rates: dict[tuple[str, str], tuple[float, float]] = {}
        self.inbox: asyncio.Queue[Inbound] = asyncio.Queue(MAX_INBOX)
        self.inbox_bytes = 0
        self.session: PulsarSession | None = None
        # Whether the broker carries messages, not just whether its socket is open.
        self.liveness = BrokerLiveness(echo_deadline(settings.tick), self.clock())
        self._unresponsive: str | None = None  # why the broker counted as not answering at the last check
        self.pending_changes: list[ConfigChange] = []
        self._flushing = asyncio.Lock()  # one flush at a time: each publishes the head, then pops it
        # Reports reach the producer in the order they were numbered (the tick's and react's
        # tasks both publish, a split report part by part): a peer counts a skipped number as
        # lost and drops the late one as a duplicate.
        self._publishing = asyncio.Lock()
        self.broker: EmbeddedBroker | None = None
        self.pulsar_url = settings.pulsar_url
        self.usage_log: UsageLog | None = None
        self.listeners = HttpListeners()
        self._lease_was_valid = False
        self._ack_asked = asyncio.Event()  # a report that asks for our acknowledgement is waiting
        self.log_guard: LogGuard | None = None  # every log call goes through it: a full disk never stops a tick
        self.started = False
        self._tasks: list[asyncio.Task[None]] = []
        # The scrape-time view of our state, read through the API layer's ObservedState.
        self.metrics.registry.register(LimiterCollector(self))
        self.pulsar_metrics = PulsarMetrics(self, self.metrics.registry) if settings.pulsar_metrics else None

    @property
    def connection_guard(self) -> ConnectionGuard | None:
        return self.listeners.guard

    @property
    def bound_port(self) -> int | None:
        """The first TCP address's port; None with unix sockets only (or before start)."""
        return self.listeners.bound_port

    @property
    def usage_map(self) -> UsageMap:
        return self.node.usage_map

    @property
    def ticks(self) -> int:
        return self.node.ticks

    @property
    def fairness(self) -> dict[tuple[str, str, str], Fairness]:
        """The live fairness gauges: computed from the usage map at most once a tick, when a
        scrape reads them (in the scrape's worker thread: at 5 000 groups on 5 daemons one
        computation is ~200 ms of Python, which every tick on the loop would cost the asks)."""
        at, figures = self._fairness
        if at != self.node.ticks:
            at = self.node.ticks
            figures = map_fairness(self.usage_map, self.config.effective.budget_map())
            self._fairness = (at, figures)
        return figures

    @property
    def session_open(self) -> bool:
        """The Pulsar client says its connections are up (a frozen broker's stay up too)."""
        return self.session is not None and self.session.connected

    @property
    def connected(self) -> bool:
        """The broker carries our messages: the session is open and our reports come back."""
        return self.session_open and self.liveness.unresponsive(self.clock()) is None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the HTTP port first (a taken port fails before anything else starts), then
        the embedded broker if any. A failed start releases whatever it had started."""
        try:
            await self._start()
        except BaseException:
            await self._release()
            raise

    async def _start(self) -> None:
        s = self.settings
        self._open_usage_log()
        await self.listeners.open(build_app(self, forwarded=self.behind_serving_process), s,
                                  embedded_broker=not self.pulsar_url)
        if not self.pulsar_url:
            self.broker = await asyncio.to_thread(start_or_join, s.data_dir)
            self.pulsar_url = self.broker.url
        self._tasks = [
            asyncio.create_task(self._supervise_pulsar(), name="pulsar"),
            asyncio.create_task(self._tick_loop(), name="tick"),
            asyncio.create_task(self._react_loop(), name="react"),
        ]
        if self.config_doc is not None:
            self._tasks.append(asyncio.create_task(self._watch_config_file(), name="config-watch"))
        self.started = True
        log.info("rgd %s listening on %s (TCP port %s), broker %s", s.id, s.listen, self.bound_port, self.pulsar_url)

    async def stop(self) -> None:
        """Graceful: tell peers we leave, then release everything we hold."""
        if not self.started:
            return
        self.started = False
        # Whenever the session is open, even if our last report has not come back yet: a
        # peer that misses the leaving report waits out the TTL with our share idle, while
        # a broker that is really frozen costs at most the 2 s bound below.
        if self.session_open:
            try:
                data = await asyncio.wait_for(self._publish(self.node.leaving_report(self.clock())), 2.0)
                if self.log_guard is not None:
                    self.log_guard.append_published(data)
            except Exception as exc:
                log.warning("could not publish the leaving report: %s", exc)
        for task in reversed(self._tasks):
            task.cancel()
        _, stuck = await asyncio.wait(self._tasks, timeout=STOP_TASKS_SECONDS) if self._tasks else (set(), set())
        for task in stuck:  # a task that ignores its cancellation must not keep the process alive
            log.error("task %s did not stop within %.0f s of its cancellation; left behind at %s",
                      task.get_name(), STOP_TASKS_SECONDS, task.get_stack(limit=3))
        await self._release()

    async def _release(self) -> None:
        """Close what start() opened, whichever part of it ran; safe to call twice."""
        session, self.session = self.session, None
        if session is not None:
            await session.close()
        await self.listeners.close()
        await self._account_final()
        usage_log, self.usage_log = self.usage_log, None
        self.log_guard = None
        if usage_log is not None:
            try:
                usage_log.close()
            except OSError as exc:  # a full disk: the open segment is recovered at the next start
                log.error("usage log not closed cleanly: %s", exc)
        broker, self.broker = self.broker, None
        if broker is not None:
            await asyncio.to_thread(broker.stop)

    def _open_usage_log(self) -> None:
        s = self.settings
        self.usage_log = UsageLog(
            s.log_dir, s.id, segment_max_bytes=s.log_segment_bytes, segment_max_age_s=s.log_segment_age,
            archive_uri=s.archive_uri or None, retention_s=s.log_retention,
            keep_receipt_payloads=s.log_receipt_payloads, accounting=True,
        )
        self.log_guard = LogGuard(self.usage_log)

    def _account(self, collected: dict[tuple[str, str], Collected]) -> None:
        """Log what a collect of the limiter took (rgd.usage_log.accounting), at once while it is
        small. At PIP-82's scale the record (an entry per group, 5 000 of them) takes ~150 ms
        to build, which the loop answering brokers must not wait for: it is built in a worker
        thread from the collect (a fresh dict nobody else touches) and the limits in force,
        and appended on the loop when done, in order. A crash meanwhile loses that frame: the
        log then ends at the previous one, and the report's account of the crash says so."""
        guard = self.log_guard
        if guard is None:
            return  # not started, or stopped: nothing was asked (the listeners open after the log)
        now_ms = int(time.time() * 1000)
        groups = self.config.effective.groups
        if len(collected) <= ACCOUNT_INLINE_KEYS and not self._accounting_pending:
            guard.append_accounting(*self.accounting.record(collected, self.limiter.states, groups, now_ms))
            return
        built = asyncio.get_running_loop().run_in_executor(
            self._accounting_pool, self.accounting.record, collected, self.limiter.states, groups, now_ms)
        self._accounting_pending.append(built)
        built.add_done_callback(self._accounted)

    def _accounted(self, built: asyncio.Future[tuple[bytes, Cumulative]]) -> None:
        self._accounting_pending.remove(built)
        if built.cancelled() or self.log_guard is None:
            return
        try:
            record, cumulative = built.result()
        except Exception:  # a bug, not an I/O fault (the guard takes those): the gap shows in the report
            log.exception("tick accounting record not built")
            return
        self.log_guard.append_accounting(record, cumulative)

    async def _account_final(self) -> None:
        """The last accounting, once no ask can be answered any more (the listeners are closed):
        what was admitted since the last tick, marked final (a clean stop), after the records
        still being built."""
        self.limiter.on_collect = None
        if self._accounting_pending:
            await asyncio.gather(*self._accounting_pending, return_exceptions=True)
        self._accounting_pool.shutdown(wait=False)
        if self.log_guard is not None:
            record, cumulative = self.accounting.record(self.limiter.collect(), self.limiter.states,
                                                        self.config.effective.groups, int(time.time() * 1000))
            self.log_guard.append_accounting(record, cumulative, final=True)

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

    def refresh_liveness(self) -> bool:
        """Check the broker now, between ticks: /readyz and /metrics then agree with each
        other and with the log, whatever the tick phase (a frozen broker sends nothing that
        would wake `react`, so without this the gauge lagged /readyz by up to a tick)."""
        if self.ticks == 0:  # starting: the first tick makes the first check
            return self.connected
        return self._check_broker(self.clock())

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        connected = self.refresh_liveness()
        detail = {
            "broker_connected": connected,
            "broker_url": self.pulsar_url,
            "broker_unresponsive": self._unresponsive if self.ticks else None,
            "ticks": self.ticks,
            "members": sorted(self.node.members()),
            "lease": self.lease_detail(),
            "config_file": self.config_doc.path if self.config_doc else None,
            "degraded": self.degraded(),
        }
        # Ready while our lease holds: we have heard the topic for a tick and every member
        # acknowledges us, so our limits are our share. Without it we admit nothing, and say why.
        return connected and self.ticks >= 1 and self.node.lease_valid(self.clock()), detail

    def lease_detail(self) -> dict[str, Any]:
        """Our lease (docs/design/protocol.md, P4), for /readyz and the logs."""
        now = self.clock()
        node = self.node
        left = node.lease_end() - now
        detail: dict[str, Any] = {
            "valid": node.lease_valid(now),
            "settled": node.settled(now),
            "seconds_left": round(left, 3) if left != float("inf") and left > -1e9 else None,
            "unacknowledged_by": node.unacknowledging(now),
        }
        if not detail["valid"]:
            if not detail["settled"]:
                detail["why"] = "listening to the topic before taking a share (a tick and its delivery delay)"
            else:
                who = ", ".join(detail["unacknowledged_by"]) or "the broker"
                detail["why"] = f"no recent acknowledgement from {who}: admitting nothing until they hear us again"
        return detail

    def degraded(self) -> list[str]:
        """What is failing while the daemon still serves (readiness stays as it was)."""
        out = []
        if self.log_guard is not None and self.log_guard.state.failing:
            out.append(f"usage_log: {self.log_guard.state.reason}")
        return out

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
            self.liveness.reset(self.clock())
            self.session = session
            self.metrics.broker_reconnects.inc()
            self.metrics.broker_connected.set(1)
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
        """Vet each message as it arrives and queue it for the next fold: a malformed or
        forged message is counted and dropped here, one at a time between asks, and never
        waits in the inbox."""
        keep_raw = self.usage_log is not None and self.usage_log.keep_receipt_payloads
        # Receives asked for ahead complete without a pause when reports queue up (the first
        # round's 99 full reports), and vetting each takes a millisecond or more: back to
        # back, 16 and more of them held asks up to 100 ms.
        loop_slice = _LoopSlice()
        while True:
            await loop_slice.pause_if_due()
            msg = await session.receive_report()
            try:
                vetted = self.node.vet(msg.data, msg.properties, self.clock())
            except Rejected as exc:
                self.metrics.reports_rejected.labels(exc.reason).inc()
                continue
            except Exception:  # a message our vetting did not foresee: never a reason to reopen the session
                log.exception("a report from the topic could not be vetted; dropped")
                self.metrics.reports_rejected.labels(REJECT_MALFORMED).inc()
                continue
            raw = msg.data if keep_raw else b""
            report = vetted.report
            # Unparsed entries hold the message's bytes until they are parsed or superseded.
            held = len(msg.data) if vetted.unfolded is not None and not keep_raw else 0
            item = Inbound(report, raw, report.ByteSize() + len(raw) + held, time.time(), vetted.unfolded)
            del msg  # the message's bytes go now, not when the next one arrives
            while self.inbox.full() or (self.inbox_bytes + item.size > MAX_INBOX_BYTES and not self.inbox.empty()):
                self.inbox_bytes -= self.inbox.get_nowait().size
                self.metrics.reports_rejected.labels("inbox_full").inc()
            self.inbox.put_nowait(item)
            if report.ack_wanted or (self.node.awaiting_acks() and self.node.tag in report.ack_members):
                self._ack_asked.set()
            self.inbox_bytes += item.size

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

        Returns False when Pulsar is unreachable or does not answer: the change is queued
        and published when the session (re)opens or the broker answers again (the tick
        flushes); versions make the late publish safe."""
        if self.config.apply(change):
            self.metrics.config_changes.inc()
            self._apply_config()
        self.pending_changes.append(change)
        return await self._flush_changes()

    async def _flush_changes(self) -> bool:
        async with self._flushing:
            while self.pending_changes:
                session = self.session
                if session is None or not self.connected:  # a frozen broker too: don't hold the admin call
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
        """One message (a report too large for one was split when it was built)."""
        trimmed, self.node.namespaces_trimmed = self.node.namespaces_trimmed, 0
        if trimmed:
            self.metrics.report_namespaces_trimmed.inc(trimmed)
        data = serialize_report(report)  # indexed: receivers parse only the entries they fold
        props = self.node.keys.sign(data) if self.node.keys else None
        assert self.session is not None
        self.liveness.published(report.sequence, self.clock())
        await self.session.publish_report(data, props)
        return data

    # -- config ----------------------------------------------------------------------------

    async def _watch_config_file(self) -> None:
        """Poll the file's content hash. Polling, not inotify: Kubernetes ConfigMaps swap a
        symlink, which inotify watchers on the file miss. Reading and parsing run off the
        event loop (see config_reload); only the swap runs on it."""
        assert self.config_doc is not None
        reloader = ConfigReloader(self.config_doc.path, self.config_doc.digest)
        try:
            while True:
                await asyncio.sleep(min(1.0, self.settings.tick))
                try:
                    doc = await reloader.poll()
                except ConfigError as exc:
                    self.metrics.config_reloads.labels("error").inc()
                    log.error("config reload failed, keeping the last good config: %s", exc)
                    continue
                if doc is None:
                    continue
                self.config_doc = doc
                self.config.set_base(doc.registry)
                self.metrics.config_reloads.labels("ok").inc()
                log.info("config reloaded from %s", reloader.path)
                self._apply_config()
        finally:
            reloader.close()

    def _apply_config(self) -> None:
        """After any config change: drop deleted groups, recompute limits now."""
        self.node.apply_config()

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
            if self.gc_pacer is not None:  # between requests: the loop runs nothing else now
                self.gc_pacer.after_tick()

    async def _react_loop(self) -> None:
        """A react every react interval, and at once when a report that asks for our
        acknowledgement arrives, or one that answers ours while we wait for answers: a rise waits
        a round trip for every member's answer, so neither leg waits for a react interval."""
        interval = self.node.config.react_seconds
        while True:
            await sleep_until_woken(self._ack_asked, interval)
            self._ack_asked.clear()
            started = time.perf_counter()
            try:
                await self.react()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("react failed")
            self.metrics.react_seconds.observe(time.perf_counter() - started)

    async def react(self) -> None:
        """Between ticks: fold what arrived, recompute what changed, and publish at once a
        report that raises a demand or answers a peer's (the logic is ClusterNode's)."""
        now = self.clock()
        await self._drain_inbox(now)  # first: our own reports that came back count
        if not self._check_broker(now):
            return
        if not self._hello_sent:
            self._hello_sent = True
            await self._publish_logged(self.node.hello_report(now))
        started = time.perf_counter()
        self.node.recompute_changed(now)
        self.metrics.calc_seconds.observe(time.perf_counter() - started)
        parts = self.node.react(now)
        if parts:
            self.metrics.early_reports.inc()
            await self._publish_logged(parts)

    async def tick(self) -> None:
        """collect -> report -> read -> compute (the logic is ClusterNode's; this is the I/O)."""
        now = self.clock()
        connected = self._check_broker(now)
        aggregate_started = time.perf_counter()
        out = self.node.tick_report(now)
        aggregate_s = time.perf_counter() - aggregate_started
        self.last_local_rates = out.local_rates
        self.metrics.groups_suppressed.inc(out.suppressed)
        if connected:
            await self._publish_logged(out.parts)
        elif self.session_open:
            await self._probe(out.parts)
        else:
            self.node.unsent(out.parts)
        if connected and self.pending_changes:  # queued while the broker did not answer
            await self._flush_changes()
        await self._drain_inbox(now)
        for _ in self.node.upkeep(now):
            self.metrics.evictions.labels(EVICT_TTL).inc()
        started = time.perf_counter()
        self.node.recompute_changed(now)
        calc_s = time.perf_counter() - started
        self.metrics.calc_seconds.observe(calc_s)
        if self.pulsar_metrics is not None:
            self.pulsar_metrics.on_tick(out.sent, aggregate_s, calc_s)
        self._export_premises(now)
        if self.log_guard is not None:
            self.log_guard.maintain()

    def _export_premises(self, now: float) -> None:
        """The safety argument's premises as metrics (docs/design/protocol.md): an operator
        sees when the guarantee is off, and why."""
        node = self.node
        valid = node.lease_valid(now)
        if not valid and self._lease_was_valid:
            self.metrics.leases_expired.inc()
            log.warning("lease expired: %s", self.lease_detail().get("why", ""))
        self._lease_was_valid = valid
        self.metrics.lease_valid.set(1 if valid else 0)
        left = node.lease_end() - now
        self.metrics.lease_seconds_left.set(max(0.0, left) if left != float("inf") else node.config.lease_seconds)
        self.metrics.members_unacknowledging.set(len(node.unacknowledging(now)))
        self.metrics.members_out_of_sync.set(sum(1 for m in node.usage_map.members.values() if not m.in_sync))
        self.metrics.round_trip.set(node.round_trip(now))

    def _check_broker(self, now: float) -> bool:
        """Whether the broker carries our messages now; hearing, the metric and one log line
        per change follow. A broker that stopped answering with its connection open is an
        outage like a lost connection: last shares until the lease ends, then nothing admitted."""
        reason = self.liveness.unresponsive(now) if self.session_open else None
        if reason is not None and self._unresponsive is None:
            self.metrics.broker_unresponsive.inc()
            log.warning("broker %s does not answer though connected: %s", self.pulsar_url, reason)
        elif reason is None and self._unresponsive is not None and self.session_open:
            log.info("broker answers again: our reports come back")
        self._unresponsive = reason
        connected = self.session_open and reason is None
        self.metrics.broker_connected.set(1 if connected else 0)
        return connected

    async def _probe(self, parts: list[UsageReport]) -> None:
        """While the broker does not answer: publish the tick's report anyway, without
        waiting. It is how we learn that the broker is back (the report comes back to us),
        and peers may fold it late like any delayed report; waiting for its acknowledgement
        would only hold up the tick, so the wait is one react interval, and failures are
        counted, not logged (the outage was logged once)."""
        async with self._publishing:
            for part in parts:
                try:
                    data = await asyncio.wait_for(self._publish(part), self.node.config.react_seconds)
                except Exception:
                    self.metrics.publish_errors.inc()
                    continue
                self.metrics.reports_published.inc()
                if self.log_guard is not None:
                    self.log_guard.append_published(data)

    async def _publish_logged(self, parts: list[UsageReport]) -> None:
        """Publish a report (in its parts, if it was split to fit the broker) and log it."""
        async with self._publishing:  # taken with no await since the parts were numbered
            for part in parts:
                try:
                    data = await asyncio.wait_for(self._publish(part), self.settings.tick)
                except Exception as exc:
                    self.metrics.publish_errors.inc()
                    log.warning("report %d not published: %s", part.sequence, str(exc) or type(exc).__name__)
                    continue
                self.metrics.reports_published.inc()
                if self.log_guard is not None:
                    self.log_guard.append_published(data)

    async def _drain_inbox(self, now: float) -> None:
        """Fold everything received since the last drain. Folding a
        second's worth of 99 peers' reports at once held the loop for hundreds of
        milliseconds, so it yields to waiting asks every DRAIN_SLICE seconds."""
        loop_slice = _LoopSlice()
        waiting = self.inbox.qsize()  # what arrives meanwhile waits for the next drain
        while waiting > 0 and not self.inbox.empty():
            if await loop_slice.pause_if_due():
                continue  # another drain may have taken what was left meanwhile
            waiting -= 1
            item = self.inbox.get_nowait()
            self.inbox_bytes -= item.size
            folded = self.node.fold(item.report, now, item.unfolded)
            if folded.reason == REJECT_OWN:
                assert folded.report is not None
                self.liveness.echoed(folded.report.sequence, now)
                continue
            if not folded.accepted:
                self.metrics.reports_rejected.labels(folded.reason).inc()
                continue
            self.metrics.reports_received.inc()
            if self.pulsar_metrics is not None:
                assert folded.report is not None
                self.pulsar_metrics.on_report(folded.report)
            if folded.lost:
                self.metrics.reports_lost.inc(folded.lost)
            assert folded.report is not None
            if folded.report.leaving:
                self.metrics.evictions.labels(EVICT_LEAVING).inc()
            if self.log_guard is not None:
                self.log_guard.append_receipt(folded.report, item.raw, item.received_at)

    # -- admin stats -----------------------------------------------------------------------

    def group_stats(self, group: ResourceGroup) -> dict[str, Any]:
        """`limits`: what this daemon enforces now, per kind, from the same source as
        /v1/quota and rgd_local_limit. `daemons`: the usage map, each daemon's entry as last
        reported; a report's limit is the one in force when it was built (before that
        tick's recompute), so it is named `reported_limit_*` and never stands for ours."""
        doc = self._budget_stats(group, KINDS)
        budgets = self.config.effective.budget_map()
        remote_clusters = {}
        prefix = replicator_key(self.settings.cluster_name, "")
        for r in group.replicator_rates:  # the entries that apply here (the others name another local cluster)
            remote = r.key[len(prefix):]
            budget = budgets.get(budget_name(group.name, remote)) if r.key.startswith(prefix) else None
            if budget is not None:
                remote_clusters[remote] = {"key": r.key, **self._budget_stats(budget, ("replication",))}
        out = {"group": group.name, "quota": group.to_admin(), "daemon": self.settings.id, **doc,
               "members": sorted(self.node.members())}
        # Only when they say something, as shadowMode in the group's own body.
        if self.limiter.shadows(group):
            out["shadow_mode"] = True
        if remote_clusters:
            out["remote_clusters"] = remote_clusters
        return out

    def _budget_stats(self, budget: ResourceGroup, kinds: tuple[str, ...]) -> dict[str, Any]:
        """One budget's `limits` (this daemon's, per kind) and `daemons` (the usage map's entries)."""
        now = self.clock()
        limits = {
            kind: {"messages_per_second": _per_second(m), "bytes_per_second": _per_second(b)}
            for kind in kinds
            for m, b in [self.limiter.limit_in_force(budget, kind)]
        }
        daemons: dict[str, Any] = {}
        self.usage_map.fold_group(budget.name)  # peers' entries of a group we do not serve are held unparsed
        for daemon_id, entry in self.usage_map.groups.get(budget.name, {}).items():
            doc: dict[str, Any] = {"report_age_seconds": round(now - entry.updated, 3)}
            for kind in kinds:
                k = entry.usage.kind(kind)
                doc[kind] = {
                    "admitted_messages_per_second": k.admitted_messages,
                    "admitted_bytes_per_second": k.admitted_bytes,
                    "demand_messages_per_second": k.demand_messages,
                    "demand_bytes_per_second": k.demand_bytes,
                    "reported_limit_messages_per_second": _per_second(k.limit_messages),
                    "reported_limit_bytes_per_second": _per_second(k.limit_bytes),
                }
            daemons[daemon_id] = doc
        return {"limits": limits, "daemons": daemons}


def node_config_for(settings: Settings) -> NodeConfig:
    """The cluster node's config from the daemon's settings (a function of its own, so a
    unit test drives a ClusterNode exactly as `rgd run` configures it)."""
    return NodeConfig(
        settings.id, settings.tick, settings.strategy,
        QuotaParams(burst_seconds=settings.burst, counting_window=settings.tick),
        SuppressionPolicy.every(settings.report_tolerance, settings.report_every),
        float(settings.ttl_ticks), settings.burst, settings.max_debt,
        react_seconds=settings.tick / REACTS_PER_TICK, start_seconds=start_seconds_for(settings.strategy),
    )


def _per_second(rate: float) -> float | None:
    return None if rate == INF else rate


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


