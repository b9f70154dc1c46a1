"""The daemon's listening sockets: TCP and node-local unix sockets.

Why a unix socket: brokers on the same node skip the TCP/IP stack (and, in
Kubernetes, the Service's iptables hop); bench/bench_batch.py measures the
difference. The socket file lives in a directory shared with broker pods
(a hostPath), so three things matter that TCP does not have:
- a stale file from a daemon that died without cleaning up must not block the
  restart, but a live daemon's socket must never be taken over;
- broker pods run under other uids, so the file is made connectable by all
  (who may reach it is decided by who gets the directory mounted);
- the file is removed on a clean stop, only if it is still ours.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
from pathlib import Path

from aiohttp import web

from rgd.api.connection_guard import ConnectionGuard, GuardedTCPSite, GuardedUnixSite, connection_limit
from rgd.config.settings import ListenAddress, Settings

log = logging.getLogger("rgd.http")

__all__ = ["HttpListeners", "SocketInUse", "bound_tcp_port", "prepare_unix_path", "remove_unix_socket", "start_sites",
           "warn_embedded_beyond_loopback"]

SOCKET_MODE = 0o666  # broker pods connect under their own uid


class SocketInUse(OSError):
    """The unix socket path is taken: a live daemon answers there, or it is not a socket."""


def prepare_unix_path(path: str) -> None:
    """Make `path` bindable: create its directory, remove a stale socket (nobody
    accepts on it), refuse a live one or any other kind of file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        st = p.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketInUse(errno.EEXIST, f"listen: {path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        p.unlink(missing_ok=True)  # left behind by a daemon that is gone
        return
    except OSError:
        pass  # e.g. a timeout: someone holds it but is slow; do not steal it
    finally:
        probe.close()
    raise SocketInUse(errno.EADDRINUSE, f"listen: unix:{path} is in use by a running process")


async def start_sites(
    runner: web.AppRunner, addresses: list[ListenAddress], guard: ConnectionGuard | None = None,
) -> list[tuple[str, int]]:
    """Bind every address; returns (path, inode) of each unix socket made, for cleanup.

    With a guard, every listener's connections count against one connection limit (TCP and
    unix alike: both hold file descriptors)."""
    made: list[tuple[str, int]] = []
    for addr in addresses:
        if addr.is_unix:
            prepare_unix_path(addr.path)
            unix = web.UnixSite(runner, addr.path) if guard is None else GuardedUnixSite(runner, guard, addr.path)
            await unix.start()
            os.chmod(addr.path, SOCKET_MODE)
            made.append((addr.path, os.stat(addr.path).st_ino))
        else:
            tcp = (web.TCPSite(runner, addr.host, addr.port, reuse_address=True, backlog=1024) if guard is None
                   else GuardedTCPSite(runner, guard, addr.host, addr.port, reuse_address=True, backlog=1024))
            await tcp.start()
    return made


def bound_tcp_port(runner: web.AppRunner) -> int | None:
    """The first TCP port actually bound (port 0 picks one), None with unix sockets only."""
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2 and isinstance(address[1], int):
            return address[1]
    return None


def remove_unix_socket(path: str, inode: int) -> None:
    """Unlink our socket file; leave it if another daemon has since bound the path."""
    try:
        if os.lstat(path).st_ino == inode:
            os.unlink(path)
    except FileNotFoundError:
        pass


def warn_embedded_beyond_loopback(addresses: list[ListenAddress]) -> None:
    """The embedded broker is this machine's: serving brokers beyond it with one is a
    cluster whose daemons never hear each other."""
    for host in {a.host for a in addresses if not a.is_unix} - {"127.0.0.1", "localhost", "::1"}:
        log.warning("listening on %s with the embedded broker: this daemon hears no peer on "
                    "another machine, so a multi-node cluster would admit N x the quota; "
                    "set --pulsar-url to the shared Pulsar cluster", host)


class HttpListeners:
    """The daemon's HTTP listeners: one app served on every `--listen` address, their
    connections counted against one limit. Whoever listens for brokers (the daemon, or the
    serving process of `--cluster-process`) opens them here, so both bind, guard, warn and
    clean up alike. `close()` undoes whatever part of `open()` ran, and is safe to call twice."""

    def __init__(self) -> None:
        self.guard: ConnectionGuard | None = None  # set once the sites listen
        self.bound_port: int | None = None  # the first TCP address's port; None with unix sockets only
        self._runner: web.AppRunner | None = None
        self._unix_sockets: list[tuple[str, int]] = []

    async def open(self, app: web.Application, settings: Settings, embedded_broker: bool) -> None:
        runner = self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                              keepalive_timeout=settings.http_idle_timeout)
        await runner.setup()
        assert runner.server is not None
        self.guard = ConnectionGuard(runner.server, connection_limit(settings.http_max_connections))
        addresses = settings.listen_addresses
        self._unix_sockets = await start_sites(runner, addresses, self.guard)
        self.bound_port = bound_tcp_port(runner)
        if embedded_broker:
            warn_embedded_beyond_loopback(addresses)

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        for path, inode in self._unix_sockets:
            remove_unix_socket(path, inode)
        self._unix_sockets = []
