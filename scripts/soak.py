"""Soak: 3 daemons under steady acquire load with churn, for a bounded time.

    python scripts/soak.py --duration 600 --churn-every 60

Every `--sample` seconds it prints each daemon's RSS, the cluster's admitted
rate against the quota, the worst second, and errors; at the end a summary.
Churn restarts one daemon at a time, alternating SIGTERM and SIGKILL, on the
same port so the load keeps flowing. Everything is on 127.0.0.1 and every loop
ends at the deadline (at most one hour).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rgd.devtools.daemon_process import DaemonProcess  # noqa: E402
from rgd.devtools.load_generator import Stream, StreamStats, constant, run_streams  # noqa: E402
from rgd.transport.embedded_broker import start_or_join  # noqa: E402

MAX_DURATION = 3600.0


def rss_mb(d: DaemonProcess) -> float:
    try:
        for line in Path(f"/proc/{d.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, AttributeError):
        pass
    return float("nan")


async def soak(ns: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="rgd-soak-"))
    broker = start_or_join(work / "broker")
    config = work / "groups.yaml"
    config.write_text(yaml.safe_dump({"resourcegroups": {"gold": {"publishRateInMsgs": ns.quota}},
                                      "tenants": {"acme": "gold"}}))
    demands = {"d1": 0.8 * ns.quota, "d2": 0.3 * ns.quota, "d3": 0.1 * ns.quota}
    daemons: dict[str, DaemonProcess] = {}

    def spawn(name: str, port: int | None = None) -> DaemonProcess:
        d = DaemonProcess(name, ["--pulsar-url", broker.url, "--config", str(config),
                                 "--log-dir", str(work / "logs" / name), "--data-dir", str(work)],
                          log_path=work / f"{name}.out")
        if port:
            d.port = port
        return d.start()

    try:
        for name in demands:
            daemons[name] = spawn(name)
        for d in daemons.values():
            d.wait_ready()
        duration = min(ns.duration, MAX_DURATION)
        print(f"soak: {duration:.0f}s, quota {ns.quota:.0f} msg/s, demands {demands}, churn every "
              f"{ns.churn_every:.0f}s; command: python scripts/soak.py --duration {ns.duration:.0f} "
              f"--churn-every {ns.churn_every:.0f} --quota {ns.quota:.0f}", flush=True)
        print(f"{'t':>5} {'rss d1/d2/d3 MB':>20} {'admitted/s':>11} {'worst s':>8} {'quota':>6} {'errors':>7} event",
              flush=True)
        t0 = time.monotonic()
        stats = [StreamStats() for _ in demands]
        streams = [Stream(daemons[n].url, f"acme/{n}", constant(r)) for n, r in demands.items()]
        load = asyncio.create_task(run_streams(streams, duration, t0, stats))
        rss0 = {n: rss_mb(d) for n, d in daemons.items()}
        rss_max = dict(rss0)
        next_churn, churn_i, event = ns.churn_every, 0, ""
        worst_all, over = 0, 0
        while not load.done():
            await asyncio.sleep(ns.sample)
            t = time.monotonic() - t0
            if ns.churn_every and t >= next_churn and t < duration - 15:
                name = list(demands)[churn_i % 3]
                how = signal.SIGTERM if churn_i % 2 == 0 else signal.SIGKILL
                old = daemons[name]
                old.signal(how)
                old.process.wait(15)
                daemons[name] = await asyncio.to_thread(spawn, name, old.port)
                event = f"restarted {name} ({how.name})"
                churn_i += 1
                next_churn += ns.churn_every
            lo, hi = max(0, int(t) - ns.sample), int(t)
            seconds = [sum(s.admitted.get(u, 0) for s in stats) for u in range(lo, hi)]
            worst = max(seconds, default=0)
            worst_all = max(worst_all, worst)
            over += sum(1 for x in seconds if x > 1.10 * ns.quota)
            rss = {n: rss_mb(d) for n, d in daemons.items()}
            for n, v in rss.items():
                rss_max[n] = max(rss_max[n], v)
            errors = sum(s.errors for s in stats)
            avg = sum(seconds) / max(1, len(seconds))
            print(f"{t:5.0f} {'/'.join(f'{v:.0f}' for v in rss.values()):>20} {avg:11.1f} {worst:8d} "
                  f"{ns.quota:6.0f} {errors:7d} {event}", flush=True)
            event = ""
        await load
        total_seconds = int(duration)
        admitted = sum(sum(s.admitted.values()) for s in stats)
        print("\nsummary:")
        print(f"  duration {duration:.0f}s, restarts {churn_i}")
        print(f"  admitted {admitted} msgs = {admitted / duration:.1f}/s vs quota {ns.quota:.0f}/s; "
              f"worst second {worst_all} ({100 * (worst_all / ns.quota - 1):+.1f} %); "
              f"seconds over 110 % of quota: {over}/{total_seconds}")
        print(f"  HTTP errors (mostly refused connections while a daemon restarts): {sum(s.errors for s in stats)}")
        print(f"  RSS at start {rss0}, max {rss_max} (MB; a restarted daemon starts over)")
        return 0
    finally:
        for d in daemons.values():
            d.stop()
        broker.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=600, help="seconds (at most 3600)")
    p.add_argument("--churn-every", type=float, default=60, help="restart one daemon this often (0: never)")
    p.add_argument("--quota", type=float, default=300)
    p.add_argument("--sample", type=int, default=10, help="seconds between lines")
    return asyncio.run(soak(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
