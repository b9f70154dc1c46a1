"""`rgd up`: the one-machine showcase.

An embedded broker, N daemon processes sharing groups, synthetic broker load
whose skew rotates every phase, and a live table of each group's quota,
demand, admitted and per-daemon shares; at the end, the Spark fairness report
on what the daemons logged.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from rgd.daemon_process import DaemonProcess
from rgd.embedded_broker import start_or_join
from rgd.load_generator import Stream, StreamStats, run_streams

PHASE_SECONDS = 10.0
SKEWS = ([0.6, 0.3, 0.1], [0.1, 0.3, 0.6], [0.34, 0.33, 0.33], [0.8, 0.1, 0.1])


def demand_weights(n: int, phase: int, group: int) -> list[float]:
    """Skew over n daemons for a phase; groups start on different skews."""
    base = SKEWS[(phase + group) % len(SKEWS)]
    w = [base[i % len(base)] / (1 + i // len(base)) for i in range(n)]
    total = sum(w)
    return [x / total for x in w]


def make_rate(total: float, n: int, daemon: int, group: int):
    def rate(t: float) -> float:
        return 1.2 * total * demand_weights(n, int(t // PHASE_SECONDS), group)[daemon]
    return rate


def _table(groups: list[str], quota: float, daemons: list[DaemonProcess], stats: dict, shares: dict,
           elapsed: float) -> Table:
    t = Table(title=f"rgd up: {len(daemons)} daemons, t={elapsed:.0f}s (Ctrl-C to stop)",
              caption="per daemon: demand > local limit (admitted), messages/s in the last second")
    t.add_column("group")
    t.add_column("quota", justify="right")
    t.add_column("demand", justify="right")
    t.add_column("admitted", justify="right")
    for d in daemons:
        t.add_column(d.daemon_id, justify="right", no_wrap=True)
    second = max(0, int(elapsed) - 1)
    for gi, g in enumerate(groups):
        demand = admitted = 0.0
        cells = []
        for di, d in enumerate(daemons):
            st: StreamStats = stats[(gi, di)]
            a = st.admitted.get(second, 0)
            o = st.offered.get(second, 0)
            demand += o
            admitted += a
            lim = shares.get((g, d.daemon_id))
            cells.append(f"{o} > {lim:.0f} ({a})" if lim is not None else f"{o} > - ({a})")
        t.add_row(g, f"{quota:.0f}", f"{demand:.0f}", f"{admitted:.0f}", *cells)
    return t


def _poll_shares(groups: list[str], daemons: list[DaemonProcess]) -> dict:
    shares = {}
    for gi, g in enumerate(groups):
        for d in daemons:
            try:
                status, doc = d.get_json(f"/v1/quota?namespace={g}/demo", timeout=0.5)
                if status == 200 and doc.get("publish"):
                    shares[(g, d.daemon_id)] = doc["publish"]["local"]["messages_per_second"] or 0
            except (OSError, ValueError):
                pass
    return shares


async def _live(ns: argparse.Namespace, groups: list[str], daemons: list[DaemonProcess], stop: asyncio.Event) -> None:
    n = len(daemons)
    streams, keys = [], []
    for gi, g in enumerate(groups):
        for di, d in enumerate(daemons):
            streams.append(Stream(d.url, f"{g}/demo", make_rate(ns.quota, n, di, gi), label=f"{g}@{d.daemon_id}"))
            keys.append((gi, di))
    duration = ns.duration if ns.duration > 0 else 24 * 3600.0
    t0 = time.monotonic()
    stats = [StreamStats() for _ in streams]
    by_key = dict(zip(keys, stats))
    load = asyncio.create_task(run_streams(streams, duration, t0, stats))
    console = Console() if Console().is_terminal else Console(width=120)
    last_print = 0.0
    with Live(console=console, auto_refresh=False) if console.is_terminal else _NoLive() as live:
        while not load.done() and not stop.is_set():
            await asyncio.sleep(1.0)
            elapsed = time.monotonic() - t0
            shares = await asyncio.to_thread(_poll_shares, groups, daemons)
            table = _table(groups, ns.quota, daemons, by_key, shares, elapsed)
            if console.is_terminal:
                live.update(table, refresh=True)
            elif elapsed - last_print >= 5:  # CI or a pipe: a table every 5 s
                console.print(table)
                last_print = elapsed
    load.cancel()
    await asyncio.gather(load, return_exceptions=True)


class _NoLive:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def run_showcase(ns: argparse.Namespace) -> int:
    work = Path(ns.workdir).absolute()
    if work.exists():
        shutil.rmtree(work)
    (work / "logs").mkdir(parents=True)
    console = Console()
    broker = start_or_join(work / "broker")
    groups = [f"tenant-{chr(ord('a') + i)}" for i in range(ns.groups)]
    config = work / "groups.yaml"
    config.write_text(yaml.safe_dump({
        "resourcegroups": {g: {"publishRateInMsgs": ns.quota, "publishRateInBytes": -1} for g in groups},
        "tenants": {g: g for g in groups},
    }))
    daemons: list[DaemonProcess] = []
    port = ns.base_port
    try:
        for i in range(ns.daemons):
            d = DaemonProcess(
                f"daemon-{i + 1}",
                ["--pulsar-url", broker.url, "--config", str(config), "--tick", str(ns.tick),
                 "--log-dir", str(work / "logs" / f"daemon-{i + 1}"), "--strategy", ns.strategy,
                 "--log-segment-age", "30"],
                log_path=work / f"daemon-{i + 1}.out",
            )
            if port:
                d.port = port + i
            daemons.append(d.start())
        for d in daemons:
            d.wait_ready()
        console.print(f"[bold]rgd up[/]: broker {broker.url}, {len(daemons)} daemons ready, "
                      f"groups {', '.join(groups)} at {ns.quota:.0f} msg/s each; logs in {work}")
        stop = asyncio.Event()

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await _live(ns, groups, daemons, stop)

        asyncio.run(main())
    finally:
        codes = [d.stop() for d in daemons]
        broker.stop()
    if any(c not in (0, None) for c in codes):
        console.print(f"[red]a daemon exited badly: {codes}[/]")
        return 1
    if not ns.no_report:
        try:
            from rgd.report import run_report
        except ImportError:
            console.print("fairness report skipped: install the spark extra (pip install 'rgd[spark]')")
            return 0
        summary = run_report(str(work / "logs"), str(work / "report"))
        console.print(f"fairness report: {work / 'report' / 'report.html'}")
        console.print({k: v for k, v in summary.items() if not isinstance(v, (list, dict))})
    return 0
