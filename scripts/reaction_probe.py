"""Probe how fast real daemons meet a change: the first second of a new group, and `rgd up`'s rotating load.

    .venv/bin/python scripts/reaction_probe.py [--seconds 42] [--tick 1.0] [--out probe.json]

Starts an embedded pulsar-lite broker and real `rgd run` processes on loopback, offers
load over HTTP (`/v1/acquire`, one ask per message, batches every 50 ms) and counts
what the daemons admitted from their answers, in 50 ms bins. It prints:

1. lone: one daemon that has listened to the topic for a tick and heard no peer; a new
   100 msg/s group offered 200 msg/s: messages admitted in the first second of load;
2. new group: 3 daemons; a new 300 msg/s group offered 120 msg/s on each daemon (even
   demand, 1.2 x the quota): share of the quota used in the first second;
3. rotating load: `rgd up`'s load (two 300 msg/s groups, 360 msg/s offered in a split
   that changes every 10 s, rgd/devtools/showcase.py). After each shift, every daemon's admission
   over the half second [shift + 0.5 s, shift + 1 s) against its max-min fair share, and
   how long after the shift every later half-second window (up to 5 s) stays within 10 %
   of fair; and the largest admission in any 1-second window (sliding by 50 ms) over the
   quota, counting the asks sent and answered inside the window (surely decided in it),
   and beside it counting by send time alone (which also holds asks decided up to an
   answer latency after the window).

The fair shares come from this script's own water-filling (bisection on the water level,
not the daemon's code). Everything it starts is stopped at the end, also on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml

from rgd.devtools.daemon_process import DaemonProcess
from rgd.devtools.showcase import PHASE_SECONDS, demand_weights
from rgd.transport.embedded_broker import start_or_join

BIN = 0.05  # seconds per bin of admitted counts
STEP = 0.05  # the load generator asks every this many seconds
TOLERANCE = 0.10
ROTATING_QUOTA = 300.0
GROUPS = ("tenant-a", "tenant-b")


def fair_shares(quota: float, demands: list[float]) -> list[float]:
    """Max-min fair split by bisection on the water level w: share_i = min(d_i, w)."""
    if sum(demands) <= quota:
        return list(demands)
    lo, hi = 0.0, max(demands)
    for _ in range(100):
        w = (lo + hi) / 2
        if sum(min(d, w) for d in demands) > quota:
            hi = w
        else:
            lo = w
    return [min(d, lo) for d in demands]


def _bins() -> dict[int, int]:
    return defaultdict(int)


@dataclass
class Counts:
    """Admitted and offered messages per (daemon, group) per 50 ms bin since t0."""

    admitted: dict[tuple[str, str], dict[int, int]] = field(default_factory=lambda: defaultdict(_bins))
    offered: dict[tuple[str, str], dict[int, int]] = field(default_factory=lambda: defaultdict(_bins))
    first_ask: dict[tuple[str, str], float] = field(default_factory=dict)
    # Admitted by (bin the ask was sent in, bin its answer came back in): the daemon decided
    # somewhere between the two, so only asks sent and answered inside a window were surely
    # decided inside it (see `decided_in`).
    spans: dict[tuple[str, str], dict[tuple[int, int], int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int)))

    def admitted_in(self, key: tuple[str, str], start: float, end: float) -> int:
        lo, hi = int(round(start / BIN)), int(round(end / BIN))
        series = self.admitted.get(key, {})
        return sum(series.get(b, 0) for b in range(lo, hi))

    def decided_in(self, key: tuple[str, str], start: float, end: float) -> int:
        """Admitted by asks sent at or after `start` and answered before `end`: a lower bound
        of what the daemon admitted within [start, end), and a tight one on a quiet machine.
        Binned by send time alone, a window also counts asks decided up to one answer latency
        after it ends: on a busy 2-core machine a stalled daemon that answers a backlog at
        once puts more than a second of refill into a 1-second window."""
        lo, hi = int(round(start / BIN)), int(round(end / BIN))
        return sum(n for (sent, back), n in self.spans.get(key, {}).items() if sent >= lo and back < hi)


async def offer(session: aiohttp.ClientSession, url: str, key: tuple[str, str], namespace: str,
                rate: Callable[[float], float], t0: float, until: float, counts: Counts) -> None:
    owed = 0.0
    next_at = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= until:
            return
        owed += max(0.0, rate(now - t0)) * STEP
        n = min(int(owed), 1000)
        owed -= n
        if n:
            b = int((now - t0) / BIN)
            counts.first_ask.setdefault(key, now - t0)
            counts.offered[key][b] += n
            ask = {"namespace": namespace, "kind": "publish", "messages": 1, "bytes": 100}
            try:
                async with session.post(url + "/v1/acquire", json={"requests": [ask] * n}) as resp:
                    if resp.status == 200:
                        results = (await resp.json())["results"]
                        allowed = sum(1 for r in results if r["allowed"])
                        counts.admitted[key][b] += allowed
                        counts.spans[key][(b, int((time.monotonic() - t0) / BIN))] += allowed
            except (TimeoutError, aiohttp.ClientError):
                pass
        next_at += STEP
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def run_load(streams: list[tuple[str, tuple[str, str], str, Callable[[float], float]]], seconds: float,
                   counts: Counts) -> float:
    """Drive every (url, key, namespace, rate) for `seconds`; returns t0 (monotonic)."""
    t0 = time.monotonic()
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=5)) as session:
        await asyncio.gather(*(offer(session, url, key, ns, rate, t0, t0 + seconds, counts)
                               for url, key, ns, rate in streams))
    return t0


def first_second(counts: Counts, keys: list[tuple[str, str]]) -> int:
    start = min(counts.first_ask[k] for k in keys if k in counts.first_ask)
    return sum(counts.admitted_in(k, start, start + 1.0) for k in keys)


def rotating_figures(counts: Counts, daemons: list[str], seconds: float) -> dict:
    out: dict = {"shifts": [], "worst_window_over_quota_pct": None, "worst_sent_window_over_quota_pct": None}
    worst = worst_sent = 0.0
    n = len(daemons)
    for gi, group in enumerate(GROUPS):
        keys = [(d, group) for d in daemons]
        last_bin = int(seconds / BIN) - int(1.0 / BIN)
        for b in range(0, last_bin):
            total = sum(counts.decided_in(k, b * BIN, b * BIN + 1.0) for k in keys)
            worst = max(worst, total / ROTATING_QUOTA)
            sent = sum(counts.admitted_in(k, b * BIN, b * BIN + 1.0) for k in keys)
            worst_sent = max(worst_sent, sent / ROTATING_QUOTA)
        shift = PHASE_SECONDS
        while shift + 5.0 <= seconds:
            phase = int(shift // PHASE_SECONDS)
            demands = [1.2 * ROTATING_QUOTA * w for w in demand_weights(n, phase, gi)]
            fair = fair_shares(ROTATING_QUOTA, demands)
            at_half = [2.0 * counts.admitted_in(k, shift + 0.5, shift + 1.0) for k in keys]
            settled = None
            t = shift
            while t + 0.5 <= shift + 5.0 + 1e-9:
                ok_from_here = True
                u = t
                while u + 0.5 <= shift + 5.0 + 1e-9:
                    rates = [2.0 * counts.admitted_in(k, u, u + 0.5) for k in keys]
                    if any(abs(r - f) > TOLERANCE * f for r, f in zip(rates, fair)):
                        ok_from_here = False
                        break
                    u += BIN
                if ok_from_here:
                    settled = round(t + 0.5 - shift, 2)  # the first good window ends here
                    break
                t += BIN
            out["shifts"].append({
                "group": group, "at_s": shift, "demand": [round(d) for d in demands],
                "fair": [round(f, 1) for f in fair], "admitted_rate_0.5_to_1s": [round(r) for r in at_half],
                "within_10pct_at_0.5_to_1s": all(abs(r - f) <= TOLERANCE * f for r, f in zip(at_half, fair)),
                "settled_after_s": settled,
            })
            shift += PHASE_SECONDS
    out["worst_window_over_quota_pct"] = round(100.0 * (worst - 1.0), 1)
    out["worst_sent_window_over_quota_pct"] = round(100.0 * (worst_sent - 1.0), 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="reaction_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=42.0, help="length of the rotating load (>= 15)")
    p.add_argument("--tick", type=float, default=1.0)
    p.add_argument("--out", help="also write the figures as JSON here")
    ns = p.parse_args(argv)
    if ns.seconds < 15:
        p.error("--seconds must be >= 15 (one shift and 5 s after it)")
    work = Path(tempfile.mkdtemp(prefix="rgd-probe-"))
    config = work / "groups.yaml"
    groups = {"lone": 100.0, "fresh": 300.0, **{g: ROTATING_QUOTA for g in GROUPS}}
    config.write_text(yaml.safe_dump({
        "resourcegroups": {g: {"publishRateInMsgs": q} for g, q in groups.items()},
        "tenants": {g: g for g in groups},
    }))
    broker = start_or_join(work / "broker")
    daemons: list[DaemonProcess] = []
    figures: dict = {"tick_s": ns.tick, "workdir": str(work)}

    def start(name: str) -> DaemonProcess:
        d = DaemonProcess(name, ["--pulsar-url", broker.url, "--config", str(config), "--tick", str(ns.tick),
                                 "--log-dir", str(work / "logs" / name), "--data-dir", str(work)],
                          log_path=work / f"{name}.out").start()
        daemons.append(d)
        return d

    try:
        d1 = start("d1")
        d1.wait_ready()
        time.sleep(1.5 * ns.tick)  # it has heard the topic for a tick: no peer
        counts = Counts()
        asyncio.run(run_load([(d1.url, ("d1", "lone"), "lone/x", lambda _t: 200.0)], 2.0, counts))
        figures["lone_first_second_msgs"] = first_second(counts, [("d1", "lone")])
        print(f"lone daemon, new 100 msg/s group offered 200 msg/s: {figures['lone_first_second_msgs']} msgs "
              "admitted in the first second", flush=True)

        for name in ("d2", "d3"):
            start(name)
        for d in daemons:
            d.wait_ready()
        time.sleep(2.0 * ns.tick)  # every daemon has heard every other
        names = [d.daemon_id for d in daemons]
        counts = Counts()
        asyncio.run(run_load([(d.url, (d.daemon_id, "fresh"), "fresh/x", lambda _t: 120.0) for d in daemons],
                             2.0, counts))
        used = first_second(counts, [(n, "fresh") for n in names]) / groups["fresh"]
        figures["new_group_first_second_used_pct"] = round(100 * used, 1)
        print(f"3 daemons, new 300 msg/s group, 120 msg/s offered on each: {100 * used:.1f} % of the quota used "
              "in the first second", flush=True)

        counts = Counts()
        streams = []
        for gi, group in enumerate(GROUPS):
            for di, d in enumerate(daemons):
                def rate(t: float, di: int = di, gi: int = gi) -> float:
                    return 1.2 * ROTATING_QUOTA * demand_weights(len(daemons), int(t // PHASE_SECONDS), gi)[di]
                streams.append((d.url, (d.daemon_id, group), f"{group}/x", rate))
        asyncio.run(run_load(streams, ns.seconds, counts))
        rot = rotating_figures(counts, names, ns.seconds)
        figures["rotating"] = rot
        for s in rot["shifts"]:
            print(f"shift at {s['at_s']:.0f}s {s['group']}: demand {s['demand']} fair {s['fair']} admitted/s over "
                  f"[+0.5, +1.0) {s['admitted_rate_0.5_to_1s']} within 10 %: {s['within_10pct_at_0.5_to_1s']}; "
                  f"every later 0.5 s window within 10 % from {s['settled_after_s']} s after the shift", flush=True)
        ok = sum(s["within_10pct_at_0.5_to_1s"] for s in rot["shifts"])
        print(f"rotating load: {ok}/{len(rot['shifts'])} shifts within 10 % of fair over [+0.5 s, +1 s); "
              f"worst 1-second window {rot['worst_window_over_quota_pct']:+.1f} % against the quota "
              f"(by send time alone {rot['worst_sent_window_over_quota_pct']:+.1f} %)")
    finally:
        for d in daemons:
            d.stop()
        broker.stop()
    if ns.out:
        Path(ns.out).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
