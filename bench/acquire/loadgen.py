"""The load generators: wrk when installed, else a Python one; both end in one summary dict.

Either runs as its own process pinned to the client core, so its CPU never
competes with the server's; both print one `BENCH_JSON {...}` line (wrk
through bench/wrk/post_body.lua) with the same fields, so everything after
the generator is the same code whichever ran.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from acquire.servers import HERE, HOST, pinned

__all__ = ["ENTRY", "LUA", "MAX_PY_REQUESTS", "loadgen_main", "run_python_loadgen", "run_wrk", "summary_line"]

LUA = HERE / "wrk" / "post_body.lua"
ENTRY = HERE / "bench_acquire.py"  # `bench_acquire.py loadgen ...` runs the Python generator
MAX_PY_REQUESTS = 10_000_000  # bound of the Python fallback generator


def run_wrk(url: str, body_file: Path, seconds: int, connections: int, threads: int,
            cpu: int | None) -> dict[str, Any]:
    cmd = pinned(["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s", "--timeout", "10s",
                  "-s", str(LUA), url], cpu)
    env = {**os.environ, "BENCH_BODY_FILE": str(body_file)}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + 60)
    return summary_line(out, "wrk")


def run_python_loadgen(url: str, body_file: Path, seconds: int, connections: int, threads: int,
                       cpu: int | None) -> dict[str, Any]:
    cmd = pinned([sys.executable, str(ENTRY), "loadgen", "--url", url,
                  "--body-file", str(body_file), "--duration", str(seconds),
                  "--connections", str(connections)], cpu)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    return summary_line(out, "python load generator")


def summary_line(out: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    """The generator's `BENCH_JSON` line, parsed; its output in the error when there is none."""
    for line in out.stdout.splitlines():
        if line.startswith("BENCH_JSON "):
            summary: dict[str, Any] = json.loads(line[len("BENCH_JSON "):])
            return summary
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
            except (TimeoutError, aiohttp.ClientError):
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
