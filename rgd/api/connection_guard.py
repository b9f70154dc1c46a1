"""Room for acquires, /metrics and /healthz when clients hold too many connections open.

Without a limit, idle keep-alive connections pile up until the process runs
out of file descriptors; from then on `accept()` fails, asyncio pauses the
listening socket, and new acquires, /metrics and /healthz all go unanswered
while the idle ones hold their descriptors. The guard keeps the number of HTTP
connections under a limit set below the descriptor limit (`RLIMIT_NOFILE`
minus a reserve for Pulsar, the usage log and the broker), and makes room for a
new connection by closing the oldest idle ones: a connection that is waiting
for its next request loses nothing when closed (HTTP clients reconnect), while
a new connection is usually someone who wants an answer now. Only when every
connection is busy is the new one refused with a 503. Idle and slow
connections (headers trickling in) are also closed by aiohttp's keep-alive
timeout, `--http-idle-timeout`; this guard handles the burst before that.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

log = logging.getLogger("rgd.http")

FD_RESERVE = 128  # descriptors kept for everything that is not an HTTP connection
SHED_BATCH = 16  # idle connections closed at once when the limit is reached (amortizes the scan)
LOG_EVERY_S = 10.0  # at most one "limit reached" line per this many seconds

_REFUSAL_BODY = b'{"error":"too many connections, every one busy; retry","status":503}'
_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Retry-After: 1\r\nContent-Length: %d\r\n\r\n%s" % (len(_REFUSAL_BODY), _REFUSAL_BODY))


def connection_limit(configured: int, reserve: int = FD_RESERVE) -> int:
    """The configured limit, lowered to fit under the soft descriptor limit with `reserve` spare."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, soft - reserve))


class _Refuse(asyncio.Protocol):
    """Answers 503 and closes: every connection is busy with a request."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_REFUSAL)
        transport.close()


@dataclass
class GuardCounts:
    idle_closed: int = 0  # idle connections closed to make room
    refused: int = 0  # new connections refused (all busy)


class ConnectionGuard:
    def __init__(self, server: web.Server, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.server = server
        self.limit = limit
        self.counts = GuardCounts()
        self.clock = clock
        self._logged_at = -LOG_EVERY_S
        self._unlogged = GuardCounts()

    @property
    def open_connections(self) -> int:
        return len(self.server.connections)

    def protocol_factory(self) -> asyncio.Protocol:
        """What the listening socket calls per accepted connection."""
        connections = self.server.connections  # oldest first
        if len(connections) >= self.limit:
            excess = len(connections) - self.limit + 1
            closed = self._close_idle(connections, max(excess, SHED_BATCH))
            if closed < excess:
                self.counts.refused += 1
                self._unlogged.refused += 1
                self._log()
                return _Refuse()
            self._log()
        return self.server()

    def _close_idle(self, connections: list[Any], wanted: int) -> int:
        """Close up to `wanted` idle connections, those idle longest first.

        aiohttp has no public "idle since"; a handler between requests has no request in
        progress, and its keep-alive deadline was set when it last answered (or connected),
        so the earliest deadline is the longest idle. A client asking every few
        milliseconds is thus the last to lose its connection."""
        idle = [h for h in connections
                if h.transport is not None and not getattr(h, "_request_in_progress", True)]
        victims = heapq.nsmallest(wanted, idle, key=lambda h: getattr(h, "_next_keepalive_close_time", 0.0))
        for handler in victims:
            handler.force_close()
        self.counts.idle_closed += len(victims)
        self._unlogged.idle_closed += len(victims)
        return len(victims)

    def _log(self) -> None:
        now = self.clock()
        if now - self._logged_at < LOG_EVERY_S:
            return
        self._logged_at = now
        log.warning("HTTP connection limit %d reached: closed %d idle connections, refused %d new ones "
                    "(since the last such line; rgd_http_connections_shed_total counts them all)",
                    self.limit, self._unlogged.idle_closed, self._unlogged.refused)
        self._unlogged = GuardCounts()


class GuardedTCPSite(web.TCPSite):
    """A TCPSite whose connections go through a `ConnectionGuard`."""

    def __init__(self, runner: web.BaseRunner, guard: ConnectionGuard, *args: Any, **kwargs: Any) -> None:
        super().__init__(runner, *args, **kwargs)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.guard.protocol_factory, self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog, reuse_address=self._reuse_address, reuse_port=self._reuse_port,
        )
        self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port


class GuardedUnixSite(web.UnixSite):
    """A UnixSite whose connections go through a `ConnectionGuard`: brokers on the node's
    socket hold file descriptors too, so they count against the same limit."""

    def __init__(self, runner: web.BaseRunner, guard: ConnectionGuard, *args: Any, **kwargs: Any) -> None:
        super().__init__(runner, *args, **kwargs)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(
            self.guard.protocol_factory, self._path, ssl=self._ssl_context, backlog=self._backlog,
        )


__all__ = ["ConnectionGuard", "GuardCounts", "GuardedTCPSite", "GuardedUnixSite", "connection_limit"]
