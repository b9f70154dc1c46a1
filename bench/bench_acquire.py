"""POST /v1/acquire under load on loopback: rgd against two baselines (issue 2 item 8).

Cases, all driven by the same load generator in the same run:
  trivial-*   (a) bench/trivial_server.py: aiohttp + orjson, answers without limiting
  rgd-*       (b) a real `python -m rgd.cli run` daemon (embedded pulsar-lite broker)
  limits-*    (c) bench/limits_redis_server.py: the `limits` library's async API over
              a redis-server started here (fixed window, one hit per ask)
each with a single ask and a batch of --batch asks; `*-deny` sends single asks to
a group whose limit is 100 msg/s, so almost every ask is refused (429).

Servers (and redis-server, and rgd's broker) run on CPU --server-cpu, the load
generator (wrk, one thread, --connections connections) on --client-cpu. Each
case: --warmup seconds of load that is thrown away, a sanity check of the
answer, then --duration measured seconds. Everything listens on 127.0.0.1 and
every server is stopped at the end, on error too.

Noise: on this shared 2-core VM the same server's req/s moves by up to +-20 %
from one 3 s slice to the next (measured A/A with --ab-control). So a ratio of
two cases is the median of per-round ratios (rounds run A B, B A, ...), and the
single-ask target (rgd >= 0.80 x the trivial handler) is judged by an A/B stage
after the cases: --ab-pairs short alternating slices (median req/s ratio) and
--corun-rounds co-runs, both servers on the same core at once, where any
slowdown hits both (ratio of decisions per CPU-second).

    python bench/bench_acquire.py [--duration 10] [--loop asyncio|uvloop|both] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import redis

from rgd.embedded_broker import free_port, process_alive

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LUA = HERE / "wrk" / "post_body.lua"
HOST = "127.0.0.1"
BENCH_TENANT = "bench"  # a group with limits high enough that every ask is allowed
TIGHT_TENANT = "tight"  # a group of 100 msg/s: the deny cases
BENCH_RATE_MSGS = 1_000_000_000
BENCH_RATE_BYTES = 1_000_000_000_000
TIGHT_RATE_MSGS = 100
SINGLE_TARGET = 0.80  # rgd single / trivial single, req/s
BATCH_TARGET = 100_000  # rgd batch decisions/s on one core
MAX_PY_REQUESTS = 10_000_000  # bound of the Python fallback generator


# -- bodies ------------------------------------------------------------------------------

def ask(i: int, tenant: str) -> dict[str, Any]:
    """The i-th ask of a body: 10 namespaces, 7 topics each, 1..10 messages of 1 KiB."""
    ns = f"{tenant}/ns{i % 10}"
    msgs = 1 + i % 10
    return {"namespace": ns, "kind": "publish", "messages": msgs, "bytes": msgs * 1024,
            "topic": f"persistent://{ns}/t{i % 7}"}


def body(batch: int, tenant: str) -> bytes:
    doc: Any = {"requests": [ask(i, tenant) for i in range(batch)]} if batch else ask(0, tenant)
    return json.dumps(doc, separators=(",", ":")).encode()


# -- cases -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    server: str  # trivial | rgd | limits
    batch: int  # 0 = a single ask
    tenant: str

    @property
    def deny(self) -> bool:
        return self.tenant == TIGHT_TENANT


def all_cases(batch: int) -> list[Case]:
    """In the order they run: the cases a ratio compares run back to back, so a
    change in the machine's other load skews a ratio as little as it can."""
    return [
        Case("trivial-single", "trivial", 0, BENCH_TENANT),
        Case("rgd-single", "rgd", 0, BENCH_TENANT),
        Case("limits-single", "limits", 0, BENCH_TENANT),
        Case(f"trivial-batch{batch}", "trivial", batch, BENCH_TENANT),
        Case(f"rgd-batch{batch}", "rgd", batch, BENCH_TENANT),
        Case(f"limits-batch{batch}", "limits", batch, BENCH_TENANT),
        Case("rgd-single-deny", "rgd", 0, TIGHT_TENANT),
        Case("limits-single-deny", "limits", 0, TIGHT_TENANT),
    ]


@dataclass
class Result:
    case: str
    server: str
    loop: str
    batch: int
    requests: int
    seconds: float
    req_per_s: float
    decisions_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    non_2xx: int
    socket_errors: int
    generator: str
    round: int = 1
    server_cpu_s: float = 0.0  # CPU time of the server's processes during the measured run
    server_cpu_pct: float = 0.0  # ... as a share of one core: ~100 when the server is the bottleneck
    cpu_us_per_request: float = 0.0
    decisions_per_cpu_s: float = 0.0  # decisions per second of server CPU: robust to other load
    check: str = ""  # what the sanity check saw


# -- processes ---------------------------------------------------------------------------

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

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=REPO, env=env)
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


def start_server(kind: str, loop: str, work: Path, cpu: int | None, redis_port: int | None,
                 ready_timeout: float) -> tuple[Server, str]:
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
    elif kind == "rgd":
        data = work / f"rgd-{loop}"
        data.mkdir(exist_ok=True)
        config = data / "rgd.yaml"
        config.write_text(RGD_CONFIG)
        # The daemon exactly as shipped, on the same event loop as the baselines.
        cmd = [py, "-m", "rgd.cli", "run", "--listen", listen, "--config", str(config), "--data-dir", str(data),
               "--log-dir", str(data / "log"), "--event-loop", loop]
    else:
        raise ValueError(kind)
    server = Server(f"{kind} ({loop})", pinned(cmd, cpu), work / f"{kind}-{loop}.log")
    try:
        wait_ready(server, f"http://{listen}/readyz", ready_timeout)
        if kind == "rgd":
            info = json.loads((work / f"rgd-{loop}" / "broker.json").read_text())
            server.extra_groups.append(int(info["pid"]))  # started with its own session
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


# -- load generators ---------------------------------------------------------------------

def run_wrk(url: str, body_file: Path, seconds: int, connections: int, threads: int,
            cpu: int | None) -> dict[str, Any]:
    cmd = pinned(["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s", "--timeout", "10s",
                  "-s", str(LUA), url], cpu)
    env = {**os.environ, "BENCH_BODY_FILE": str(body_file)}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + 60)
    return _summary_line(out, "wrk")


def run_python_loadgen(url: str, body_file: Path, seconds: int, connections: int, threads: int,
                       cpu: int | None) -> dict[str, Any]:
    cmd = pinned([sys.executable, str(Path(__file__).resolve()), "loadgen", "--url", url,
                  "--body-file", str(body_file), "--duration", str(seconds),
                  "--connections", str(connections)], cpu)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    return _summary_line(out, "python load generator")


def _summary_line(out: subprocess.CompletedProcess, what: str) -> dict[str, Any]:
    for line in out.stdout.splitlines():
        if line.startswith("BENCH_JSON "):
            return json.loads(line[len("BENCH_JSON "):])
    raise RuntimeError(f"{what} printed no summary (exit {out.returncode}):\n{out.stdout[-2000:]}\n"
                       f"{out.stderr[-2000:]}")


async def _python_load(url: str, payload: bytes, seconds: float, connections: int) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    counts = {"status": 0, "socket": 0, "bytes": 0}
    headers = {"Content-Type": "application/json"}
    started = time.perf_counter()
    deadline = started + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.perf_counter() < deadline and len(latencies) < MAX_PY_REQUESTS:
            t0 = time.perf_counter()
            try:
                async with session.post(url, data=payload, headers=headers) as resp:
                    data = await resp.read()
                    if not 200 <= resp.status < 300:
                        counts["status"] += 1
            except (aiohttp.ClientError, asyncio.TimeoutError):
                counts["socket"] += 1
                continue
            latencies.append(time.perf_counter() - t0)
            counts["bytes"] += len(data)

    connector = aiohttp.TCPConnector(limit=connections)
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(connections)))
    elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(p: float) -> int:
        return int(latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1e6) if latencies else 0

    return {"requests": len(latencies), "duration_us": int(elapsed * 1e6), "bytes": counts["bytes"],
            "p50_us": pct(50), "p90_us": pct(90), "p99_us": pct(99),
            "max_us": int(latencies[-1] * 1e6) if latencies else 0,
            "mean_us": sum(latencies) / len(latencies) * 1e6 if latencies else 0.0,
            "errors_connect": 0, "errors_read": counts["socket"], "errors_write": 0,
            "errors_status": counts["status"], "errors_timeout": 0}


def loadgen_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench_acquire.py loadgen",
                                description="Python fallback load generator (used when wrk is missing)")
    p.add_argument("--url", required=True)
    p.add_argument("--body-file", required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--connections", type=int, required=True)
    a = p.parse_args(argv)
    if not a.url.startswith(f"http://{HOST}:"):
        raise SystemExit("loadgen: loopback URLs only")
    summary = asyncio.run(_python_load(a.url, Path(a.body_file).read_bytes(), min(a.duration, 600), a.connections))
    print("BENCH_JSON " + json.dumps(summary), flush=True)
    return 0


# -- the run -----------------------------------------------------------------------------

def _version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "missing"


def _pkg(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "missing"


def machine_info(generator: str) -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
        "implementation": platform.python_implementation(), "platform": platform.platform(),
        "loadavg_start": os.getloadavg(),
        "wrk": _version(["wrk", "-v"]).split(" Copyright")[0] if generator == "wrk" else "not used",
        "redis_server": _version(["redis-server", "--version"]),
        "aiohttp": _pkg("aiohttp"), "orjson": _pkg("orjson"), "msgspec": _pkg("msgspec"), "limits": _pkg("limits"),
        "coredis": _pkg("coredis"), "uvloop": _pkg("uvloop"),
    }


def make_result(case: Case, loop: str, summary: dict[str, Any], generator: str, check: str,
                cpu_s: float) -> Result:
    seconds = summary["duration_us"] / 1e6
    n = summary["requests"]
    rps = n / seconds if seconds > 0 else 0.0
    return Result(
        server_cpu_s=round(cpu_s, 3), server_cpu_pct=round(100 * cpu_s / seconds, 1) if seconds else 0.0,
        cpu_us_per_request=round(cpu_s / n * 1e6, 1) if n else 0.0,
        decisions_per_cpu_s=round(n * max(1, case.batch) / cpu_s, 1) if cpu_s else 0.0,
        case=case.name, server=case.server, loop=loop, batch=case.batch, requests=summary["requests"],
        seconds=round(seconds, 3), req_per_s=round(rps, 1), decisions_per_s=round(rps * max(1, case.batch), 1),
        p50_ms=summary["p50_us"] / 1000, p90_ms=summary["p90_us"] / 1000, p99_ms=summary["p99_us"] / 1000,
        max_ms=summary["max_us"] / 1000, non_2xx=summary["errors_status"],
        socket_errors=sum(summary[k] for k in ("errors_connect", "errors_read", "errors_write", "errors_timeout")),
        generator=generator, check=check,
    )


@dataclass
class Run:
    args: argparse.Namespace
    work: Path
    generate: Callable[..., dict[str, Any]]
    generator: str
    results: list[Result] = field(default_factory=list)
    servers: list[Server] = field(default_factory=list)
    single: list[dict[str, Any]] = field(default_factory=list)  # the single-ask A/B stage

    def measure(self, case: Case, loop: str, url: str, pids: list[int], round_: int) -> None:
        a = self.args
        body_file = self.work / f"body-{case.name}.json"
        payload = body(case.batch, case.tenant)
        body_file.write_bytes(payload)
        if a.warmup > 0:
            self.generate(url, body_file, a.warmup, a.connections, a.threads, a.client_cpu)
        check = sanity_check(case, url, payload)
        cpu0 = cpu_seconds(pids)
        summary = self.generate(url, body_file, a.duration, a.connections, a.threads, a.client_cpu)
        r = make_result(case, loop, summary, self.generator, check, cpu_seconds(pids) - cpu0)
        r.round = round_
        if summary["requests"] == 0:
            r.check += "; NO REQUEST COMPLETED in the window (latency above --duration?)"
        self.results.append(r)
        print(f"  {r.round}: {r.case:<22} {r.loop:<8} {r.req_per_s:>10,.0f} req/s {r.decisions_per_s:>11,.0f} decisions/s"
              f"  p50 {r.p50_ms:7.2f} ms  p99 {r.p99_ms:7.2f} ms  server CPU {r.server_cpu_pct:3.0f}%"
              f"  non-2xx {r.non_2xx}  [{r.check}]", flush=True)

    def run_all(self, cases: list[Case], loops: list[str], redis_server: Server | None,
                redis_port: int | None) -> None:
        """Start every server the cases need (an idle one costs its core nothing
        measurable: an idle rgd daemon uses 0.2 % of a CPU), then run the cases in
        order, each under every loop back to back, --rounds times. The caller stops the servers."""
        a = self.args
        urls: dict[tuple[str, str], tuple[str, list[int]]] = {}
        for kind in dict.fromkeys(c.server for c in cases):
            for loop in loops:
                server, url = start_server(kind, loop, self.work, a.server_cpu, redis_port, a.ready_timeout)
                self.servers.append(server)
                # CPU charged to a case: its server's processes; redis-server's too for limits
                pids = server.cpu_pids() + (redis_server.cpu_pids() if kind == "limits" and redis_server else [])
                urls[(kind, loop)] = (url, pids)
        for round_ in range(1, a.rounds + 1):
            # Odd rounds in list order, even rounds reversed (A B, then B A): a ratio's
            # two cases stay next to each other and a drift in the machine's other load
            # favours neither side over a pair of rounds.
            for case in cases if round_ % 2 else cases[::-1]:
                for loop in loops:
                    self.measure(case, loop, *urls[(case.server, loop)], round_)
        names = {c.name for c in cases}
        if (a.ab_pairs or a.corun_rounds) and {"trivial-single", "rgd-single"} <= names:
            for loop in loops:
                trivial = urls[("trivial", loop)]
                self.single_ab(loop, "rgd", trivial, urls[("rgd", loop)])
                if a.ab_control:  # A/A: the method against itself, to show its own noise
                    server, url = start_server("trivial", loop, self.work, a.server_cpu, None, a.ready_timeout)
                    self.servers.append(server)
                    self.single_ab(loop, "control", trivial, (url, server.cpu_pids()))

    def single_ab(self, loop: str, other: str, trivial: tuple[str, list[int]], tested: tuple[str, list[int]]) -> None:
        """The single-ask target, measured so that machine noise cannot decide it.
        On this shared 2-core VM a server's req/s moves by up to +-20 % from one
        3 s slice to the next (A/A: the trivial server against a copy of itself),
        so two long runs 12 s apart compare two machine states. Two cures:
        - alternate: --ab-pairs pairs of --ab-seconds slices, A B, B A, ...: the
          median of the per-pair req/s ratios;
        - co-run: both servers at the same time on the server CPU, each under its
          own load generator, --corun-rounds times. Whatever slows the machine
          slows both; the ratio of decisions per CPU-second is the ratio with the
          noise cancelled."""
        a = self.args
        body_file = self.work / "body-ab.json"
        payload = body(0, BENCH_TENANT)
        body_file.write_bytes(payload)
        for url, _ in (trivial, tested):
            sanity_check(Case("single", "any", 0, BENCH_TENANT), url, payload)
        sides = {"trivial": trivial, other: tested}
        for pair in range(1, a.ab_pairs + 1):
            order = ["trivial", other] if pair % 2 else [other, "trivial"]
            rps: dict[str, float] = {}
            for name in order:
                summary = self.generate(sides[name][0], body_file, a.ab_seconds, a.connections, a.threads,
                                        a.client_cpu)
                rps[name] = summary["requests"] / (summary["duration_us"] / 1e6) if summary["duration_us"] else 0.0
            row = {"stage": "alternate", "pair": pair, "loop": loop, "other": other,
                   "trivial_req_per_s": round(rps["trivial"], 1), "other_req_per_s": round(rps[other], 1),
                   "ratio": round(rps[other] / rps["trivial"], 3) if rps["trivial"] else None}
            self.single.append(row)
            print(f"  alternate {pair}: trivial {rps['trivial']:>8,.0f} req/s  {other} {rps[other]:>8,.0f} req/s"
                  f"  {other}/trivial {row['ratio']}", flush=True)
        for round_ in range(1, a.corun_rounds + 1):
            summaries: dict[str, dict[str, Any]] = {}
            errors: list[BaseException] = []

            def load(name: str) -> None:
                try:
                    summaries[name] = self.generate(sides[name][0], body_file, a.corun_duration, a.connections,
                                                    a.threads, a.client_cpu)
                except BaseException as exc:  # re-raised below, in the main thread
                    errors.append(exc)

            cpu0 = {name: cpu_seconds(side[1]) for name, side in sides.items()}
            threads = [threading.Thread(target=load, args=(name,)) for name in sides]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            cpu = {name: cpu_seconds(side[1]) - cpu0[name] for name, side in sides.items()}
            per_cpu = {k: summaries[k]["requests"] / cpu[k] if cpu[k] else 0.0 for k in cpu}
            row = {"stage": "corun", "round": round_, "loop": loop, "other": other,
                   "trivial_req_per_s": round(summaries["trivial"]["requests"] / a.corun_duration, 1),
                   "other_req_per_s": round(summaries[other]["requests"] / a.corun_duration, 1),
                   "trivial_cpu_s": round(cpu["trivial"], 3), "other_cpu_s": round(cpu[other], 3),
                   "ratio": round(per_cpu[other] / per_cpu["trivial"], 3) if per_cpu["trivial"] else None}
            self.single.append(row)
            print(f"  co-run {round_}: trivial {row['trivial_req_per_s']:>8,.0f} req/s ({row['trivial_cpu_s']:.2f} CPU-s)"
                  f"  {other} {row['other_req_per_s']:>8,.0f} req/s ({row['other_cpu_s']:.2f} CPU-s)"
                  f"  {other}/trivial per CPU-s {row['ratio']}", flush=True)


def single_ratios(rows: list[dict[str, Any]], loop: str) -> dict[str, Any]:
    """The A/B stage's medians, as ratio entries: rgd's against the target, the A/A
    control's (which should be ~1.00) for reference."""
    out: dict[str, Any] = {}
    for other, stage, key in (("rgd", "alternate", "rgd_single_over_trivial_alternating_req"),
                              ("rgd", "corun", "rgd_single_over_trivial_corun_per_cpu_s"),
                              ("control", "alternate", "control_trivial_over_trivial_alternating_req"),
                              ("control", "corun", "control_trivial_over_trivial_corun_per_cpu_s")):
        values = [r["ratio"] for r in rows if r["loop"] == loop and r["other"] == other and r["stage"] == stage
                  and r["ratio"]]
        if values:
            value = statistics.median(values)
            target = SINGLE_TARGET if other == "rgd" else None
            out[key] = {"value": round(value, 3), "target": target,
                        "met": None if target is None else value >= target, "per_round": values}
    return out


def best_of_rounds(results: list[Result]) -> list[Result]:
    """Per case and loop, the round with the most requests per second: other load on
    a shared machine only ever slows a round down, so the best round is the closest
    to what the server does on a core of its own."""
    best: dict[tuple[str, str], Result] = {}
    for r in results:
        key = (r.case, r.loop)
        if key not in best or r.req_per_s > best[key].req_per_s:
            best[key] = r
    return list(best.values())


def paired(all_rounds: list[Result], loop: str, num: str, den: str, field_: str) -> list[float]:
    """num/den of `field_` per round, each from the two cases measured side by side."""
    by = {(r.case, r.round): r for r in all_rounds if r.loop == loop}
    rounds = sorted({rnd for (case, rnd) in by if case == num})
    return [getattr(by[(num, rnd)], field_) / getattr(by[(den, rnd)], field_)
            for rnd in rounds if (den, rnd) in by and getattr(by[(den, rnd)], field_)]


def ratios(best: list[Result], all_rounds: list[Result], loop: str, batch: int) -> dict[str, Any]:
    """Each ratio of two cases is the median of its per-round ratios: the two cases
    run back to back in every round, so each round's ratio sees one state of the
    machine, and the median ignores a round that a neighbour's burst hit on one side
    only. An absolute figure (decisions/s) is the best round's (other load only ever
    slows a server down)."""
    by = {r.case: r for r in best if r.loop == loop}
    out: dict[str, Any] = {}

    def put(key: str, num: str, den: str | None, field_: str, target: float | None = None) -> None:
        if num not in by or (den is not None and den not in by):
            return
        per_round: list[float] = []
        if den is None:
            value: float | None = getattr(by[num], field_)
        else:
            per_round = paired(all_rounds, loop, num, den, field_)
            value = statistics.median(per_round) if per_round else None
        if value is None:
            out[key] = {"value": None, "target": target, "met": None if target is None else False}
            return
        out[key] = {"value": round(value, 3), "target": target,
                    "met": None if target is None else value >= target}
        if len(per_round) > 1:
            out[key]["per_round"] = [round(v, 3) for v in per_round]

    # The single-ask target is judged by the A/B stage (single_ratios): two 10 s runs
    # 12 s apart see two machine states, so these two are for reference.
    put("rgd_single_over_trivial_single_req", "rgd-single", "trivial-single", "req_per_s")
    put(f"rgd_batch{batch}_decisions_per_s", f"rgd-batch{batch}", None, "decisions_per_s", BATCH_TARGET)
    # The same two per second of server CPU: what one whole core would do, whatever else ran.
    put("rgd_single_over_trivial_single_per_cpu_s", "rgd-single", "trivial-single", "decisions_per_cpu_s")
    put(f"rgd_batch{batch}_decisions_per_cpu_s", f"rgd-batch{batch}", None, "decisions_per_cpu_s", BATCH_TARGET)
    put(f"rgd_batch{batch}_over_trivial_batch{batch}", f"rgd-batch{batch}", f"trivial-batch{batch}", "req_per_s")
    put("rgd_single_over_limits_single_req", "rgd-single", "limits-single", "req_per_s")
    put(f"rgd_batch{batch}_over_limits_batch{batch}_decisions", f"rgd-batch{batch}", f"limits-batch{batch}",
        "decisions_per_s")
    put("rgd_deny_over_limits_deny_req", "rgd-single-deny", "limits-single-deny", "req_per_s")
    return out


def print_report(results: list[Result], all_ratios: dict[str, dict[str, Any]], loops: list[str],
                 rounds: int) -> None:
    print("\n# results" + (f" (best of {rounds} rounds per case)" if rounds > 1 else ""))
    print(f"{'case':<22} {'loop':<8} {'req/s':>10} {'decisions/s':>12} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'non-2xx':>8} {'sock err':>8} {'srv CPU%':>8} {'CPU us/req':>10} {'dec/CPU-s':>10}")
    for r in results:
        print(f"{r.case:<22} {r.loop:<8} {r.req_per_s:>10,.0f} {r.decisions_per_s:>12,.0f} {r.p50_ms:>8.2f} "
              f"{r.p99_ms:>8.2f} {r.non_2xx:>8} {r.socket_errors:>8} {r.server_cpu_pct:>8.0f} "
              f"{r.cpu_us_per_request:>10,.0f} {r.decisions_per_cpu_s:>10,.0f}")
    for loop in loops:
        print(f"\n# ratios ({loop}, same run" + (
            f"; A/B ratios: median of the {rounds} per-round ratios, listed after it)" if rounds > 1 else ")"))
        if not all_ratios[loop]:
            print("  none: a ratio needs both of its cases in --cases")
        for key, v in all_ratios[loop].items():
            verdict = "" if v["met"] is None else (
                f"  target >= {v['target']:,}  {'MET' if v['met'] else 'BELOW TARGET'}")
            if v["value"] is None:
                fmt = "n/a"
            elif "decisions_per" in key and "over" not in key:
                fmt = f"{v['value']:,.0f}"
            else:
                fmt = f"{v['value']:.2f}x"
            spread = f"  per round: {', '.join(f'{x:.2f}' for x in v['per_round'])}" if "per_round" in v else ""
            print(f"  {key:<44} {fmt:>10}{verdict}{spread}")
    if len(loops) == 2:
        print("\n# uvloop / asyncio (req/s, same run)")
        by = {(r.case, r.loop): r for r in results}
        for r in results:
            if r.loop == "asyncio" and (r.case, "uvloop") in by and r.req_per_s:
                print(f"  {r.case:<22} {by[(r.case, 'uvloop')].req_per_s / r.req_per_s:.2f}x")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Benchmark POST /v1/acquire: rgd vs a trivial handler vs limits+Redis")
    p.add_argument("--duration", type=int, default=10, help="measured seconds per case (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up seconds per case, not measured (default 2)")
    p.add_argument("--connections", type=int, default=32, help="concurrent connections (default 32)")
    p.add_argument("--threads", type=int, default=1, help="wrk threads (default 1: wrk has one core)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the whole case list this many times and report each case's best round (default 1)")
    p.add_argument("--ab-pairs", type=int, default=8,
                   help="after the cases: trivial-single and rgd-single alternating in this many pairs of short "
                        "slices, A B, B A, ... (0: skip; default 8)")
    p.add_argument("--ab-seconds", type=int, default=3, help="seconds per alternating slice (default 3)")
    p.add_argument("--corun-rounds", type=int, default=3,
                   help="after the cases: trivial-single and rgd-single together on the server CPU this many times "
                        "(0: skip); their per-CPU-second ratio cancels machine noise (default 3)")
    p.add_argument("--corun-duration", type=int, default=5, help="seconds per co-run round (default 5)")
    p.add_argument("--ab-control", action="store_true",
                   help="also run both A/B stages with a second trivial server in rgd's place (A/A: the "
                        "method's own noise)")
    p.add_argument("--batch", type=int, default=100, help="asks per batch request (default 100)")
    p.add_argument("--loop", choices=["asyncio", "uvloop", "both"], default="uvloop",
                   help="event loop of every server (default uvloop, as rgd ships: event_loop auto)")
    p.add_argument("--cases", default="", help="comma-separated case names (default: all); see --list")
    p.add_argument("--list", action="store_true", help="list the case names and exit")
    p.add_argument("--loadgen", choices=["auto", "wrk", "python"], default="auto",
                   help="auto: wrk if installed, else the Python fallback")
    p.add_argument("--server-cpu", type=int, default=0, help="CPU of the servers, redis-server included")
    p.add_argument("--client-cpu", type=int, default=1, help="CPU of the load generator")
    p.add_argument("--ready-timeout", type=float, default=90.0, help="seconds to wait for a server's /readyz")
    p.add_argument("--out", help="also write the results as JSON to this file")
    p.add_argument("--check-targets", action="store_true", help="exit 1 if a target is not met")
    a = p.parse_args(argv)
    if not 1 <= a.duration <= 600 or not 0 <= a.warmup <= 60:
        p.error("--duration must be 1..600 and --warmup 0..60 (whole seconds, as wrk takes them)")
    if not 1 <= a.connections <= 1000 or not 1 <= a.threads <= a.connections:
        p.error("--connections must be 1..1000 and --threads 1..connections")
    if not 1 <= a.rounds <= 10:
        p.error("--rounds must be 1..10")
    if not 0 <= a.corun_rounds <= 10 or not 1 <= a.corun_duration <= 60:
        p.error("--corun-rounds must be 0..10 and --corun-duration 1..60")
    if not 0 <= a.ab_pairs <= 40 or not 1 <= a.ab_seconds <= 60:
        p.error("--ab-pairs must be 0..40 and --ab-seconds 1..60")
    if not 1 <= a.batch <= 1000:
        p.error("--batch must be 1..1000 (rgd's batch limit)")
    return a


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["loadgen"]:
        return loadgen_main(argv[1:])
    a = parse_args(argv)
    cases = all_cases(a.batch)
    if a.list:
        print("\n".join(c.name for c in cases))
        return 0
    if a.cases:
        wanted = [c.strip() for c in a.cases.split(",") if c.strip()]
        unknown = sorted(set(wanted) - {c.name for c in cases})
        if unknown:
            raise SystemExit(f"--cases: unknown {', '.join(unknown)} (known: {', '.join(c.name for c in cases)})")
        cases = [c for c in cases if c.name in wanted]
    generator = "wrk" if a.loadgen == "wrk" or (a.loadgen == "auto" and shutil.which("wrk")) else "python"
    if generator == "wrk" and not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install wrk), or use --loadgen python")
    if any(c.server == "limits" for c in cases) and not shutil.which("redis-server"):
        raise SystemExit("redis-server is not installed (apt-get install redis-server); or leave out limits-* cases")
    if not shutil.which("taskset") or (os.cpu_count() or 1) < 2:
        print("# note: no taskset or a single CPU: processes are not pinned")
        a.server_cpu = a.client_cpu = None
    loops = ["asyncio", "uvloop"] if a.loop == "both" else [a.loop]
    info = machine_info(generator)
    command = shlex.join(["python", sys.argv[0], *argv])
    print(f"# command: {command}")
    print(f"# machine: nproc={info['nproc']} cpu={info['cpu']!r} python={info['python']} ({info['implementation']}) "
          f"{info['platform']} loadavg={info['loadavg_start'][0]:.2f},{info['loadavg_start'][1]:.2f}")
    print(f"# tools: {info['wrk'] if generator == 'wrk' else 'python load generator (fallback)'}; "
          f"{info['redis_server'].split(' sha=')[0]}; aiohttp {info['aiohttp']}, orjson {info['orjson']}, "
          f"msgspec {info['msgspec']}, "
          f"limits {info['limits']} (coredis {info['coredis']}), uvloop {info['uvloop']}")
    print(f"# load: {generator} {a.threads} thread(s), {a.connections} connections, {a.warmup}s warm-up + "
          f"{a.duration}s per case, {a.rounds} round(s), batch={a.batch}; servers (and redis-server) on CPU {a.server_cpu}, "
          f"load generator on CPU {a.client_cpu}; loop(s): {', '.join(loops)}", flush=True)
    gen = run_wrk if generator == "wrk" else run_python_loadgen
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rgd-bench-") as tmp:
        run = Run(a, Path(tmp), gen, generator)
        redis_server: Server | None = None
        try:
            redis_port = None
            if any(c.server == "limits" for c in cases):
                redis_server, redis_port = start_redis(Path(tmp), a.server_cpu)
            run.run_all(cases, loops, redis_server, redis_port)
            if redis_port is not None:
                calls = redis_calls(redis_port)
                if calls == 0:
                    raise RuntimeError("redis-server ran no command: the limits server did not use it")
                print(f"# redis-server ran {calls:,} commands for the limits server", flush=True)
        finally:
            for s in list(run.servers):
                s.stop()
            if redis_server is not None:
                redis_server.stop()
    best = best_of_rounds(run.results)
    all_ratios = {loop: ratios(best, run.results, loop, a.batch) for loop in loops}
    for loop in loops:
        all_ratios[loop].update(single_ratios(run.single, loop))
    print_report(best, all_ratios, loops, a.rounds)
    info["loadavg_end"] = os.getloadavg()
    print(f"\n# wall time {time.monotonic() - started:.0f}s; loadavg at end "
          f"{info['loadavg_end'][0]:.2f},{info['loadavg_end'][1]:.2f} (other work on the machine adds noise)")
    if a.out:
        doc = {"command": command, "machine": info,
               "settings": {k: v for k, v in vars(a).items() if k not in ("list",)},
               "results": [asdict(r) for r in best], "all_rounds": [asdict(r) for r in run.results],
               "single_ab": run.single, "ratios": all_ratios}
        Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"# JSON written to {a.out}")
    missed = [k for rs in all_ratios.values() for k, v in rs.items() if v["met"] is False]
    return 1 if a.check_targets and missed else 0


if __name__ == "__main__":
    sys.exit(main())
