"""The cluster half of `rgd run --cluster-process` (or `--cluster-thread`): the whole daemon but the buckets.

    python -m rgd.daemon.cluster_process FD LOG_LEVEL EVENT_LOOP   (started by rgd.daemon.serving_process, not by hand)

With `--cluster-thread` the same runs in a second thread of the serving process, on an
event loop of its own (`run_in_thread`), over a link that hands the messages' objects
over instead of pickling them (rgd.daemon.process_link.thread_link): one interpreter instead
of two. What is said of "the process" below holds for that thread.

It runs `Daemon` as `rgd run` does (Pulsar, the usage map, the calculator, reports,
the usage log, config from the file and the config topic, every HTTP route but the
brokers' behind a private unix socket) with a `MirrorLimiter`: the brokers' asks are
decided in the serving process, whose counts arrive here every react interval and
whose buckets get every limit the node sets (rgd/daemon/limiter_link.py). Over the link FD
(rgd/daemon/process_link.py) it receives ("start", settings, config document), ("counts",
[KindCounts]) and ("stop",), and sends ("config", registry) whenever the groups in
force change, ("ops", [Op]) whenever the node set limits, ("settled", bool) when the
node becomes settled (the serving process's /readyz waits for it: the shares of new
buckets it sent before are a settled node's), ("ready",) once started and ("failed",
why) if it could not start. The link closing (the serving process died)
stops it as a signal would: the leaving report goes out.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
from typing import Any

from rgd.daemon.gc_pacing import GcPacer
from rgd.daemon.lifecycle import configure_logging, installed_uvloop, run_loop
from rgd.daemon.limiter_link import MirrorLimiter, initial_fraction
from rgd.daemon.malloc_tuning import fix_mmap_threshold
from rgd.daemon.process_link import Link, LinkClosed, SocketLink, ThreadLink
from rgd.daemon.wake import sleep_until_woken
from rgd.daemon.wiring import Daemon

log = logging.getLogger("rgd.cluster_process")

CLUSTER_NICENESS = 10
# The graceful stop (leaving report, Pulsar close, usage log close) gets this long, within the
# serving process's wait for us (rgd.daemon.serving_process.STOP_SECONDS) and Kubernetes' 30 s grace.
STOP_SECONDS = 20.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class ClusterLink:
    """This side of the link: counts in, the registry and limit operations out."""

    def __init__(self, daemon: Daemon, link: Link, stop: asyncio.Event) -> None:
        self.daemon = daemon
        self.link = link
        self.stop = stop
        mirror = daemon.limiter
        assert isinstance(mirror, MirrorLimiter)
        self.mirror: MirrorLimiter = mirror
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.mirror.on_op = self._on_op
        self._generation = -1
        self._fraction = -1.0
        self._settled: bool | None = None

    def _on_op(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self._wake.set()
        else:
            self._loop.call_soon_threadsafe(self._wake.set)

    def flush(self) -> None:
        """Send what changed: the groups in force first (the operations may name new ones),
        then what a new bucket starts with, then the node's operations in order."""
        config = self.daemon.config
        if config.generation != self._generation:
            self._generation = config.generation
            # Replaced whole on every change, never edited (rgd.config.store): sent as it is.
            self.link.send(("config", config.effective))
        ops = []
        fraction = initial_fraction(self.daemon.node.limits_for)
        if fraction != self._fraction:
            self._fraction = fraction
            ops.append(("initial", fraction))
        ops.extend(self.mirror.take_ops())
        if ops:
            self.link.send(("ops", ops))
        settled = self.daemon.node.settled()
        if settled != self._settled:  # after the shares it settled with: /readyz waits for both
            self._settled = settled
            self.link.send(("settled", settled))

    async def send_loop(self) -> None:
        interval = self.daemon.node.config.react_seconds
        while True:
            await sleep_until_woken(self._wake, interval)
            self._wake.clear()
            self.flush()
            await self.link.drain()

    async def receive_loop(self) -> None:
        try:
            while True:
                message = await self.link.receive()
                if message[0] == "counts":
                    self.mirror.absorb(message[1], self.daemon.config.effective.budget_map())
                elif message[0] == "stop":
                    break
                else:
                    log.error("cluster link: unknown message %r ignored", message[0])
        except LinkClosed:
            log.warning("the serving process closed the link: stopping")
        except Exception:  # a message we cannot take: the link is no use any more
            log.exception("cluster link: receiving failed: stopping")
        self.stop.set()


async def run(fd: int) -> int:
    """The cluster process's life; ends the process itself once it has stopped: past the
    bounded stop nothing is left to do, and asyncio's teardown would wait for worker
    threads (a Pulsar call that never returns among them)."""
    code = await _run(await SocketLink.open(socket.socket(fileno=fd)))
    logging.shutdown()
    os._exit(code)


def run_in_thread(link: ThreadLink, event_loop: str) -> int:
    """The cluster half's life in a thread of the serving process (`--cluster-thread`), on
    an event loop of its own. However it ends (a stop, a failed start, an exception) the
    link is closed, so the serving side sees it go (and stops, as when a cluster process
    dies). Niced as the cluster process is (Linux's niceness is per thread, and threads it
    starts, the Pulsar client's and the calculator's, inherit it): when the GIL passes to
    the thread answering brokers, the kernel runs it first. The loop is closed without
    waiting for its worker threads, for the reason `run` exits without."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), CLUSTER_NICENESS)
    except (OSError, AttributeError):  # not Linux: the thread keeps the process's niceness
        pass
    loop = _new_event_loop(event_loop)
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_run(link, in_thread=True))
    finally:
        link.close()  # the end of the link for the serving side
        loop.close()


def _new_event_loop(event_loop: str) -> asyncio.AbstractEventLoop:
    """The loop `rgd run` picks for the setting (rgd.daemon.lifecycle.run_loop)."""
    uvloop = installed_uvloop(event_loop)
    return uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()


async def _run(link: Link, in_thread: bool = False) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    if not in_thread:  # in a thread the serving side's handlers stop us, over the link
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    message: Any = await link.receive()
    _, settings, doc = message
    daemon = Daemon(settings, doc, limiter_class=MirrorLimiter)
    daemon.behind_serving_process = True
    cluster_link = ClusterLink(daemon, link, stop)
    cluster_link.flush()  # the groups in force before the first ask can find a bucket
    try:
        await daemon.start()
    except Exception as exc:
        log.error("startup failed: %s", exc)
        link.send(("failed", str(exc)))
        await link.drain()
        await daemon.stop()
        return 1
    daemon.gc_pacer = GcPacer()
    daemon.gc_pacer.start()
    cluster_link.flush()
    link.send(("ready",))
    tasks = [asyncio.create_task(cluster_link.send_loop(), name="link-send"),
             asyncio.create_task(cluster_link.receive_loop(), name="link-receive")]
    await stop.wait()
    try:
        await asyncio.wait_for(daemon.stop(), STOP_SECONDS)
    except TimeoutError:
        log.error("the graceful stop took over %.0f s: exiting without it", STOP_SECONDS)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    try:
        cluster_link.flush()
        await link.drain()
        link.close()
    except (ConnectionError, RuntimeError):
        pass  # the serving process is gone: nothing left to tell it
    return 0


def _die_with_parent() -> None:
    """SIGTERM (the graceful stop) when the serving process dies, however it dies: a
    SIGKILLed parent closes the link too, but a stop that waits on the link alone left
    this process running on its own (seen after a test teardown killed the serving
    process). Linux's PR_SET_PDEATHSIG; elsewhere the closed link still stops us."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the call took effect
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> int:
    fd, level, event_loop = argv
    configure_logging(level)
    # On a busy core the serving process must win: an ask waits for the CPU behind this
    # process's folds and recomputes otherwise (bench/scale_probe.py on one core: acquire
    # p99 124 ms at niceness 0, 61 ms at 10, 19 ms at 19). Niceness weighs processes of one
    # control group against each other (a pod's container, a systemd unit, a login session's
    # autogroup), so this yields to the serving process and to nothing outside the daemon's
    # group. Raising one's own niceness needs no privilege.
    os.nice(CLUSTER_NICENESS)
    _die_with_parent()
    fix_mmap_threshold()  # it holds the peers' reports: rgd/daemon/malloc_tuning.py
    return run_loop(run(int(fd)), event_loop)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
