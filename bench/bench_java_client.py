"""The Java client beside the Python client: decisions per second of one client process and
the daemon's CPU per decision, both against the same daemon in the same run.

One rgd daemon as shipped (`python -m rgd.cli run`, embedded broker, uvloop) pinned to
--server-cpu (bench/bench_batch.py's Bench starts it, with its config: tenant `bench`, limits
high enough that every ask is allowed). Each client process runs pinned to --client-cpu, closed
loop, --callers asks always out, the same asks (10 namespaces, 7 topics each, 1..10 messages of
1 KiB):

- java: clients/java compiled with javac, `dev.rgd.client.bench.ClientLoad` (--warmup seconds
  of JIT warm-up, then --duration measured seconds);
- python: `bench/bench_batch.py client` (rgd.client on uvloop, --duration seconds).

Per run: the client's decisions per second (measured part), asks per request, call latency,
and the daemon's CPU (daemon + its broker, user + system from /proc/<pid>/stat) over the
client process's life divided by every decision it made for that process. --rounds N
alternates the order (java, python / python, java); each figure is the median over rounds.

    python bench/bench_java_client.py [--duration 5] [--rounds 1] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_acquire as ba  # noqa: E402  (pinning, CPU of processes, the BENCH_JSON line)
import bench_batch  # noqa: E402  (the daemon as bench_batch starts it, and its Python client load)

from rgd.devtools.java_client import compile_java_client, java_command  # noqa: E402

CLIENTS = ("java", "python")


class Run:
    """The daemon, and one client process at a time against it."""

    def __init__(self, a: argparse.Namespace, work: Path) -> None:
        self.a = a
        self.work = work
        self.bench = bench_batch.Bench(a, work)
        self.classes = work / "java-classes"

    def start(self) -> None:
        compile_java_client(self.classes, ("main", "bench"))
        self.bench.start()

    def stop(self) -> None:
        for server in (self.bench.server, self.bench.trivial):
            if server is not None:
                server.stop()

    def command(self, client: str) -> list[str]:
        url = f"http://{ba.HOST}:{self.bench.port}"
        if client == "java":
            return java_command(self.classes, "dev.rgd.client.bench.ClientLoad", "--url", url, "--duration",
                                str(self.a.duration), "--warmup", str(self.a.warmup), "--callers",
                                str(self.a.callers), "--window-us", str(round(self.a.window * 1e6)), heap_mb=512)
        return [sys.executable, str(HERE / "bench_batch.py"), "client", "--url", url, "--duration",
                str(self.a.duration), "--callers", str(self.a.callers), "--window", str(self.a.window)]

    def measure(self, client: str, rnd: int) -> dict[str, Any]:
        cmd = self.command(client)
        cpu0 = self.bench.cpu()
        out = subprocess.run(ba.pinned(cmd, self.a.client_cpu), capture_output=True, text=True, cwd=ba.REPO,
                             timeout=self.a.warmup + self.a.duration + 120)
        cpu = self.bench.cpu() - cpu0
        s = ba.summary_line(out, f"{client} client")
        decisions = s.get("total_calls", s["calls"])  # every decision the daemon made for this process
        s.update(client=client, round=rnd, daemon_cpu_s=round(cpu, 3), decisions=decisions,
                 daemon_cpu_us_per_decision=round(cpu / decisions * 1e6, 3) if decisions else None)
        if s["not_from_daemon"] or s["denied"]:
            raise RuntimeError(f"{client}: {s['not_from_daemon']} answers not from the daemon, {s['denied']} "
                               f"denied: the run measured something else ({s})")
        return s


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    fig: dict[str, Any] = {}
    for client in CLIENTS:
        mine = [r for r in runs if r["client"] == client]
        def median(key: str, mine: list[dict[str, Any]] = mine) -> float:
            return round(statistics.median(r[key] for r in mine), 3)

        fig[client] = {
            "decisions_per_s": median("calls_per_s"),
            "daemon_cpu_us_per_decision": median("daemon_cpu_us_per_decision"),
            "asks_per_request": median("asks_per_request"),
            "p50_ms": median("p50_ms"),
            "p99_ms": median("p99_ms"),
            "per_round_decisions_per_s": [r["calls_per_s"] for r in mine],
        }
    j, p = fig["java"], fig["python"]
    fig["java_over_python_decisions_per_s"] = round(j["decisions_per_s"] / p["decisions_per_s"], 3)
    fig["java_over_python_daemon_cpu_per_decision"] = round(
        j["daemon_cpu_us_per_decision"] / p["daemon_cpu_us_per_decision"], 3)
    return fig


def print_summary(fig: dict[str, Any]) -> None:
    print("\n# figures (median over rounds)")
    for client in CLIENTS:
        f = fig[client]
        print(f"  {client:<6} one process {f['decisions_per_s']:>10,.0f} decisions/s  daemon "
              f"{f['daemon_cpu_us_per_decision']:>6.2f} CPU-us/decision  {f['asks_per_request']:>6.0f} asks/request  "
              f"call p50 {f['p50_ms']:.2f} ms  p99 {f['p99_ms']:.2f} ms")
    print(f"  java/python: {fig['java_over_python_decisions_per_s']:.2f}x decisions/s, "
          f"{fig['java_over_python_daemon_cpu_per_decision']:.2f}x daemon CPU per decision")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Java and Python client processes against one daemon")
    p.add_argument("--duration", type=float, default=5.0, help="measured seconds per client run (default 5)")
    p.add_argument("--warmup", type=float, default=3.0, help="the JVM's warm-up seconds before measuring (default 3)")
    p.add_argument("--rounds", type=int, default=1, help="runs of each client, alternating the order (default 1)")
    p.add_argument("--callers", type=int, default=2000, help="asks always out per client process (default 2000)")
    p.add_argument("--window", type=float, default=0.0005, help="the clients' coalescing window, s (default 0.0005)")
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--ready-timeout", type=float, default=90.0)
    p.add_argument("--out", help="also write everything as JSON here")
    a = p.parse_args(argv)
    if not 0 < a.duration <= 120 or not 0 <= a.warmup <= 30 or not 1 <= a.rounds <= 10:
        p.error("--duration 0..120, --warmup 0..30, --rounds 1..10")
    if not 1 <= a.callers <= 20000 or not 0 <= a.window <= 0.1:
        p.error("--callers 1..20000, --window 0..0.1")
    return a


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    if not shutil.which("taskset") or (os.cpu_count() or 1) < 2:
        print("# note: no taskset or a single CPU: processes are not pinned")
        a.server_cpu = a.client_cpu = None
    command = shlex.join(["python", "bench/bench_java_client.py", *argv])
    info = ba.machine_info("java")
    java_version = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    print(f"# command: {command}")
    print(f"# machine: nproc={info['nproc']} cpu={info['cpu']!r} python={info['python']} {java_version} "
          f"loadavg={info['loadavg_start'][0]:.2f},{info['loadavg_start'][1]:.2f}")
    print(f"# daemon (and its broker) on CPU {a.server_cpu}, each client process on CPU {a.client_cpu}; "
          f"{a.callers} asks out, window {a.window * 1e3:g} ms, {a.duration:g} s measured per run", flush=True)
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rgd-bench-java-") as tmp:
        run = Run(a, Path(tmp))
        try:
            run.start()
            for rnd in range(1, a.rounds + 1):
                for client in CLIENTS if rnd % 2 else reversed(CLIENTS):
                    s = run.measure(client, rnd)
                    runs.append(s)
                    print(f"  round {rnd} {client:<6} {s['calls_per_s']:>10,.0f} decisions/s "
                          f"({s['asks_per_request']:.0f} asks/request, {s['requests']:,} requests)  daemon "
                          f"{s['daemon_cpu_s']:.2f} CPU-s for {s['decisions']:,} decisions = "
                          f"{s['daemon_cpu_us_per_decision']:.2f} us each  call p50 {s['p50_ms']:.2f} ms "
                          f"p99 {s['p99_ms']:.2f} ms", flush=True)
        finally:
            run.stop()
    fig = summarize(runs)
    print_summary(fig)
    print(f"\n# wall time {time.monotonic() - started:.0f}s; loadavg at end {os.getloadavg()[0]:.2f}")
    if a.out:
        Path(a.out).write_text(json.dumps({"command": command, "machine": info, "runs": runs, "figures": fig},
                                          indent=2) + "\n")
        print(f"# JSON written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
