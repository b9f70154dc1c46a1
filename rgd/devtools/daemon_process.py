"""Start and stop `rgd run` as a child process (used by `rgd up`, tests and the soak).

Real processes on purpose: SIGKILL and SIGTERM behave as in production only
when the daemon is its own process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rgd.transport.embedded_broker import HOST, free_port

# How often a start that lost its port to another process is tried again on a new one.
PORT_RETRIES = 3


@dataclass
class DaemonProcess:
    daemon_id: str
    args: list[str]  # extra `rgd run` flags
    port: int = field(default_factory=free_port)
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    cpus: set[int] | None = None  # pin the process (and every thread it starts) to these cores
    cwd: str | None = None  # run from here (`-m rgd.cli` then imports the rgd found there first)
    # Its own session (process group): signal, stop and kill then reach the whole group, and a
    # Ctrl-C meant for the parent does not reach the daemon first (benchmarks measure the stop).
    new_session: bool = False
    # Where it listens: loopback, or an address the caller owns (a test namespace's veth end).
    host: str = HOST
    # A command that runs the daemon for us (`ip netns exec NS`: it then execs the daemon,
    # so the pid, signals and exit code are the daemon's own).
    wrap: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> DaemonProcess:
        cmd = [*self.wrap, sys.executable, "-m", "rgd.cli", "run", "--id", self.daemon_id,
               "--listen", f"{self.host}:{self.port}", *self.args]
        # the child gets its own copy of the descriptor: ours is closed once it started
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        cpus = self.cpus
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=pin,
                                        cwd=self.cwd, start_new_session=self.new_session)
        if self.log_path:
            out.close()  # type: ignore[union-attr]  # out is the log file opened above, not DEVNULL
        return self

    def get_json(self, path: str, timeout: float = 2.0) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def log_tail(self, lines: int = 15) -> str:
        """The end of the daemon's output, so a failed start says why without opening a file
        (a CI run deletes its scratch directory, and the log with it)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "".join(f"\n  | {line}" for line in tail)

    def _lost_its_port(self) -> bool:
        """Whether the daemon exited because another process holds its port.

        `free_port` can only name a port that was free a moment ago: a broker or another
        daemon started beside this one (pytest runs many) may take it before `rgd run`
        binds. The daemon then exits 1 saying "address already in use"; without a log
        to read, a port nobody can bind now says the same."""
        if "address already in use" in self.log_tail(5):
            return True
        if self.wrap or self.host != HOST:
            return False  # not a port of ours to try here: the log said it all
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, self.port))
            except OSError:
                return True
        return False

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        retries = PORT_RETRIES
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                if self.process.returncode == 1 and retries > 0 and self._lost_its_port():
                    retries -= 1
                    self.port = free_port()
                    self.start()
                    continue
                raise RuntimeError(f"{self.daemon_id} exited with {self.process.returncode} "
                                   f"(log: {self.log_path}){self.log_tail()}")
            try:
                status, _ = self.get_json("/readyz", 1.0)
                if status == 200:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.daemon_id} not ready within {timeout}s (log: {self.log_path}){self.log_tail()}")

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            if self.new_session:
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    pass
            else:
                self.process.send_signal(sig)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (graceful, sends the leaving report), then SIGKILL if it hangs. The daemon
        bounds its own stop (rgd.daemon.lifecycle.STOP_WATCHDOG_SECONDS) and says where it hung; this
        waits longer, so that account is what we read."""
        if self.process is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.process.wait()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGKILL)
            self.process.wait()
