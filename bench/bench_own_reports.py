"""What a daemon's own reports cost when brokers ask for few of the groups it serves.

    .venv/bin/python bench/bench_own_reports.py [--groups 5000] [--asks 200] [--ticks 10]
                                                [--rounds 3] [--baseline REV]

One ClusterNode (no network) serving `--groups` groups in two kinds (publish asks, dispatch
usage recorded), every one of them used once, then `--asks` single asks a second spread round
robin over the groups, as bench/scale_probe.py's brokers ask: most groups sit idle in most
ticks. Per tick (1 s, reacts every 50 ms as the daemon's) it times, in process CPU time, the
tick (tick_report, upkeep, recompute_changed) and the 19 reacts between ticks (recompute of
what changed, early reports), medians over the ticks after two of warm-up. Their cost should
follow what was asked since the last pass, not the number of groups served.

With `--baseline REV` the same measurement runs against revision REV's tree (`git archive`
into a temporary directory), alternating round by round with this tree, and the ratios are
printed (baseline / this tree: > 1 means this tree spends less).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from revision_rounds import measure_rounds

EPOCH = 1_767_225_600.0
TICK = 1.0
REACT = 0.05


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def wall_ms(self, at: float) -> int:
        return int(round((EPOCH + at) * 1000))


def measure(groups: int, asks: int, ticks: int) -> dict[str, float]:
    """CPU milliseconds per tick of the tick and of the reacts between ticks (medians)."""
    from rgd.cluster.node import ClusterNode, NodeConfig
    from rgd.config.groups import ResourceGroup

    clock = _Clock()
    registry = {f"g{i:05d}": ResourceGroup(f"g{i:05d}", publish_msgs=1000.0, dispatch_bytes=1e6)
                for i in range(groups)}
    node = ClusterNode(NodeConfig("a", TICK, react_seconds=REACT), 1, clock, lambda: registry)
    names = sorted(registry)
    for name in names:
        node.limiter.acquire(registry[name], "publish", 1, 10, "t/ns")
        node.limiter.record_usage(registry[name], "dispatch", 1, 10, "t/ns")
    steps_per_tick = int(round(TICK / REACT))
    per_step = asks / steps_per_tick
    tick_ms: list[float] = []
    react_ms: list[float] = []
    react_sum = 0.0
    owed = 0.0
    asked = 0
    for step in range(1, (ticks + 2) * steps_per_tick + 1):
        clock.t = round(step * REACT, 9)
        owed += per_step
        while owed >= 1.0:
            node.limiter.acquire(registry[names[asked % groups]], "publish", 1, 10, "t/ns")
            asked += 1
            owed -= 1.0
        started = time.process_time()
        warm = step > 2 * steps_per_tick
        if step % steps_per_tick == 0:
            node.tick_report(clock.t)
            node.upkeep(clock.t)
            node.recompute_changed(clock.t)
            if warm:
                tick_ms.append(1000 * (time.process_time() - started))
                react_ms.append(react_sum)
            react_sum = 0.0
        else:
            node.recompute_changed(clock.t)
            node.react(clock.t)
            react_sum += 1000 * (time.process_time() - started)
    return {"tick_ms": statistics.median(tick_ms), "reacts_ms": statistics.median(react_ms)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_own_reports", description=__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, default=5000, help="groups served (two kinds each)")
    p.add_argument("--asks", type=int, default=200, help="single asks a second, round robin over the groups")
    p.add_argument("--ticks", type=int, default=10, help="ticks measured per round (after two of warm-up)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (alternating with the baseline's)")
    p.add_argument("--baseline", metavar="GIT_REV", help="also measure this revision's tree, round by round")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if not (1 <= a.groups <= 100_000 and 0 <= a.asks <= 100_000 and 1 <= a.ticks <= 100 and 1 <= a.rounds <= 20):
        p.error("--groups must be 1..100000, --asks 0..100000, --ticks 1..100 and --rounds 1..20")
    if a.inner:
        print(json.dumps(measure(a.groups, a.asks, a.ticks)))
        return 0
    command = (f"python bench/bench_own_reports.py --groups {a.groups} --asks {a.asks} --ticks {a.ticks} "
               f"--rounds {a.rounds}")
    print(f"$ {command}" + (f" --baseline {a.baseline}" if a.baseline else ""))
    inner = ["--groups", str(a.groups), "--asks", str(a.asks), "--ticks", str(a.ticks)]
    ours, theirs = measure_rounds(Path(__file__).resolve(), inner, a.rounds, a.baseline)
    rows = [("this tree", ours)] + ([(f"baseline {a.baseline}", theirs)] if theirs else [])
    med: dict[str, dict[str, float]] = {}
    for label, runs in rows:
        med[label] = {k: statistics.median(r[k] for r in runs) for k in ("tick_ms", "reacts_ms")}
        m = med[label]
        print(f"{label}: {a.groups} groups x 2 kinds, {a.asks} asks/s: tick {m['tick_ms']:.1f} ms, "
              f"reacts {m['reacts_ms']:.1f} ms per tick (CPU, median of {a.rounds} rounds)")
    if theirs:
        b, n = med[f"baseline {a.baseline}"], med["this tree"]
        ratio = {k: f"{b[k] / n[k]:.2f}x" if n[k] > 0 else "- (nothing measured)" for k in b}
        print(f"baseline / this tree: tick {ratio['tick_ms']}, reacts {ratio['reacts_ms']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
