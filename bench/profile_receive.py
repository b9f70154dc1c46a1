"""Where a daemon's event-loop time and memory go at PIP-82's scale, without the network.

    .venv/bin/python bench/profile_receive.py [--rounds 6] [--profile out.pstats] [--profile-from 1] [--top 25]
                                              [--trace] [--gc] [--gc-pacing]

Drives the real receive path (ClusterNode.receive: decode_report, check_plausible, the
usage map's fold), the tick (tick_report, upkeep) and the calculator (recompute_changed) of one ClusterNode
serving bench/scale_probe.py's 5 000 groups, with the probe's own payloads: 99 peers'
reports, every group in the first round, then a random 36 % each round; between ticks the
reacts (recompute of what changed, a report of a rise; `--reacts`, 19 as the daemon's) with the
brokers' usage of every group recorded once a round, as the probe feeds it. Prints per round
the CPU milliseconds of each phase (process time: other processes on a shared machine
stretch wall time, not this) and with --trace the traced memory (usage map and all); with --profile, the
cProfile of the whole run (the top functions by own time are printed as well).
With --gc, the garbage collector's pauses over the settled rounds, per generation (a full
collection walks the whole heap on the event loop that answers brokers); with --gc-pacing,
the node's heap is paced as `rgd run` paces it (rgd.daemon.gc_pacing: after each tick), and the
pacing step's own time is printed too. Compare `--gc` with `--gc --gc-pacing`.
To compare with an older revision, copy this file into that tree's bench/ and run it there.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_probe import Peer, _entry, layout

from rgd.cluster.node import ClusterNode, NodeConfig
from rgd.config.groups import ResourceGroup
from rgd.wire.usage_report_pb2 import UsageReport

try:
    from rgd.cluster.report_codec import group_key_bytes
except ImportError:  # a revision before the report index (copied into an older tree to compare)
    group_key_bytes = None
from sim.scale import group_name, namespace_name


class GcPauses:
    """The collector's automatic pauses, per generation, while `on` (a gc callback)."""

    def __init__(self) -> None:
        self.on = False
        self.pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self.on:
            self.pauses[info["generation"]].append(time.perf_counter() - self._started)

    def summary(self) -> str:
        return "; ".join(f"generation {g}: {len(p)} collections, {1000 * sum(p):.0f} ms in all, "
                         f"longest {1000 * max(p, default=0.0):.1f} ms" for g, p in self.pauses.items())


class BenchClock:
    """The node's clock (rgd.cluster.node.Clock) on a time the bench moves: `cell[0]` is now,
    and wall time goes with it as rgd.cluster.clock.WallClock's does (one offset)."""

    def __init__(self, cell: list[float]) -> None:
        self.cell = cell
        self.offset = time.time() - time.monotonic()

    def now(self) -> float:
        return self.cell[0]

    def wall_ms(self, at: float) -> int:
        return int(round((self.offset + at) * 1000))


def build(peers_n: int, per_daemon: int) -> tuple[ClusterNode, list[Peer], list[float]]:
    own, peer_groups = layout(peers_n, per_daemon)
    registry = {group_name(g): ResourceGroup(group_name(g), publish_msgs=10_000.0) for g in own}
    clock = [time.monotonic()]
    node = ClusterNode(NodeConfig("focus"), 1, BenchClock(clock), lambda: registry)
    for g in own:
        node.limiter.acquire(registry[group_name(g)], "publish", 1, 1000, namespace_name(g), now=clock[0])
    entries = {i: [[_entry(g, random.Random(f"peer:{i}:{v}:{g}")) for g in groups] for v in range(2)]
               for i, groups in peer_groups.items()}
    if group_key_bytes is None:
        return node, [Peer(i, entries[i], int(time.time() * 1000)) for i in peer_groups], clock
    keys = {i: [group_key_bytes(group_name(g)) for g in groups] for i, groups in peer_groups.items()}
    peers = [Peer(i, entries[i], keys[i], int(time.time() * 1000)) for i in peer_groups]
    return node, peers, clock


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="profile_receive", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--peers", type=int, default=99)
    p.add_argument("--groups", type=int, default=5000)
    p.add_argument("--profile", help="write the cProfile stats here (and print the top functions)")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--profile-from", type=int, default=0, metavar="ROUND",
                   help="profile from this round on (1: the steady state, without the first full reports)")
    p.add_argument("--reacts", type=int, default=19, help="reacts between ticks (the daemon's: 19, every 50 ms)")
    p.add_argument("--trace", action="store_true", help="trace memory (tracemalloc: slows every phase several times)")
    p.add_argument("--gc", action="store_true", help="print the garbage collector's pauses over the settled rounds")
    p.add_argument("--gc-pacing", action="store_true", help="pace the collector after each tick as `rgd run` does")
    ns = p.parse_args(argv)
    node, peers, clock = build(ns.peers, ns.groups)
    pauses = GcPauses() if ns.gc else None
    pacer = None
    pacing_steps: list[float] = []
    if ns.gc_pacing:
        from rgd.daemon.gc_pacing import GcPacer

        pacer = GcPacer()
        pacer.start()
    rng = random.Random("profile")
    prof = cProfile.Profile() if ns.profile else None
    if ns.trace:
        tracemalloc.start()
    print(f"$ {' '.join([sys.executable, *sys.argv])}")
    print("round  receive ms  (per report)  reacts ms  tick_report ms  recompute ms  map entries  traced MB  settled")
    steady: list[tuple[float, float, float, float]] = []
    registry = node.groups()
    names = sorted(registry)
    usage_rng = random.Random("profile-usage")
    demand = {n: usage_rng.uniform(50, 2000) for n in names}
    step = 1.0 / (ns.reacts + 1)

    def echo(parts: list[UsageReport]) -> None:
        for part in parts:
            node.receive(part.SerializeToString(), {}, clock[0])
    for r in range(ns.rounds):
        # Built right before each round, so their publish times are now: the measured delivery
        # delay stays small and the node settles after the first round, as a live daemon does
        # (built all in advance, the later rounds' reports looked seconds old, the node stayed
        # unsettled, and the calculator took its cheap floor-only path: not what runs live).
        # Each peer's report after the first is a change on top of its previous one (base), and
        # acknowledges our latest report, as live peers do: so our lease holds and the calculator
        # runs its real path (fields of a second serialized header merge into the first).
        reports = [peer.report(r, 0.36, rng) + UsageReport(
            base=peer.sequence - 1 if r else 0, ack_members=[node.tag] if node.own.sequence else [],
            ack_sequences=[node.own.sequence] if node.own.sequence else []).SerializeToString() for peer in peers]
        if pauses is not None:
            pauses.on = r >= 2  # the settled rounds, as the phase figures below
        clock[0] += step
        if prof and r >= ns.profile_from:
            prof.enable()
        t0 = time.process_time()
        for data in reports:
            rec = node.receive(data, {}, clock[0])
            assert rec.accepted, rec.reason
        t1 = time.process_time()
        react_s = 0.0
        for i in range(ns.reacts):
            if i == 2:  # the brokers' usage of every group, once a second, as scale_probe feeds it (untimed)
                if prof:
                    prof.disable()
                for n in names:
                    demand[n] *= 1.0 + usage_rng.uniform(-0.08, 0.08)
                    node.limiter.record_usage(registry[n], "publish", int(demand[n]), int(demand[n]) * 1000,
                                              f"{n}/ns")
                if prof and r >= ns.profile_from:
                    prof.enable()
            started = time.process_time()
            node.recompute_changed(clock[0])  # what a react does besides folding: recompute, report a rise
            sent = node.react(clock[0])
            react_s += time.process_time() - started
            echo(sent)
            clock[0] += step
        t2 = time.process_time()
        out = node.tick_report(clock[0])
        t3 = time.process_time()
        echo(out.parts)  # our report back from the topic (untimed): the echo that keeps our lease
        echo_s = time.process_time() - t3
        node.upkeep(clock[0])
        node.recompute_changed(clock[0])  # what the tick recomputes (what changed)
        t4 = time.process_time() - echo_s
        if prof:
            prof.disable()
        if pacer is not None:  # its own collection is its step's time, not an automatic pause
            if pauses is not None:
                pauses.on = False
            started = time.perf_counter()
            pacer.after_tick()
            if r >= 2:
                pacing_steps.append(time.perf_counter() - started)
        if r >= 2:
            steady.append((t1 - t0, react_s, t3 - t2, t4 - t3))
        entries = sum(len(e) for e in node.usage_map.groups.values())
        settled = node.settled(clock[0]) if hasattr(node, "settled") else True
        print(f"{r:5d}  {1000 * (t1 - t0):10.1f}  {1000 * (t1 - t0) / len(reports):11.2f}  {1000 * react_s:9.1f}  "
              f"{1000 * (t3 - t2):14.1f}  {1000 * (t4 - t3):12.1f}  {entries:11d}  "
              f"{tracemalloc.get_traced_memory()[0] / 1e6 if ns.trace else float('nan'):9.1f}  {settled}")
    if steady:
        # The least of each phase over the rounds after the second (settled): on a shared machine the
        # least is the figure other processes disturbed least (compare runs by these).
        phases = ("receive", "reacts", "tick_report", "recompute")
        mins = [1000 * min(x[i] for x in steady) for i in range(4)]
        medians = [1000 * sorted(x[i] for x in steady)[len(steady) // 2] for i in range(4)]
        total = [1000 * sum(x) for x in steady]
        print("rounds 2..: least " + ", ".join(f"{p} {m:.1f}" for p, m in zip(phases, mins))
              + " ms; median " + ", ".join(f"{m:.1f}" for m in medians)
              + f" ms; all four per round: median {sorted(total)[len(total) // 2]:.0f} ms CPU")
    if pauses is not None:
        pauses.on = False
        print(f"garbage collector, rounds 2..{ns.rounds - 1}: {pauses.summary()}")
    if pacing_steps:
        print(f"gc pacing after each tick (collect what is not frozen, freeze the rest): longest "
              f"{1000 * max(pacing_steps):.1f} ms, {1000 * sum(pacing_steps) / len(pacing_steps):.1f} ms a tick; "
              f"{pacer.stats.full_collections} full collections of the frozen heap")
    if prof:
        prof.dump_stats(ns.profile)
        pstats.Stats(ns.profile).sort_stats("tottime").print_stats(ns.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
