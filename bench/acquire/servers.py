"""The servers under test: start them pinned to a core, check their answers, measure their CPU, stop them.

Every server is a child process in its own process group, logging to a
file, so a stop reaches all of it (rgd's broker included, which runs in a
session of its own) and a failed start can say why. rgd itself is started
by rgd.devtools.daemon_process.DaemonProcess, the same supervisor `rgd up`
and the tests use; the baselines and redis-server are plain commands.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Protocol

import redis

from acquire.cases import (
    BENCH_RATE_BYTES,
    BENCH_RATE_MSGS,
    BENCH_TENANT,
    TIGHT_RATE_MSGS,
    TIGHT_TENANT,
    Case,
)
from rgd.devtools.daemon_process import DaemonProcess
from rgd.transport.embedded_broker import free_port, process_alive

__all__ = [
    "HERE", "HOST", "REPO", "RGD_CONFIG", "RgdServer", "Server", "Supervised", "cpu_seconds", "http", "kill_group",
    "pinned", "redis_calls", "redis_client", "sanity_check", "start_redis", "start_server", "wait_ready",
]

HERE = Path(__file__).resolve().parents[1]  # bench/
REPO = HERE.parent
HOST = "127.0.0.1"


class Supervised(Protocol):
    """What the benchmark needs of a running server, whoever started it."""

    name: str

    def cpu_pids(self) -> list[int]: ...

    def stop(self, grace: float = 15.0) -> None: ...


def pinned(cmd: list[str], cpu: int | None) -> list[str]:
    return ["taskset", "-c", str(cpu), *cmd] if cpu is not None else cmd


def kill_group(pgid: int, grace: float) -> None:
    """SIGTERM a process group, SIGKILL it after `grace` seconds if still there."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Server:
    """A child process in its own process group, logging to a file."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        """`cwd`: where the child runs (default: this repository); `python -m rgd.cli` there runs
        that tree's rgd (bench/bench_batch.py --baseline)."""
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 -- the child's stdout for its whole life
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=cwd or REPO, env=env)
        self.extra_groups: list[int] = []  # e.g. rgd's broker, which runs in its own session

    def cpu_pids(self) -> list[int]:
        return [self.proc.pid, *self.extra_groups]  # taskset execs: the pid is the server's

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM the group, SIGKILL it after `grace`. Waits on the child itself:
        until it is reaped it is a zombie that still answers kill(0)."""
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(grace)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                kill_group(self.proc.pid, 0.0)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        for pgid in self.extra_groups:
            if process_alive(pgid):
                kill_group(pgid, 5.0)
        self._log.close()


RGD_CONFIG = f"""\
# written by bench/bench_acquire.py
resourcegroups:
  {BENCH_TENANT}: {{publishRateInMsgs: {BENCH_RATE_MSGS}, publishRateInBytes: {BENCH_RATE_BYTES},
          dispatchRateInMsgs: -1, dispatchRateInBytes: -1}}
  {TIGHT_TENANT}: {{publishRateInMsgs: {TIGHT_RATE_MSGS}, publishRateInBytes: -1,
          dispatchRateInMsgs: -1, dispatchRateInBytes: -1}}
tenants:
  {BENCH_TENANT}: {BENCH_TENANT}
  {TIGHT_TENANT}: {TIGHT_TENANT}
"""


class RgdServer:
    """The daemon exactly as shipped (`rgd run`, embedded broker), on the baselines' event loop,
    through DaemonProcess; its broker's process group counts for CPU and is stopped with it."""

    def __init__(self, loop: str, work: Path, cpu: int | None, ready_timeout: float) -> None:
        self.name = f"rgd ({loop})"
        data = work / f"rgd-{loop}"
        data.mkdir(exist_ok=True)
        config = data / "rgd.yaml"
        config.write_text(RGD_CONFIG)
        self.daemon = DaemonProcess(
            f"bench-{loop}", ["--config", str(config), "--data-dir", str(data), "--log-dir", str(data / "log"),
                              "--event-loop", loop],
            log_path=work / f"rgd-{loop}.log", cpus={cpu} if cpu is not None else None, cwd=str(REPO),
            new_session=True)
        self.broker_pid: int | None = None
        try:
            self.daemon.start().wait_ready(ready_timeout)
            info = json.loads((data / "broker.json").read_text())
            self.broker_pid = int(info["pid"])  # started with its own session
        except BaseException:
            self.stop()
            raise
        self.url = f"{self.daemon.url}/v1/acquire"

    def cpu_pids(self) -> list[int]:
        pid = self.daemon.process.pid if self.daemon.process is not None else None
        return [p for p in (pid, self.broker_pid) if p is not None]

    def stop(self, grace: float = 15.0) -> None:
        self.daemon.stop(grace)
        if self.broker_pid is not None and process_alive(self.broker_pid):
            kill_group(self.broker_pid, 5.0)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes (all their threads) so far."""
    total = 0
    for pid in pids:
        try:
            fields_ = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields_[11]) + int(fields_[12])  # utime, stime (fields 14, 15)
    return total / os.sysconf("SC_CLK_TCK")


def http(method: str, url: str, data: bytes | None = None, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def wait_ready(server: Server, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"{server.name} exited with code {server.proc.returncode} before it was ready; "
                               f"log {server.log_path}:\n{server.log_tail()}")
        try:
            status, _, data = http("GET", url, timeout=2.0)
            if status == 200:
                return
            last = f"{status} {data[:200]!r}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.2)
    raise RuntimeError(f"{server.name} not ready at {url} within {timeout:.0f}s (last: {last}); "
                       f"log {server.log_path}:\n{server.log_tail()}")


# -- redis -------------------------------------------------------------------------------

def redis_client(port: int, timeout: float = 2.0) -> redis.Redis:
    """redis-py's client for our own probes of redis-server (PING, INFO): the limits server
    under test speaks to it through limits' own storage."""
    return redis.Redis(host=HOST, port=port, socket_timeout=timeout, socket_connect_timeout=timeout)


# Connection housekeeping, ours or a client library's (redis-py sends CLIENT SETINFO on each
# connection, coredis HELLO): not the rate-limiting work the count is evidence of.
_HOUSEKEEPING = ("cmdstat_ping", "cmdstat_info", "cmdstat_command", "cmdstat_hello", "cmdstat_client")


def redis_calls(port: int) -> int:
    """Commands redis-server ran beyond connection housekeeping: proof limits used it."""
    with redis_client(port) as client:
        stats = client.info("commandstats")
    return sum(int(fields["calls"]) for name, fields in stats.items()
               if not name.startswith(_HOUSEKEEPING))


def start_redis(work: Path, cpu: int | None) -> tuple[Server, int]:
    port = free_port()
    cmd = ["redis-server", "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no",
           "--daemonize", "no", "--dir", str(work), "--protected-mode", "yes"]
    server = Server("redis-server", pinned(cmd, cpu), work / "redis.log")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"redis-server exited: {server.log_tail()}")
        try:
            with redis_client(port) as client:
                if client.ping():
                    return server, port
        except (redis.ConnectionError, redis.TimeoutError):
            pass  # not listening yet
        time.sleep(0.1)
    server.stop()
    raise RuntimeError("redis-server did not answer PING within 15s")


# -- starting each kind of server --------------------------------------------------------

def start_server(kind: str, loop: str, work: Path, cpu: int | None, redis_port: int | None,
                 ready_timeout: float) -> tuple[Supervised, str]:
    if kind == "rgd":
        rgd = RgdServer(loop, work, cpu, ready_timeout)
        return rgd, rgd.url
    port = free_port()
    listen = f"{HOST}:{port}"
    uv = ["--uvloop"] if loop == "uvloop" else []
    py = sys.executable
    if kind == "trivial":
        cmd = [py, str(HERE / "trivial_server.py"), "--listen", listen, *uv]
    elif kind == "limits":
        assert redis_port is not None
        cmd = [py, str(HERE / "limits_redis_server.py"), "--listen", listen, "--redis", f"{HOST}:{redis_port}",
               "--rate", f"{BENCH_TENANT}={BENCH_RATE_MSGS}", "--rate", f"{TIGHT_TENANT}={TIGHT_RATE_MSGS}", *uv]
    else:
        raise ValueError(kind)
    server = Server(f"{kind} ({loop})", pinned(cmd, cpu), work / f"{kind}-{loop}.log")
    try:
        wait_ready(server, f"http://{listen}/readyz", ready_timeout)
    except BaseException:
        server.stop()
        raise
    return server, f"http://{listen}/v1/acquire"


def sanity_check(case: Case, url: str, payload: bytes) -> str:
    """One request with the benchmark's body: the answer must be what the case claims."""
    status, headers, data = http("POST", url, payload)
    doc = json.loads(data)
    if case.batch:
        results = doc.get("results") if isinstance(doc, dict) else None
        if status != 200 or not isinstance(results, list) or len(results) != case.batch:
            raise RuntimeError(f"{case.name}: batch answer is {status} {data[:300]!r}")
        allowed = sum(1 for r in results if r.get("allowed") is True)
        if not case.deny and allowed != case.batch:
            raise RuntimeError(f"{case.name}: only {allowed}/{case.batch} asks allowed: {data[:300]!r}")
        return f"200, {allowed}/{case.batch} allowed"
    if case.deny:
        # A fixed window may just have reset: more asks than the limit must meet a denial.
        for sent in range(1, 3 * TIGHT_RATE_MSGS + 2):
            if status == 429:
                if doc.get("allowed") is not False or "Retry-After" not in headers:
                    raise RuntimeError(f"{case.name}: a 429 without allowed=false and Retry-After: {data[:300]!r}")
                return f"429 after {sent} ask(s), retry_after_ms={doc.get('retry_after_ms')}"
            if status != 200 or doc.get("allowed") is not True:
                raise RuntimeError(f"{case.name}: expected 200 or 429, got {status} {data[:300]!r}")
            status, headers, data = http("POST", url, payload)
            doc = json.loads(data)
        raise RuntimeError(f"{case.name}: {3 * TIGHT_RATE_MSGS + 1} asks to a {TIGHT_RATE_MSGS} msg/s group, "
                           "none denied")
    if status != 200 or doc.get("allowed") is not True:
        raise RuntimeError(f"{case.name}: expected an allowed ask, got {status} {data[:300]!r}")
    return "200 allowed"
