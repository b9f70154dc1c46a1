"""Probe: one of 3 daemons loses the broker for a while; its brokers keep asking it.

    sudo .venv/bin/python scripts/partition_probe.py [--before 10] [--cut 20] [--after 10] [--out figures.json]
        [--daemon-arg=--cluster-process]

The topology (tests/support/netns.py; needs root and iproute2):

    host namespace                                   test namespace
    pulsar-lite on V0 (one port, nothing else)  ---- pair 0 (cut) ---  daemon d3's Pulsar client
    daemons d1, d2 on 127.0.0.1, Pulsar via V0
    load generator: d1, d2 on loopback,         ---- pair 1 (never cut) ---  d3's HTTP, on its end
                    d3 over pair 1

V0 is the host end of veth pair 0 (a TEST-NET-1 address): the broker's only listener. d3
runs inside the namespace (`ip netns exec`) and reaches the broker over pair 0 alone; its
HTTP listens on its end of pair 1, where the load generator that plays its brokers asks
it. Setting the namespace's end of pair 0 down cuts d3 off the topic while its brokers
still reach it, as a node that loses the broker network but not its local brokers; d1 and
d2 reach the broker on V0 locally and do not notice.

Group `probe`, quota `--quota` msg/s (100), `--offered` msg/s (60) asked of each daemon in
one-message acquires on a fixed schedule (scripts/fault_probe.py, bounded in time); every
allowed answer is counted per daemon per wall-clock second. After `--before` seconds of
load, pair 0 goes down for `--cut` seconds, then up, and the load goes on `--after`
seconds. Printed: per whole second the cluster's admitted total and each daemon's, and the
sum of the local limits the daemons held (their /v1/quota, sampled every 0.2 s); the
worst second over the quota in % (before, during, after the cut; a second that straddles
the cut or the heal counts where most of it is); how long after the cut
d3's /readyz said not ready, and what it said; when it was ready again; how long after the
heal every daemon's share was within 10 % of quota / 3 for every later second; when d3 last
admitted during the cut and when a peer first took more than a fair share. Then the
command that made the figures. Everything it starts is stopped and removed at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fault_probe import AcquireLoad, write_groups  # noqa: E402
from probe_hung_broker import Watcher  # noqa: E402

from rgd.devtools.daemon_process import DaemonProcess  # noqa: E402
from rgd.transport.embedded_broker import start_or_join  # noqa: E402
from tests.support.netns import Netns  # noqa: E402

DAEMONS = ("d1", "d2", "d3")
CUT = "d3"
OVER = 0.10  # the bound: no second above quota + 10 %
FAIR = 0.10  # a fair share: within 10 % of quota / 3


@dataclass
class Figures:
    command: str
    quota: float
    offered_per_daemon: float
    cut_at_s: float  # since the load started
    heal_at_s: float
    # Per whole second: t (since the load started), total, d1, d2, d3 admitted, and `limits`:
    # the sum of the daemons' local limits (each one's last sample in the second; -1 if one
    # did not answer), the live counterpart of the simulator's invariant check.
    seconds: list[dict[str, float]] = field(default_factory=list)
    worst_over_pct: dict[str, float] = field(default_factory=dict)  # before / during / after: max second vs quota
    not_ready_after_s: float | None = None  # since the cut; None: never within the cut
    not_ready_says: dict[str, object] = field(default_factory=dict)
    ready_again_after_s: float | None = None  # since the heal
    # The lease, live (docs/design/protocol.md, P4): since the cut, when the cut daemon last
    # admitted during the cut, and when a peer first held more than a fair share (it evicted
    # the cut daemon and took its share; its /v1/quota, sampled every 0.2 s). The first must
    # come before the second.
    cut_admitted_until_s: float | None = None
    peers_took_share_after_s: float | None = None
    fair_after_heal_s: float | None = None  # None: not fair to the end


def fair_from(seconds: list[dict[str, float]], heal: float, share: float) -> float | None:
    """Seconds from the heal to the start of the first whole second (the one the heal fell in
    at the earliest) from which every later second has every daemon within FAIR of `share`."""
    start = None
    for row in seconds:
        if row["t"] + 1 <= heal:
            continue
        if all(abs(row[d] - share) <= FAIR * share for d in DAEMONS):
            start = row["t"] if start is None else start
        else:
            start = None
    return None if start is None else max(0.0, start - heal)


def analyse(fig: Figures, counts: dict[str, dict[int, int]], t0: float, t_end: float, cut: float, heal: float,
            watcher: Watcher, cut_admitted_at: list[float]) -> None:
    first, last = math.ceil(t0), math.floor(t_end) - 1  # whole seconds only
    limits = watcher.limit_sums(first, last + 1)
    for i, s in enumerate(range(first, last + 1)):
        row = {"t": s - t0, **{d: float(counts[d].get(s, 0)) for d in DAEMONS}}
        row["total"] = sum(row[d] for d in DAEMONS)
        row["limits"] = float(limits[i])
        fig.seconds.append(row)
    for phase, lo, hi in (("before", 0.0, cut), ("during", cut, heal), ("after", heal, math.inf)):
        rows = [r for r in fig.seconds if lo <= r["t"] + 0.5 < hi]  # a second counts where most of it is
        if rows:
            fig.worst_over_pct[phase] = round(100 * (max(r["total"] for r in rows) / fig.quota - 1), 1)
    cut_wall, heal_wall = t0 + cut, t0 + heal
    samples = [(t, d, status, doc) for t, d, status, doc, _, _ in watcher.samples]
    for t, d, status, doc in samples:
        if d == CUT and cut_wall <= t < heal_wall and status != 200:
            fig.not_ready_after_s = round(t - cut_wall, 2)
            fig.not_ready_says = {k: doc.get(k) for k in ("ready", "broker_connected", "broker_unresponsive",
                                                          "members", "lease") if k in doc}
            fig.not_ready_says["status"] = status
            break
    for t, d, status, _ in samples:
        if d == CUT and t >= heal_wall and status == 200:
            fig.ready_again_after_s = round(t - heal_wall, 2)
            break
    fair = fair_from(fig.seconds, heal, fig.quota / len(DAEMONS))
    fig.fair_after_heal_s = None if fair is None else round(fair, 2)
    during = [t for t in cut_admitted_at if cut_wall <= t < heal_wall]
    fig.cut_admitted_until_s = round(max(during) - cut_wall, 2) if during else None
    took = [t for t, d, limit in watcher.limits
            if d != CUT and cut_wall <= t < heal_wall and limit > (1 + FAIR) * fig.quota / len(DAEMONS)]
    fig.peers_took_share_after_s = round(min(took) - cut_wall, 2) if took else None


def run_probe(quota: float, offered: float, before: float, cut_for: float, after: float, tick: float,
              command: str, daemon_args: list[str] | None = None) -> Figures:
    work = Path(tempfile.mkdtemp(prefix="rgd-partition-"))
    config = write_groups(work / "groups.yaml", int(quota))
    topic = f"non-persistent://public/default/usage-{uuid.uuid4().hex[:8]}"
    total = before + cut_for + after
    with Netns(pairs=2) as ns:
        broker = start_or_join(work / "broker", host=ns.pairs[0].host_addr)
        daemons: list[DaemonProcess] = []
        try:
            for name in DAEMONS:
                inside = name == CUT
                d = DaemonProcess(
                    name, ["--pulsar-url", broker.url, "--config", str(config), "--topic", topic,
                           "--tick", str(tick), "--log-dir", str(work / "logs" / name), "--data-dir", str(work),
                           *(daemon_args or [])],
                    log_path=work / f"{name}.out",
                    host=ns.pairs[1].ns_addr if inside else "127.0.0.1",
                    wrap=ns.exec_prefix() if inside else [],
                ).start()
                daemons.append(d)
            for d in daemons:
                d.wait_ready()
            time.sleep(2 * tick)  # every daemon has heard every other
            loads = {d.daemon_id: AcquireLoad(d.host, d.port, "probe/ns", clients=2, rate=offered / 2)
                     for d in daemons}
            watcher = Watcher(daemons, total + 10)
            t0 = time.time()
            threads = [load.start(total) for load in loads.values()]
            watcher.start()
            time.sleep(max(0.0, t0 + before - time.time()))
            ns.cut(0)
            cut_at = time.time() - t0
            time.sleep(max(0.0, t0 + before + cut_for - time.time()))
            ns.heal(0)
            heal_at = time.time() - t0
            for t in threads:
                t.join(total + 30)
            t_end = t0 + total
            watcher.stop()
        finally:
            for d in daemons:
                d.stop()
            broker.stop()
    fig = Figures(command, quota, offered, round(cut_at, 2), round(heal_at, 2))
    counts = {name: dict(load.figures.admitted_per_second) for name, load in loads.items()}
    analyse(fig, counts, t0, t_end, cut_at, heal_at, watcher, loads[CUT].figures.admitted_at)
    return fig


def report(fig: Figures) -> str:
    lines = [f"quota {fig.quota:g} msg/s, {fig.offered_per_daemon:g} msg/s offered to each of {', '.join(DAEMONS)}; "
             f"{CUT} cut off the broker at {fig.cut_at_s:.1f} s, healed at {fig.heal_at_s:.1f} s", "",
             "  t(s)  total    d1    d2    d3  limits"]
    for r in fig.seconds:
        mark = " cut" if fig.cut_at_s < r["t"] + 1 and r["t"] < fig.heal_at_s else ""
        lines.append(f"{r['t']:6.1f} {r['total']:6.0f} {r['d1']:5.0f} {r['d2']:5.0f} {r['d3']:5.0f} "
                     f"{r['limits']:7.0f}{mark}")
    lines.append("")
    lines.append("worst second over the quota: " + ", ".join(f"{p} {v:+.1f} %" for p, v in fig.worst_over_pct.items()))
    said = json.dumps(fig.not_ready_says, sort_keys=True)
    lines.append(f"{CUT} not ready {fig.not_ready_after_s} s after the cut" if fig.not_ready_after_s is not None
                 else f"{CUT} never said not ready during the cut")
    if fig.not_ready_after_s is not None:
        lines.append(f"  /readyz said: {said}")
    lines.append(f"{CUT} ready again {fig.ready_again_after_s} s after the heal")
    lines.append(f"{CUT} admitted until {fig.cut_admitted_until_s} s after the cut; a peer held more than a fair "
                 f"share from {fig.peers_took_share_after_s} s")
    lines.append(f"fair shares (each within {FAIR:.0%} of {fig.quota / len(DAEMONS):.1f}) from "
                 f"{fig.fair_after_heal_s} s after the heal to the end" if fig.fair_after_heal_s is not None
                 else "shares never fair again to the end")
    lines += ["", f"command: {fig.command}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="partition_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--quota", type=float, default=100.0, help="the group's msg/s (default 100)")
    p.add_argument("--offered", type=float, default=60.0, help="msg/s offered to each daemon (default 60)")
    p.add_argument("--before", type=float, default=10.0, help="seconds of load before the cut (default 10)")
    p.add_argument("--cut", type=float, default=20.0, help="seconds the cut lasts (default 20)")
    p.add_argument("--after", type=float, default=10.0, help="seconds of load after the heal (default 10)")
    p.add_argument("--tick", type=float, default=1.0)
    p.add_argument("--out", help="also write the figures as JSON here")
    p.add_argument("--daemon-arg", action="append", default=[],
                   help="extra `rgd run` flag for every daemon (repeatable; --daemon-arg=--cluster-process)")
    ns = p.parse_args(argv)
    for name in ("quota", "offered", "before", "cut", "after", "tick"):
        value = getattr(ns, name)
        if not 0 < value <= 600:
            p.error(f"--{name}: expected a number in (0, 600], got {value:g}")
    from tests.support.netns import unavailable

    reason = unavailable()
    if reason is not None:
        print(f"partition_probe: {reason}", file=sys.stderr)
        return 2
    command = shlex.join([sys.executable, str(Path(__file__).relative_to(Path.cwd()) if Path(__file__).is_relative_to(
        Path.cwd()) else __file__), *(sys.argv[1:] if argv is None else argv)])
    fig = run_probe(ns.quota, ns.offered, ns.before, ns.cut, ns.after, ns.tick, command, ns.daemon_arg)
    print(report(fig), flush=True)
    if ns.out:
        Path(ns.out).write_text(json.dumps(asdict(fig), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
