"""A daemon that fails to start, or hangs in its stop, says why where it is read, not only in a log file.

`rgd up` and CI runs delete or bury their scratch directories, so the reason a daemon
exited must travel in the error itself.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rgd.devtools.daemon_process import DaemonProcess


def test_failed_start_quotes_the_daemons_own_error(tmp_path: Path) -> None:
    log = tmp_path / "d.out"
    d = DaemonProcess("bad", ["--tick", "-1", "--data-dir", str(tmp_path / "data")], log_path=log).start()
    try:
        with pytest.raises(RuntimeError) as info:
            d.wait_ready(timeout=30)
    finally:
        d.stop()
    message = str(info.value)
    assert "bad exited with" in message
    assert "tick" in message.split("(log:", 1)[1], message  # the daemon's own words about the bad setting


HANGING_STOP = """
import asyncio, sys, time
from rgd.daemon import lifecycle

class HangingDaemon:
    async def stop(self):
        time.sleep(30)  # hung where no asyncio timeout reaches: the loop itself is held

asyncio.run(lifecycle.graceful_stop(HangingDaemon(), float(sys.argv[1])))
"""


def test_a_stop_that_hangs_exits_with_every_threads_stack(tmp_path: Path) -> None:
    """A stop hung past the watchdog ends the process itself (status 1) and leaves where it
    hung in its output; a supervisor's SIGKILL (what `rgd up` did once in CI after 10 s)
    leaves nothing to read."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", HANGING_STOP, "1.0"], capture_output=True, text=True, timeout=25)
    took = time.monotonic() - started
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert took < 20, took
    assert "Timeout" in done.stderr and "in stop" in done.stderr, done.stderr


def test_a_stop_within_the_watchdog_exits_cleanly(tmp_path: Path) -> None:
    quick = HANGING_STOP.replace("time.sleep(30)", "time.sleep(0.1)")
    done = subprocess.run([sys.executable, "-c", quick, "5.0"], capture_output=True, text=True, timeout=25)
    assert done.returncode == 0 and "Timeout" not in done.stderr, done.stderr


@pytest.mark.parametrize("with_log", [True, False], ids=["log", "no-log"])
def test_a_start_whose_port_was_taken_moves_to_a_free_one(broker, tmp_path: Path, with_log: bool) -> None:
    """`free_port` names a port that was free a moment ago; pytest starts brokers and
    daemons side by side, and one took a daemon's port before it bound (two CI errors)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    d = DaemonProcess("moved", ["--pulsar-url", broker.url, "--data-dir", str(tmp_path / "data"),
                                "--log-dir", str(tmp_path / "log")],
                      port=port, log_path=tmp_path / "d.out" if with_log else None).start()
    try:
        d.wait_ready(timeout=60)
        assert d.port != port
        assert d.get_json("/readyz")[0] == 200
    finally:
        d.stop()
        taken.close()


def test_a_start_that_fails_for_another_reason_is_not_retried(tmp_path: Path) -> None:
    d = DaemonProcess("bad", ["--tick", "-1", "--data-dir", str(tmp_path / "data")], log_path=tmp_path / "d.out")
    port = d.port
    d.start()
    with pytest.raises(RuntimeError):
        d.wait_ready(timeout=30)
    assert d.port == port
