"""`rgd run --cluster-process`: brokers are answered here, the cluster work runs in a child.

At PIP-82's scale (5 000 groups a daemon among 100) folding peers' reports, early
reports and recomputing limits take most of a core, and on one event loop every ask
waits behind them (bench/scale_probe.py). Here the brokers' routes (/v1/acquire,
/v1/usage, /v1/quota) are decided by this process's buckets (rgd.daemon.limiter_link.
ServingLimiter) and nothing else runs on its loop but the hand-over: every react
interval the counts of the buckets asked since go to the cluster process
(rgd/daemon/cluster_process.py), and its limits come back as it sets them. Every other
route (admin, /metrics, /readyz, /v1/stats, ...) is forwarded to the cluster
process's private unix socket, so the HTTP API, wire and log formats are those of
a single-process daemon.

The cluster process is started with this interpreter (`sys.executable`), inherits
one end of a socketpair and nothing else, and is stopped with the daemon: its
leaving report goes out first. If it dies, this process stops too (exit status 1),
as a daemon whose cluster half is gone must not go on deciding with stale limits.

`rgd run --cluster-thread` runs the same cluster half in a second thread of this
process instead (`rgd.daemon.cluster_process.run_in_thread`), over a link that hands the
messages' objects over instead of pickling them (rgd.daemon.process_link): one
interpreter, its imports and heap once, where two processes held ~60 MB more at
PIP-82's scale (bench/scale_probe.py). The price is the GIL: an ask waits for the
cluster thread to give it up, so the switch interval is 1 ms instead of 5 (a waiting
thread asks for the GIL after that long) and the cluster thread is niced. Its garbage
collections stop this loop too, so they are counted in rgd_serving_gc_seconds, and
they are paced once (by the cluster half's ticks: the heap is one).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from dataclasses import replace
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily

from rgd.api import broker
from rgd.api.admin import CLIENT_ADDRESS_HEADER
from rgd.api.body import MAX_BODY, read_body
from rgd.api.daemon_view import ASKS
from rgd.api.errors import ApiError, as_json_error, json_response
from rgd.api.metrics import http_connection_families
from rgd.api.sites import HttpListeners
from rgd.config.file import ConfigDocument
from rgd.config.settings import Settings
from rgd.config.store import ConfigStore
from rgd.daemon.gc_pacing import GcPacer
from rgd.daemon.limiter_link import ServingLimiter
from rgd.daemon.process_link import Link, LinkClosed, SocketLink, ThreadLink, thread_link
from rgd.quota.calculator import start_seconds_for

log = logging.getLogger("rgd.serving")

REACTS_PER_TICK = 20  # counts go to the cluster process this often a tick (its react interval)
STOP_SECONDS = 30.0  # the cluster process's graceful stop (leaving report, log close) gets this long
THREAD_SWITCH_SECONDS = 0.001  # sys.setswitchinterval with --cluster-thread (Python's default: 0.005)
OPS_SLICE = 500  # limit operations applied between two looks at the sockets (~1 ms)
COUNTS_SLICE = 500  # buckets' counts handed over between two looks at the sockets (~1 ms)
METRICS_CHUNK = 256 * 1024  # a forwarded scrape is passed on in pieces of at most this
FORWARD_TIMEOUT_S = 60.0  # a forwarded request (a /metrics scrape at 5 000 groups takes seconds)
# Hop-by-hop and framing headers: each side of the forward sets its own.
_NOT_FORWARDED = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade",
                            "proxy-connection", "te", "trailer", CLIENT_ADDRESS_HEADER.lower()})


class _GroupsInForce:
    """What the broker routes read as `daemon.config`: the cluster process's groups in force
    (`effective`), replaced whole whenever it sends them."""

    def __init__(self, store: ConfigStore) -> None:
        self.effective = store.effective


class ServingFigures:
    """This process's own figures, appended to the cluster process's /metrics: what its event
    loop spends besides answering requests, and its HTTP connections (the daemon's
    listeners are here; the cluster process leaves those families out)."""

    def __init__(self, listeners: HttpListeners, http_max_connections: int) -> None:
        self.listeners = listeners
        self.http_max_connections = http_max_connections
        self.link_seconds = {"counts": 0.0, "limits": 0.0}
        self.gc_seconds = 0.0
        self._gc_started = 0.0
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(self)

    def on_gc(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_seconds += time.perf_counter() - self._gc_started

    def collect(self) -> Any:
        link = CounterMetricFamily(
            "rgd_serving_link_seconds", "Time the loop answering brokers (--cluster-process, --cluster-thread) spent "
            "handing counts to the cluster half (counts) and applying its limits (limits)", labels=["direction"])
        for direction, seconds in self.link_seconds.items():
            link.add_metric([direction], seconds)
        yield link
        yield CounterMetricFamily("rgd_serving_gc_seconds", "Time the loop answering brokers (--cluster-process, "
                                  "--cluster-thread: every collection in the process) spent in garbage collection",
                                  value=self.gc_seconds)
        yield from http_connection_families(self.listeners.guard, self.http_max_connections)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ClusterChild:
    """`--cluster-process`: the cluster half as a child process."""

    kill_outcome = "killed"

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.name = f"cluster process {process.pid}"

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    async def wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def kill(self) -> None:
        self.process.kill()
        await self.process.wait()


class _ClusterThread:
    """`--cluster-thread`: the cluster half as a thread of this process."""

    kill_outcome = "left to end with the process"

    def __init__(self, link: ThreadLink, event_loop: str) -> None:
        from rgd.daemon.cluster_process import run_in_thread  # numpy and the Pulsar client: only in this layout

        def body() -> None:
            try:
                run_in_thread(link, event_loop)
            except BaseException:
                log.exception("the cluster thread failed")
            finally:
                link.close()  # however it ended (run_in_thread closes it too): the serving side stops
                self._ended.set()

        self._ended = threading.Event()
        self.thread = threading.Thread(target=body, name="rgd-cluster", daemon=True)
        sys.setswitchinterval(THREAD_SWITCH_SECONDS)
        self.thread.start()
        self.name = f"cluster thread {self.thread.native_id}"

    @property
    def running(self) -> bool:
        return not self._ended.is_set()

    async def wait(self, timeout: float) -> bool:
        return await asyncio.to_thread(self._ended.wait, timeout)

    async def kill(self) -> None:
        """A thread cannot be killed: it is a daemon thread, gone when the process exits
        (`rgd run` exits at once after its stop, as the cluster process does)."""


class ServingProcess:
    """The serving process: what the broker routes read (`settings`, `config`, `limiter`),
    the HTTP sites, and the cluster process it supervises."""

    def __init__(self, settings: Settings, config_doc: ConfigDocument | None = None, log_level: str = "info") -> None:
        self.settings = settings
        self.config_doc = config_doc
        self.log_level = log_level
        store = ConfigStore(local_cluster=settings.cluster_name)
        if config_doc is not None:
            store.set_base(config_doc.registry)
        # The file's groups from the start; the cluster process's (overlay from the config
        # topic included) replace them as soon as it sends them, before it is ready.
        self.config = _GroupsInForce(store)
        self.limiter = ServingLimiter(time.monotonic, settings.burst, settings.max_debt,
                                      start_seconds=start_seconds_for(settings.strategy),
                                      wall_offset=time.time() - time.monotonic())
        self.limiter.shadow_all = settings.shadow
        self.listeners = HttpListeners()
        self.figures = ServingFigures(self.listeners, settings.http_max_connections)
        self.failed: str | None = None  # why the cluster process stopped under us
        # The cluster process's node is settled and its shares for new buckets are here: until
        # then /readyz says not ready even when the cluster process would (see _forward).
        self.cluster_settled = False
        self.stopped = asyncio.Event()  # set when this process should stop (the cluster process died)
        self._dir: str | None = None
        self._cluster: _ClusterChild | _ClusterThread | None = None
        self._link: Link | None = None
        self._client: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the HTTP sites first (a taken port fails before anything else starts), then
        start the cluster process and wait until it is up. A failed start releases all."""
        try:
            await self._start()
        except BaseException:
            await self._release()
            raise

    async def _start(self) -> None:
        s = self.settings
        app = web.Application(client_max_size=MAX_BODY)
        app[ASKS] = self  # the broker routes read settings, config, limiter: rgd.api.daemon_view.AskView
        broker.add_routes(app)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        await self.listeners.open(app, s, embedded_broker=not s.pulsar_url)
        self._dir = tempfile.mkdtemp(prefix="rgd-cluster-")  # 0700: the socket is ours alone
        http_socket = os.path.join(self._dir, "http.sock")
        if s.cluster_thread:
            ours, theirs = thread_link()
            self._link = ours
            self._cluster = _ClusterThread(theirs, s.event_loop)
        else:
            ours_end, theirs_end = socket.socketpair()
            try:
                self._cluster = _ClusterChild(await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "rgd.daemon.cluster_process", str(theirs_end.fileno()), self.log_level,
                    s.event_loop, pass_fds=(theirs_end.fileno(),),
                ))
            finally:
                theirs_end.close()
            self._link = await SocketLink.open(ours_end)
        link = self._link
        link.send(("start", replace(s, listen=f"unix:{http_socket}", cluster_process=False, cluster_thread=False),
                   self.config_doc))
        # The cluster half holds the document now, and the groups in force come back from it
        # (the "config" message, before it is ready): ~2.5 MB at 5 000 groups not kept twice.
        self.config_doc = None
        await link.drain()
        while True:
            try:
                message = await link.receive()
            except LinkClosed:
                raise RuntimeError(f"the {self._cluster.name} exited while starting (its log says why)") from None
            if message[0] == "ready":
                break
            if message[0] == "failed":
                raise RuntimeError(message[1])
            self._handle(message)
        self._client = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=http_socket),
                                             auto_decompress=False,
                                             timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S))
        # This process's heap is the buckets (three objects and two sets each) and the groups;
        # automatic full collections walked all of it on the loop that answers asks (65 ms at
        # 5 000 groups), so it is paced as the cluster process's is, once a tick.
        gc.callbacks.append(self.figures.on_gc)
        self._tasks = [asyncio.create_task(self._hand_over(), name="hand-over"),
                       asyncio.create_task(self._receive(), name="link-receive")]
        if not s.cluster_thread:  # a cluster thread paces the one heap (rgd.daemon.cluster_process)
            self._pacer = GcPacer()
            self._pacer.start()
            self._tasks.append(asyncio.create_task(self._pace_gc(), name="gc-pacing"))
        log.info("rgd %s answering brokers on %s (TCP port %s); %s",
                 s.id, s.listen, self.listeners.bound_port, self._cluster.name)

    async def stop(self) -> None:
        """Graceful: the cluster process stops first (its leaving report goes out), then
        what this process holds."""
        self._stopping = True
        if self._link is not None and self._cluster is not None and self._cluster.running:
            try:
                # Every count handed over before the stop: the cluster process logs them in its
                # final accounting (rgd.usage_log.accounting) before its usage log closes.
                self._link.send(("counts", self.limiter.take_counts()))
                self._link.send(("stop",))
                await self._link.drain()
            except (ConnectionError, RuntimeError):
                pass  # already gone
        await self._release()

    async def _pace_gc(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tick)
            started = time.perf_counter()
            self._pacer.after_tick()
            self.figures.gc_seconds += time.perf_counter() - started

    async def _release(self) -> None:
        if self.figures.on_gc in gc.callbacks:
            gc.callbacks.remove(self.figures.on_gc)
        cluster, self._cluster = self._cluster, None
        if cluster is not None and cluster.running and not await cluster.wait(STOP_SECONDS):
            log.error("the %s did not stop within %.0f s: %s", cluster.name, STOP_SECONDS, cluster.kill_outcome)
            await cluster.kill()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._link is not None:
            self._link.close()
            self._link = None
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        await self.listeners.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # -- the link ----------------------------------------------------------------------------

    def _handle(self, message: Any) -> None:
        what = message[0]
        if what == "ops":
            started = time.perf_counter()
            self.limiter.apply(message[1], self.config.effective.budget_map())
            self.figures.link_seconds["limits"] += time.perf_counter() - started
        elif what == "config":
            self.config.effective = message[1]
        elif what == "settled":
            self.cluster_settled = message[1]
        else:
            log.error("serving link: unknown message %r ignored", what)

    async def _receive(self) -> None:
        assert self._link is not None
        link = self._link
        try:
            while True:
                message = await link.receive()
                if message[0] == "ops" and len(message[1]) > OPS_SLICE:
                    # A recompute of thousands of groups: applied a slice at a time, in
                    # order, with asks answered in between (the next message waits).
                    ops = message[1]
                    for i in range(0, len(ops), OPS_SLICE):
                        self._handle(("ops", ops[i:i + OPS_SLICE]))
                        await asyncio.sleep(0)
                else:
                    self._handle(message)
        except LinkClosed:
            pass
        if not self._stopping:
            name = self._cluster.name if self._cluster is not None else "cluster half"
            self.failed = f"the {name} exited"
            log.error("the %s exited: stopping (brokers must not be answered with stale limits)", name)
            self.stopped.set()

    async def _hand_over(self) -> None:
        assert self._link is not None
        link = self._link
        interval = self.settings.tick / REACTS_PER_TICK
        while True:
            await asyncio.sleep(interval)
            while self.limiter.pending:
                # A slice at a time: after a slow cluster process kept the link full, thousands of
                # buckets wait, and handing them over at once held the loop 15-25 ms.
                started = time.perf_counter()
                link.send(("counts", self.limiter.take_counts(COUNTS_SLICE)))
                self.figures.link_seconds["counts"] += time.perf_counter() - started
                await link.drain()  # the cluster process reads them as it can: the loop goes on

    # -- every route but the brokers' --------------------------------------------------------

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        client = self._client
        if client is None:
            return json_response({"error": "the cluster process is not running"}, 503)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
        headers[CLIENT_ADDRESS_HEADER] = request.remote or ""
        try:  # within the idle timeout, as the cluster process would read it (rgd/api/body.py)
            body = await read_body(request, self.settings.http_idle_timeout)
        except ApiError as exc:
            return as_json_error(request, exc)
        try:
            async with client.request(request.method, "http://rgd" + request.path_qs, headers=headers,
                                      data=body if body else None, allow_redirects=False) as resp:
                out = {k: v for k, v in resp.headers.items() if k.lower() not in _NOT_FORWARDED}
                if (request.method == "GET" and request.path == "/metrics" and resp.status == 200
                        and "Content-Encoding" not in resp.headers):
                    # Passed on as it comes (a scrape at 5 000 groups is ~8 MB), ours appended.
                    streamed = web.StreamResponse(headers=out)
                    await streamed.prepare(request)
                    try:
                        async for chunk in resp.content.iter_chunked(METRICS_CHUNK):
                            await streamed.write(chunk)
                    except (TimeoutError, aiohttp.ClientError) as exc:
                        # Cut, not completed: a scrape that ends without our tail or an error
                        # line would read as complete with series missing.
                        log.warning("/metrics: the cluster process's answer broke off: %s", exc)
                        if request.transport is not None:
                            request.transport.close()
                        return streamed
                    await streamed.write(self.figures.render())
                    await streamed.write_eof()
                    return streamed
                payload = await resp.read()
                if request.path == "/readyz" and resp.status == 200 and not self.cluster_settled:
                    # Ready there, not yet here: the first asks would start buckets at the share
                    # of an unsettled node (the link is a message behind the node).
                    doc = json.loads(payload)
                    doc["ready"] = False
                    return json_response(doc, 503)
                return web.Response(status=resp.status, body=payload, headers=out)
        except (TimeoutError, aiohttp.ClientError) as exc:
            return json_response({"error": f"the cluster process did not answer: {exc or type(exc).__name__}"}, 503)


__all__ = ["ServingProcess"]
