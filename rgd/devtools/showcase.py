"""`rgd up`: the one-machine showcase.

An embedded broker, N daemon processes sharing groups, synthetic broker load
whose skew rotates every phase, and a live table of each group's quota,
demand, admitted and per-daemon shares; at the end, the Spark fairness report
on what the daemons logged. Each run gets a directory of its own under the
workdir, so a run never replaces the previous run's logs and report.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from rgd.devtools.daemon_process import DaemonProcess
from rgd.devtools.load_generator import RateFn, Stream, StreamStats, run_streams
from rgd.transport.embedded_broker import start_or_join

__all__ = ["demand_weights", "make_rate", "new_run_dir", "report_lines", "run_showcase", "shift_at", "status_table"]

PHASE_SECONDS = 10.0
SKEWS = ([0.6, 0.3, 0.1], [0.1, 0.3, 0.6], [0.34, 0.33, 0.33], [0.8, 0.1, 0.1])


def demand_weights(n: int, phase: int, group: int) -> list[float]:
    """Skew over n daemons for a phase; groups start on different skews."""
    base = SKEWS[(phase + group) % len(SKEWS)]
    w = [base[i % len(base)] / (1 + i // len(base)) for i in range(n)]
    total = sum(w)
    return [x / total for x in w]


def make_rate(total: float, n: int, daemon: int, group: int) -> RateFn:
    def rate(t: float) -> float:
        return 1.2 * total * demand_weights(n, int(t // PHASE_SECONDS), group)[daemon]
    return rate


LEGEND = ("Each group's brokers offer {demand:.0f} msg/s (1.2 x its quota) split unevenly over the daemons; "
          "the split changes every {phase:.0f} s (marked \u25c6 in the table). Every column is one and the same "
          "completed second: demand: messages offered in it; limit: the daemon's share of the group's quota "
          "(max-min fair over all daemons' demand, recomputed as demand moves), averaged over that second, or "
          "the quota itself on the all-daemons row; admitted: messages allowed in it. Demand above the limit is "
          "throttled; right after a shift the shares take a second or two to follow.")
LIMIT_SAMPLES_PER_SECOND = 4  # the daemons' limits are read this often, and averaged per second


def shift_at(second: int) -> bool:
    """Whether the load's split changed at the start of `second` (a new phase; not the first)."""
    return second > 0 and second % int(PHASE_SECONDS) == 0


def status_table(groups: list[str], quota: float, daemons: list[str], offered: dict[tuple[int, int], int],
                 admitted: dict[tuple[int, int], int], shares: dict[tuple[str, str], float], elapsed: float,
                 second: int | None = None) -> Table:
    """One row per group (all daemons: quota as the limit) and one per daemon in it.

    offered/admitted: (group index, daemon index) -> messages in `second` (the last completed
    second since the load started); shares: (group, daemon id) -> the daemon's local limit
    averaged over that same second, absent when unknown."""
    if second is None:
        second = max(0, int(elapsed) - 1)
    phase = int(second // PHASE_SECONDS) + 1
    mark = f"\n\u25c6 the load shifted at {second} s" if shift_at(second) else ""
    t = Table(title=f"rgd up: {len(daemons)} daemons, t={elapsed:.0f}s (Ctrl-C to stop)",
              caption=f"messages/s in second {second}-{second + 1} (phase {phase}){mark}")
    t.add_column("group")
    t.add_column("daemon")
    for name in ("demand", "limit", "admitted"):
        t.add_column(name, justify="right")
    for gi, g in enumerate(groups):
        rows = []
        for di, d in enumerate(daemons):
            lim = shares.get((g, d))
            rows.append((d, offered[(gi, di)], "-" if lim is None else f"{lim:.0f}", admitted[(gi, di)]))
        t.add_row(g, "all daemons", f"{sum(r[1] for r in rows):.0f}", f"{quota:.0f}",
                  f"{sum(r[3] for r in rows):.0f}", style="bold")
        for i, (d, o, limit, a) in enumerate(rows):
            t.add_row("", d, f"{o:.0f}", limit, f"{a:.0f}", end_section=i == len(rows) - 1)
    return t


def _table(groups: list[str], quota: float, daemons: list[DaemonProcess], stats: dict[tuple[int, int], StreamStats],
           limits: dict[int, dict[tuple[str, str], list[float]]], elapsed: float) -> Table:
    """The last completed second: its demand, admitted and mean limit."""
    second = max(0, int(elapsed) - 1)
    offered = {k: st.offered.get(second, 0) for k, st in stats.items()}
    admitted = {k: st.admitted.get(second, 0) for k, st in stats.items()}
    shares = {k: sum(v) / len(v) for k, v in limits.get(second, {}).items() if v}
    return status_table(groups, quota, [d.daemon_id for d in daemons], offered, admitted, shares, elapsed, second)


async def _sample_limits(groups: list[str], daemons: list[DaemonProcess], t0: float,
                         into: dict[int, dict[tuple[str, str], list[float]]]) -> None:
    """Each daemon's limit LIMIT_SAMPLES_PER_SECOND times a second, filed under the second of
    the load they were read in (until cancelled)."""
    while True:
        started = time.monotonic()
        shares = await asyncio.to_thread(_poll_shares, groups, daemons)
        second = int((started + time.monotonic()) / 2 - t0)
        per = into.setdefault(second, {})
        for key, value in shares.items():
            per.setdefault(key, []).append(value)
        await asyncio.sleep(max(0.0, 1.0 / LIMIT_SAMPLES_PER_SECOND - (time.monotonic() - started)))


def _poll_shares(groups: list[str], daemons: list[DaemonProcess]) -> dict[tuple[str, str], float]:
    shares: dict[tuple[str, str], float] = {}
    for g in groups:
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
    limits: dict[int, dict[tuple[str, str], list[float]]] = {}
    sampler = asyncio.create_task(_sample_limits(groups, daemons, t0, limits))
    console = _console()
    last_print = 0.0
    table = printed = None
    shown = -1
    with Live(console=console, auto_refresh=False) if console.is_terminal else _NoLive() as live:
        while not load.done() and not stop.is_set():
            # Just after a whole second of the load ends (and its last limit sample is in).
            await asyncio.sleep(max(0.05, math.floor(time.monotonic() - t0) + 1.15 - (time.monotonic() - t0)))
            elapsed = time.monotonic() - t0
            second = int(elapsed) - 1
            if second < 0 or second == shown:
                continue
            shown = second
            table = _table(groups, ns.quota, daemons, by_key, limits, elapsed)
            if isinstance(live, Live):  # (on a terminal)
                live.update(table, refresh=True)
            elif elapsed - last_print >= 5 or shift_at(second):  # CI or a pipe: every 5 s, and at each shift
                console.print(table)
                printed, last_print = table, elapsed
            limits.pop(second - 5, None)
    if table is not None and not console.is_terminal and printed is not table:
        console.print(table)  # a pipe gets the last state too, however short the run
    told = ", ".join(f"{g} {sum(sum(by_key[(gi, di)].admitted.values()) for di in range(n)):,}"
                     for gi, g in enumerate(groups))
    console.print(f"allowed answers the brokers got, in all: {told} (the report's totals count the same)",
                  highlight=False, soft_wrap=True)
    load.cancel()
    sampler.cancel()
    await asyncio.gather(load, sampler, return_exceptions=True)


class _NoLive:
    def __enter__(self) -> _NoLive:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


def _console() -> Console:
    """Rich's console; off a terminal (a pipe, a file, CI) 120 columns instead of 80,
    so the table's lines do not wrap."""
    return Console() if Console().is_terminal else Console(width=120)


def new_run_dir(parent: Path, now: datetime) -> Path:
    """A new directory `parent/<UTC time>` for one run, and `parent/latest` pointing at it.

    Runs never share a directory: a second run must not delete the first one's logs and
    report. Two runs in the same second get `-2`, `-3` ... suffixes."""
    parent.mkdir(parents=True, exist_ok=True)
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    run, n = parent / stamp, 1
    while True:
        try:
            run.mkdir()
            break
        except FileExistsError:
            n += 1
            run = parent / f"{stamp}-{n}"
    link = parent / f".latest-{os.getpid()}"
    link.unlink(missing_ok=True)
    link.symlink_to(run.name)
    os.replace(link, parent / "latest")
    return run


def report_lines(summary: dict[str, Any], html_path: Path) -> list[str]:
    """What the fairness report found, in a few sentences (summary.json has it all)."""
    dims = [(g, dim, d) for g, doc in sorted(summary["groups"].items()) for dim, d in doc["dims"].items()]
    span = summary["span"]
    loss = summary["loss"]
    delay = summary["delay_ms"]
    lines = [f"fairness report: {html_path}",
             f"  {span['ticks']} ticks of {summary['grid_ms'] / 1000:g} s from the first report to the last, "
             f"{len(summary['daemons'])} daemons, {len(summary['groups'])} groups"]
    tolerance = summary.get("options", {}).get("tolerance", 0.05)
    for g, dim, d in dims:
        over = d.get("overshoot_ratio_max") or 0.0
        total = summary["groups"][g].get("totals", {}).get(f"{dim}_admitted")
        lines.append(
            f"  {g}: admitted {d['admitted_mean']:.0f}/s of {d['demand_mean']:.0f}/s demand"
            f"{'' if total is None else f' ({total:,} in all)'},"
            f" quota {d['quota_mean']:.0f}/s"
            f" (worst tick {over:.1%} over it; {d['ticks_over_quota']} ticks more than {tolerance:.0%} over);"
            f" Jain index of the daemons' shares {_num(d.get('jain_mean'), '.3f')} on average"
            f" (1 = each daemon got its max-min fair share)")
    source = summary.get("accounting", {}).get("source")
    if source and source != "tick accounting":
        lines.append(f"  totals: {source} (the logs carry no tick accounting for some daemons)")
    lines.append(f"  reports: {loss['lost']} of {loss['expected']} lost; delay from publish to arrival at a receiver:"
                 f" median {_num(delay['p50'], '.0f')} ms, mean {_num(delay['mean'], '.0f')} ms")
    return lines


def _num(x: Any, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def run_showcase(ns: argparse.Namespace) -> int:
    console = _console()
    # SIGTERM before the live loop installs its handler: unwind (the finally below stops
    # the daemons and the broker) instead of dying and leaving them running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = new_run_dir(Path(ns.workdir).absolute(), datetime.now(UTC))
    (work / "logs").mkdir(parents=True)
    broker = start_or_join(work / "broker")
    groups = [f"tenant-{chr(ord('a') + i)}" for i in range(ns.groups)]
    config = work / "groups.yaml"
    config.write_text(yaml.safe_dump({
        "resourcegroups": {g: {"publishRateInMsgs": ns.quota, "publishRateInBytes": -1} for g in groups},
        "tenants": {g: g for g in groups},
    }))
    daemons: list[DaemonProcess] = []
    codes: list[int | None] = []
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
                      f"groups {', '.join(groups)} at {ns.quota:.0f} msg/s each; this run's files in {work}",
                      soft_wrap=True)
        console.print(LEGEND.format(demand=1.2 * ns.quota, phase=PHASE_SECONDS), soft_wrap=True, highlight=False)
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
        for d, code in zip(daemons, codes):  # why, here: a CI run deletes the logs with its scratch
            if code not in (0, None):
                console.print(f"{d.daemon_id} ({d.log_path}), the end of its output:{d.log_tail(40)}",
                              markup=False, highlight=False, soft_wrap=True)
        return 1
    if not ns.no_report:
        try:
            from rgd.fairness import run_report
        except ImportError:
            console.print("fairness report skipped: install the spark extra (pip install 'rgd[spark]')")
            return 0
        console.print("fairness report: Spark replays the daemons' logs (about a minute) ...")
        summary = run_report(str(work / "logs"), str(work / "report"))
        for line in report_lines(summary, work / "report" / "report.html"):
            console.print(line, highlight=False, soft_wrap=True)
    return 0
