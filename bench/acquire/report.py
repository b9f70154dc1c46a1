"""What the benchmark prints about itself and its results: the machine, and the tables.

A figure from a shared VM means little without the machine, the tools'
versions and the load average beside it, so those are printed (and written
to the JSON) with every run.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from acquire.cases import Result
from acquire.ratios import ratio

__all__ = ["machine_info", "print_report"]


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
            if r.loop == "asyncio" and (r.case, "uvloop") in by:
                speedup = ratio(by[(r.case, "uvloop")].req_per_s, r.req_per_s, None)
                if speedup is not None:
                    print(f"  {r.case:<22} {speedup:.2f}x")
