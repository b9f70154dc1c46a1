"""How an rgd process runs and ends: its event loop, its logging, and a bounded graceful stop.

Shared by `rgd run` (rgd.cli) and the cluster process of `--cluster-process`, which is
started as its own interpreter and must run and log exactly as the serving process does.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import signal
import sys
from types import ModuleType
from typing import Any

from rgd.daemon.gc_pacing import GcPacer

# A daemon's graceful stop takes at most ~2 s (leaving report) + 4 s (Pulsar close) + 5 s
# (an embedded broker's stop); past this it is hung (see graceful_stop). Within Kubernetes' 30 s
# grace and the 20 s rgd up and the tests wait (rgd.devtools.daemon_process.DaemonProcess.stop).
STOP_WATCHDOG_SECONDS = 15.0


def run_loop(main: Any, event_loop: str) -> int:
    """uvloop when asked or, for `auto`, when installed (the benchmark's batch figures
    are about 20 % better on it); asyncio's own loop otherwise."""
    uvloop = installed_uvloop(event_loop)
    if uvloop is not None:
        code: int = uvloop.run(main)
        return code
    if event_loop == "uvloop":
        print("rgd: event_loop uvloop: uvloop is not installed", file=sys.stderr)
        return 2
    code = asyncio.run(main)
    return int(code)


def installed_uvloop(event_loop: str) -> ModuleType | None:
    """The uvloop module when the `event_loop` setting asks for it (`uvloop`, `auto`) and it
    is installed; None for asyncio's own loop."""
    if event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


async def serve(daemon: Any, pace_gc: bool = True, stop_watchdog: float | None = STOP_WATCHDOG_SECONDS) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await daemon.start()
    except Exception as exc:
        logging.getLogger("rgd").error("startup failed: %s", exc)
        await graceful_stop(daemon, stop_watchdog)
        return 1
    # This process is the daemon's: full collections paced by the heap's growth, and what
    # is loaded so far (modules, the app, the clients) frozen now (see rgd.daemon.gc_pacing).
    # (The serving process of --cluster-process has no ticks to pace by, and a heap of buckets.)
    if pace_gc:
        daemon.gc_pacer = GcPacer()
        daemon.gc_pacer.start()
    waits = [asyncio.ensure_future(stop.wait())]
    ended = getattr(daemon, "stopped", None)  # a ServingProcess whose cluster process died
    if ended is not None:
        waits.append(asyncio.ensure_future(ended.wait()))
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    await graceful_stop(daemon, stop_watchdog)
    return 1 if getattr(daemon, "failed", None) else 0


async def graceful_stop(daemon: Any, watchdog: float | None) -> None:
    """The graceful stop, under a watchdog: every step of it is bounded (the leaving report,
    the Pulsar close, the embedded broker's stop), so one that still runs past `watchdog`
    is hung where no asyncio timeout reaches (a library thread holding what the loop waits
    on). faulthandler's watchdog is a C thread: it prints every thread's stack to the log
    and exits with status 1, where a supervisor's SIGKILL would leave no trace of where."""
    if watchdog is not None:
        faulthandler.dump_traceback_later(watchdog, exit=True)
    try:
        await daemon.stop()
    finally:
        if watchdog is not None:
            faulthandler.cancel_dump_traceback_later()


def configure_logging(level: str) -> None:
    """The format and levels of every rgd process (the cluster process of
    `--cluster-process` too, so its lines read like the serving process's)."""
    logging.basicConfig(level=getattr(logging, level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pulsar").setLevel(logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one INFO line per closed Spark connection


__all__ = ["STOP_WATCHDOG_SECONDS", "configure_logging", "graceful_stop", "installed_uvloop", "run_loop", "serve"]
