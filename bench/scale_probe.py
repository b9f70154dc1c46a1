"""Live probe at PIP-82's scale: one real daemon serving 5 000 groups among 99 busy peers.

    .venv/bin/python bench/scale_probe.py [--seconds 40] [--cpu 1] [--out probe.json]

PIP-82 sizes resource groups for 100 brokers and 100 000 namespaces, 5 000 per
broker. This probe puts one real `rgd run` process (its own process, pinned to one
core) in that cluster: the embedded pulsar-lite broker, a config of the 5 000 groups
it serves (sim/scale.py's layout: 100 daemons, 100 000 groups, each active on 5), and
99 simulated peers publishing PIP-82-sized reports on the usage topic every second:
all their 5 000 groups in the first round (base 0: the whole state, and again after a
report of the daemon that does not acknowledge them, as rgd senders restate), then a random
share (`--sent-share`, 36 % as PIP-82 suppression leaves in `python -m sim scale`) on
top of their previous report (base = its sequence), each acknowledging the daemon's
latest report the probe's reader saw, as acknowledged rgd peers do (without the
acknowledgements the daemon would count every peer as holding nothing of its state and
restate every group in every report). Peers' reports are real UsageReport protobufs
built once (two value sets, alternating, so figures change) with a fresh header each
round and the entries' index (`group_keys`, as rgd senders fill it); they reach the
daemon exactly as a peer's would.

Meanwhile brokers ask the daemon at a fixed rate (`--ask-rate` single asks per
second over HTTP, round robin over its groups), from a process of their own on the
other cores (not beside the peers' publishing threads: their GIL delayed asks). An
ask's latency is counted from when it was due, not from when it was sent, so a
client held up by a stalled daemon cannot hide the stall (a timed-out ask counts as its timeout). It prints, against
issue 44's bounds (the CPU of the daemon's processes per second over the load, acquire p99, RSS):
- acquire latency p50 / p99 / max while the peers publish;
- the daemon's work per tick on its event loop: rgd_tick_seconds (mean) plus, where the
  daemon exports it, rgd_react_seconds (folding peers' reports between ticks, early
  reports, recomputing what changed) summed per tick; with `--daemon-arg=--cluster-process`
  (or `--daemon-arg=--cluster-thread`) those are the cluster half's, and what is checked
  against the bound is the serving loop's own work besides answering (counts handed over,
  limits applied, garbage collection: with a cluster thread every collection in the process,
  which stops both threads); the CPU per tick of each process (from /proc) is printed too;
- the daemon's RSS (max over the run, sampled each second from /proc), its processes summed,
  and beside it their PSS summed (shared library pages counted once);
- the daemon's own report bytes: the first report, and the mean per tick after it,
  as published (compression off) and as LZ4 / ZSTD would carry them (measured on the
  captured payloads with the same codecs the Pulsar client uses, when installed);
- how long /metrics took to answer (scraped every 15 s, as a Prometheus would);
- to tell the machine from the daemon: the daemon's CPU each second (means of 5 s), where
  its ticks fall in the peers' rounds, and a fixed piece of Python timed on its core before
  and after the run.
The daemon's core is its own: the broker, the peers' publishing and the load run on the
other cores. Runs of one tree differ by ~5 % in CPU on this machine: compare several runs,
or a baseline in the same run. (Runs that differed by 15 % from the first second on were
the daemon's: its first round of reports folded 4 000 groups too many, rgd.cluster.report_codec.FoldScope.)
Everything it starts is stopped at the end, also on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pulsar
import yaml

from rgd.cluster.report_builder import drop_silent_kinds
from rgd.cluster.report_codec import group_key_bytes
from rgd.cluster.usage_map import member_tag
from rgd.config.settings import DEFAULT_TOPIC
from rgd.devtools.daemon_process import DaemonProcess
from rgd.transport.embedded_broker import start_or_join
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage, UsageReport
from sim.scale import ScaleSpec, daemon_id, group_name, members_of, namespace_name

# The bounds of issue 44 (Done when): acquire p99, the CPU of the daemon's processes per
# second (the DaemonSet's request: 100m), RSS; the max and the event loop's work per tick
# are issue 14's, kept as context.
P99_MS = 10.0
MAX_MS = 100.0
CPU_MS_PER_S = 100.0
TICK_WORK_MS = 100.0
RSS_MB = 128.0
FIRST_REPORT_KB = 280.0
TICK_REPORT_KB = 100.0
ASK_TIMEOUT_S = 10.0
# What the daemon published and folded, counted over the run: why its own reports weigh what they do.
COUNTERS = ("rgd_reports_published_total", "rgd_reports_early_total", "rgd_evictions_total",
            "rgd_reports_lost_total", "rgd_reports_received_total", "rgd_reports_rejected_total")
SCRAPE_EVERY_S = 15.0  # a common Prometheus scrape interval; each scrape at 5 000 groups is ~10^5 samples
_QUIET = logging.getLogger("pulsar")  # the C++ client's INFO lines would bury the figures
_QUIET.setLevel(logging.WARNING)
PEER_PROPERTY = "rgd-scale-probe-peer"  # marks the probe's own messages, so its reader skips them unparsed


def layout(peers: int, per_daemon: int) -> tuple[list[int], dict[int, list[int]]]:
    """sim/scale.py's layout: the focus daemon's groups, and every peer's."""
    daemons = peers + 1
    spec = ScaleSpec(daemons=daemons, groups=daemons * per_daemon // 5, spread=5)
    served: dict[int, list[int]] = {i: [] for i in range(daemons)}
    for g in range(spec.groups):
        for d in members_of(g, spec):
            served[d].append(g)
    return served[0], {i: served[i] for i in range(1, daemons)}


def _entry(g: int, rng: random.Random) -> bytes:
    """One group entry as a peer reports it (the fields rgd fills, the kinds it leaves out
    left out: rgd.cluster.report_builder.drop_silent_kinds), serialized."""
    demand = int(rng.uniform(50, 2000))
    adm = int(demand * 0.9)
    gu = GroupUsage(group=group_name(g), namespaces=[namespace_name(g)], topics=3)
    gu.publish.CopyFrom(KindUsage(admitted_messages=adm, admitted_bytes=adm * 1000, throttled_messages=demand - adm,
                                  throttled_bytes=(demand - adm) * 1000, limit_messages=float(adm), limit_bytes=-1.0,
                                  quota_messages=10_000.0, quota_bytes=-1.0))
    gu.dispatch.CopyFrom(KindUsage(limit_messages=-1.0, limit_bytes=-1.0, quota_messages=-1.0, quota_bytes=-1.0))
    gu.replication.CopyFrom(KindUsage(limit_messages=-1.0, limit_bytes=-1.0, quota_messages=-1.0, quota_bytes=-1.0))
    drop_silent_kinds(gu)
    # As a repeated field 6 of UsageReport: concatenated after a header, they parse as one report.
    holder = UsageReport()
    holder.groups.append(gu)
    return holder.SerializeToString()


@dataclass
class Peer:
    index: int
    entries: list[list[bytes]]  # two value sets, alternating by round
    keys: list[bytes]  # each entry's index key (rgd.cluster.report_codec.group_key_bytes), as rgd senders fill it
    incarnation: int
    sequence: int = 0

    def report(self, rnd: int, share: float, rng: random.Random, heard: FocusHeard | None = None) -> bytes:
        """Round 0, and any round after a report of the daemon that does not acknowledge this
        peer (it evicted the peer, or has not held it yet): its whole state (base 0), as an rgd
        sender restates it to a member that acknowledged nothing; other rounds: the entries that
        changed since its previous report (base = that one). Each acknowledges the daemon's
        latest report it heard (without one, the daemon would count the peer as never holding
        its state and restate every group in every report)."""
        self.sequence += 1
        whole = rnd == 0 or (heard is not None and heard.sequence > 0
                             and heard.acked.get(member_tag(daemon_id(self.index), self.incarnation), 0) == 0)
        header = UsageReport(daemon_id=daemon_id(self.index), sequence=self.sequence,
                             publish_time_ms=int(time.time() * 1000), tick_ms=1000,
                             incarnation=self.incarnation, base=0 if whole else self.sequence - 1)
        if heard is not None and heard.sequence:
            header.ack_members.append(member_tag(heard.daemon_id, heard.incarnation))
            header.ack_sequences.append(heard.sequence)
        header = header.SerializeToString()
        values = self.entries[rnd % 2]
        picked = range(len(values)) if whole else sorted(rng.sample(range(len(values)), int(len(values) * share)))
        body = [values[i] for i in picked]
        index = UsageReport(group_keys=b"".join(self.keys[i] for i in picked)).SerializeToString()
        return header + b"".join(body) + index


@dataclass
class FocusHeard:
    """The daemon's latest report the probe's reader saw (what its peers acknowledge)."""

    daemon_id: str
    incarnation: int = 0
    sequence: int = 0
    acked: dict[int, int] = field(default_factory=dict)  # that report's acknowledgements: member tag -> sequence


@dataclass
class Figures:
    latencies: list[float] = field(default_factory=list)  # seconds from due to answered
    timeouts: int = 0
    errors: int = 0
    rss_mb: list[float] = field(default_factory=list)
    rss_own_mb: list[float] = field(default_factory=list)  # the daemon's own process alone
    pss_mb: list[float] = field(default_factory=list)  # proportional set sizes, summed
    metrics_s: list[float] = field(default_factory=list)
    published_bytes: int = 0
    rounds: int = 0
    round_lag_s: list[float] = field(default_factory=list)  # how late each publish round started
    cpu_s: list[float] = field(default_factory=list)  # the daemon's CPU seconds so far, each second
    rounds_wall_start: float = 0.0  # the wall clock at the first round's due time
    usage_posts: int = 0


def publish_peers(url: str, topic: str, peers: list[Peer], share: float, seconds: float, stop: threading.Event,
                  figures: Figures, heard: FocusHeard | None = None) -> None:
    """Every second, one report from every peer (send_async: one round takes milliseconds)."""
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=_QUIET)
    try:
        producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=1000,
                                          block_if_queue_full=True, send_timeout_millis=10_000)
        rng = random.Random("scale-probe")
        t0 = time.monotonic()
        figures.rounds_wall_start = time.time()
        rnd = 0
        while not stop.is_set() and rnd < seconds:
            due = t0 + rnd
            delay = due - time.monotonic()
            if delay > 0 and stop.wait(delay):
                break
            figures.round_lag_s.append(time.monotonic() - due)
            for p in peers:
                data = p.report(rnd, share, rng, heard)
                figures.published_bytes += len(data)
                producer.send_async(data, None, properties={PEER_PROPERTY: "1"})
            rnd += 1
            figures.rounds = rnd
        producer.flush()
        producer.close()
    finally:
        client.close()


def capture_own(url: str, topic: str, focus: str, stop: threading.Event, out: list[tuple[bool, bytes]],
                heard: FocusHeard | None = None) -> None:
    """The daemon's own reports as published (the probe's peers' are skipped unparsed); the
    latest one's sequence goes to `heard`, for the peers to acknowledge."""
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=_QUIET)
    try:
        consumer = client.subscribe(topic, "scale-probe-capture", consumer_type=pulsar.ConsumerType.Exclusive)
        while not stop.is_set():
            try:
                msg = consumer.receive(200)
            except pulsar.Timeout:
                continue
            if PEER_PROPERTY in msg.properties():
                continue
            data = msg.data()
            rep = UsageReport.FromString(data)
            if rep.daemon_id == focus:
                out.append((rep.restatement, data))
                if heard is not None and (rep.incarnation, rep.sequence) > (heard.incarnation, heard.sequence):
                    heard.acked = dict(zip(rep.ack_members, rep.ack_sequences, strict=False))
                    heard.incarnation, heard.sequence = rep.incarnation, rep.sequence
        consumer.close()
    finally:
        client.close()


def rss_mb(pid: int, tree: bool = True) -> float:
    """The daemon's resident memory: its process and every process it started (with
    `--cluster-process` the cluster process holds the usage map), summed; or with
    `tree=False` its own process's alone."""
    return _summed(pid, tree, "status", "VmRSS:")


def rss_tree_and_own_mb(pid: int) -> tuple[float, float]:
    """rss_mb of the tree and of the daemon's own process from one read of each process:
    read apart, a process still growing put a page more in one than in the other, and a
    daemon alone in its process read as holding memory elsewhere."""
    own = rss_mb(pid, tree=False)
    others = sum(rss_mb(p, tree=False) for p in _process_tree(pid) if p != pid)
    return own + others, own


def pss_mb(pid: int) -> float:
    """The daemon's processes' proportional set sizes, summed: shared library pages counted
    once, not once a process as summed RSS counts them (a pod's memory use counts them once
    too). Beside RSS: the issue's bound is RSS."""
    return _summed(pid, True, "smaps_rollup", "Pss:")


def _summed(pid: int, tree: bool, proc_file: str, key: str) -> float:
    total = 0.0
    for p in _process_tree(pid) if tree else [pid]:
        try:
            for line in Path(f"/proc/{p}/{proc_file}").read_text().splitlines():
                if line.startswith(key):
                    total += int(line.split()[1]) / 1024.0
                    break
        except OSError:
            continue  # exited meanwhile (or no smaps_rollup: Linux before 4.14)
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (/proc/PID/stat, fields 14 and 15)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _process_tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def scrape(url: str) -> tuple[float, dict[str, float]]:
    """GET /metrics: (seconds it took, {sample name: value} for the families we read)."""
    started = time.monotonic()
    with urllib.request.urlopen(url + "/metrics", timeout=ASK_TIMEOUT_S) as resp:
        text = resp.read().decode()
    took = time.monotonic() - started
    out: dict[str, float] = {}
    for line in text.splitlines():
        if (line.startswith(("rgd_tick_seconds_", "rgd_react_seconds_", "rgd_quota_calculation_seconds_"))
                and "{" not in line):
            name, value = line.split()
            out[name] = float(value)
        elif line.startswith(("rgd_serving_link_seconds_total", "rgd_serving_gc_seconds_total")):
            out[line.split()[0]] = float(line.split()[-1])  # with --cluster-process: the serving process's
        elif line.startswith(COUNTERS):  # summed over labels (rejections: per reason)
            name = line.split("{")[0].split()[0]
            if name == "rgd_reports_rejected_total" and 'reason="' in line:
                name = "rejected " + line.split('reason="')[1].split('"')[0]
            out[name] = out.get(name, 0.0) + float(line.split()[-1])
    return took, out


def final_scrape(url: str, figures: Figures, patience: float = 30.0) -> dict[str, float]:
    """The histograms once the peers stopped: a daemon still folding their backlog may not
    answer at first (each failed try counts as a /metrics timeout), so retry until it does."""
    deadline = time.monotonic() + patience
    while True:
        try:
            took, values = scrape(url)
            figures.metrics_s.append(took)
            return values
        except OSError:
            figures.metrics_s.append(ASK_TIMEOUT_S)
            if time.monotonic() > deadline:
                return {}  # no tick figures: reported as such (a FAIL)


async def ask_load(url: str, groups: list[int], rate: float, seconds: float, figures: Figures) -> None:
    """Single asks at a fixed rate, each timed from when it was due."""
    connector = aiohttp.TCPConnector(limit=256)
    timeout = aiohttp.ClientTimeout(total=ASK_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async def one(due: float, g: int) -> None:
            body = {"requests": [{"namespace": namespace_name(g), "kind": "publish", "messages": 1, "bytes": 1000}]}
            try:
                async with session.post(url + "/v1/acquire", json=body) as resp:
                    await resp.read()
                    if resp.status != 200:
                        figures.errors += 1
                figures.latencies.append(time.monotonic() - due)
            except TimeoutError:
                figures.timeouts += 1
                figures.latencies.append(max(ASK_TIMEOUT_S, time.monotonic() - due))
            except aiohttp.ClientError:
                figures.errors += 1
                figures.latencies.append(time.monotonic() - due)

        tasks = []
        t0 = time.monotonic()
        n = int(rate * seconds)
        for i in range(n):
            due = t0 + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(due, groups[i % len(groups)])))
        await asyncio.gather(*tasks)


async def feed_usage(url: str, groups: list[int], seconds: float, figures: Figures) -> None:
    """The brokers' traffic behind the asks: every second, each group's messages of that
    second through /v1/usage (recorded after the fact, as brokers do for dispatch), its
    demand drifting by up to 8 % a second as in `python -m sim scale`, so the daemon's own
    reports are suppressed as PIP-82 suppresses them and their size per tick is real."""
    rng = random.Random("scale-probe-usage")
    demand = {g: rng.uniform(50, 2000) for g in groups}
    timeout = aiohttp.ClientTimeout(total=ASK_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        t0 = time.monotonic()
        for second in range(int(seconds)):
            delay = t0 + second - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            for i in range(0, len(groups), 500):
                chunk = groups[i:i + 500]
                for g in chunk:
                    demand[g] *= 1.0 + rng.uniform(-0.08, 0.08)
                body = {"requests": [{"namespace": namespace_name(g), "kind": "publish", "messages": int(demand[g]),
                                      "bytes": int(demand[g]) * 1000} for g in chunk]}
                try:
                    async with session.post(url + "/v1/usage", json=body) as resp:
                        await resp.read()
                        figures.usage_posts += 1
                except (TimeoutError, aiohttp.ClientError):
                    figures.errors += 1


async def load(url: str, groups: list[int], rate: float, seconds: float, figures: Figures) -> None:
    await asyncio.gather(ask_load(url, groups, rate, seconds, figures), feed_usage(url, groups, seconds, figures))


def load_elsewhere(url: str, groups: list[int], rate: float, seconds: float,
                   cpus: set[int]) -> tuple[list[float], int, int, int]:
    """`load` in a process of its own (pinned to `cpus`), as brokers are: beside the
    threads that build and publish the peers' reports it shared their GIL, and each
    round's building (99 reports, tens of milliseconds of Python) delayed asks that the
    latency figures then counted against the daemon. Returns latencies, timeouts,
    errors and usage posts."""
    os.sched_setaffinity(0, cpus)
    figures = Figures()
    asyncio.run(load(url, groups, rate, seconds, figures))
    return figures.latencies, figures.timeouts, figures.errors, figures.usage_posts


async def warm(url: str, groups: list[int]) -> None:
    """One ask per group so the daemon's limiter knows (and reports) every group it serves."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for i in range(0, len(groups), 250):
            body = {"requests": [{"namespace": namespace_name(g), "kind": "publish", "messages": 1, "bytes": 1000}
                                 for g in groups[i:i + 250]]}
            async with session.post(url + "/v1/acquire", json=body) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"warm-up ask answered {resp.status}: {await resp.text()}")


def codec_sizes(data: bytes) -> dict[str, float | None]:
    """Bytes as published with no compression, and as the Pulsar client's LZ4 and ZSTD
    producers carry them (the same libraries' formats, when installed), with the cost of
    decompressing and parsing each on the receiving side."""
    out: dict[str, float | None] = {"none": len(data), "lz4": None, "zstd": None}
    started = time.perf_counter()
    UsageReport.FromString(data)
    out["none_decode_ms"] = 1000 * (time.perf_counter() - started)
    try:
        import lz4.block
        packed = lz4.block.compress(data, store_size=False)
        out["lz4"] = len(packed)
        started = time.perf_counter()
        UsageReport.FromString(lz4.block.decompress(packed, uncompressed_size=len(data)))
        out["lz4_decode_ms"] = 1000 * (time.perf_counter() - started)
    except ImportError:
        pass
    try:
        import zstandard
        packed = zstandard.ZstdCompressor(level=3).compress(data)
        out["zstd"] = len(packed)
        started = time.perf_counter()
        UsageReport.FromString(zstandard.ZstdDecompressor().decompress(packed))
        out["zstd_decode_ms"] = 1000 * (time.perf_counter() - started)
    except ImportError:
        pass
    return out


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scale_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=40.0, help="how long the peers publish (default 40)")
    p.add_argument("--peers", type=int, default=99, help="simulated peers (default 99)")
    p.add_argument("--groups", type=int, default=5000, help="groups the daemon serves, as each peer (default 5000)")
    p.add_argument("--sent-share", type=float, default=0.36, help="share of a peer's groups in each report after "
                   "the first (default 0.36, PIP-82 suppression in `python -m sim scale`)")
    p.add_argument("--ask-rate", type=float, default=200.0, help="single timed asks per second (default 200)")
    p.add_argument("--cpu", type=int, default=os.cpu_count() - 1 if os.cpu_count() else 0,
                   help="the core the daemon is pinned to (default: the last)")
    p.add_argument("--baseline", metavar="GIT_REV", help="first run the daemon of this revision (git archive into "
                   "a scratch directory) the same way, and compare")
    p.add_argument("--daemon-arg", action="append", default=[], help="extra `rgd run` flag for this tree's daemon "
                   "(repeatable; --daemon-arg=--flag=value)")
    p.add_argument("--baseline-arg", action="append", default=[], help="extra `rgd run` flag for the baseline's "
                   "daemon (repeatable; --baseline-arg=--cluster-thread compares a layout with itself)")
    p.add_argument("--out", help="also write the figures as JSON here")
    p.add_argument("--keep", action="store_true", help="keep the work directories (daemon logs, usage logs)")
    ns = p.parse_args(argv)
    if not 5 <= ns.seconds <= 120:
        p.error("--seconds must be within 5..120")

    own, peer_groups = layout(ns.peers, ns.groups)
    print(f"building {ns.peers} peers' reports ({len(peer_groups[1])} groups each)...", flush=True)
    built = time.monotonic()
    entries = {i: [[_entry(g, random.Random(f"peer:{i}:{v}:{g}")) for g in groups] for v in range(2)]
               for i, groups in peer_groups.items()}
    keys = {i: [group_key_bytes(group_name(g)) for g in groups] for i, groups in peer_groups.items()}
    print(f"... {time.monotonic() - built:.1f} s", flush=True)
    runs: list[tuple[str, Path | None]] = []
    scratch: list[Path] = []
    if ns.baseline:
        base = Path(tempfile.mkdtemp(prefix="rgd-scale-baseline-"))
        scratch.append(base)
        archive = subprocess.run(["git", "archive", ns.baseline], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        runs.append((f"baseline {ns.baseline}", base))
    runs.append(("this tree", None))
    results = []
    try:
        for label, code in runs:
            peers = [Peer(i, entries[i], keys[i], int(time.time() * 1000)) for i in peer_groups]
            results.append(run_once(ns, label, code, own, peers))
    finally:
        for d in scratch:
            shutil.rmtree(d, ignore_errors=True)
    command = " ".join([sys.executable, *sys.argv])
    print(f"\n$ {command}")
    for r in results:
        r["command"] = command
        print_result(r)
    if len(results) == 2:
        compare(*results)
    if ns.out:
        Path(ns.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if results[-1]["pass"] else 1


def compare(base: dict, new: dict) -> None:
    """This tree against the baseline, as ratios (baseline / this tree: > 1 is better)."""
    def ratio(key: str) -> str:
        a, b = base[key], new[key]
        return f"{a / b:.1f}x" if a and b else "n/a"
    print(f"baseline / this tree: acquire p99 {ratio('acquire_p99_ms')}, max {ratio('acquire_max_ms')}, "
          f"RSS max {ratio('rss_max_mb')}, /metrics worst {ratio('metrics_max_s')}")


def _default_codec(code: Path | None) -> str:
    """The report compression `rgd run` publishes with by default, in this tree or in the
    baseline's (read there, as its daemon imports it: the baseline's bounds were judged
    on uncompressed bytes before); "none" for a revision without the setting."""
    if code is None:
        from rgd.config.settings import Settings
        return Settings().report_compression
    out = subprocess.run([sys.executable, "-c", "from rgd.config.settings import Settings; "
                          "print(getattr(Settings(), 'report_compression', 'none'))"],
                         cwd=code, capture_output=True, text=True, timeout=60)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "none"


CALIBRATION = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
d = {}
started = time.process_time()
for i in range(400_000):
    d[str(i % 5000)] = (i * 1.5, i)
    sum(range(20))
print(time.process_time() - started)
"""


def calibrate(cpu: int) -> float:
    """CPU seconds of a fixed piece of Python (dicts, strings, floats, as the daemon's work)
    on the daemon's core: how fast the machine ran Python around a run, so that a run
    slower than another can be told to be the machine's or the daemon's."""
    out = subprocess.run([sys.executable, "-c", CALIBRATION, str(cpu)], capture_output=True, text=True, check=True)
    return float(out.stdout)


def pin_threads(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` to `cpus` (an affinity is a thread's, not a process's)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def run_once(ns: argparse.Namespace, label: str, code: Path | None, own: list[int], peers: list[Peer]) -> dict:
    """One daemon (this tree's, or the code in `code`) through the whole load; its figures."""
    work = Path(tempfile.mkdtemp(prefix="rgd-scale-probe-"))
    config = work / "groups.yaml"
    config.write_text(yaml.safe_dump({
        "resourcegroups": {group_name(g): {"publishRateInMsgs": 10_000} for g in own},
        "tenants": {namespace_name(g).partition("/")[0]: group_name(g) for g in own},
    }))
    calibrated = [calibrate(ns.cpu)]
    broker = start_or_join(work / "broker")
    # The daemon's core is the daemon's: the broker, this process's publishing threads and
    # the load's process run on the others. Left to the scheduler, the broker's threads
    # (~99 x 130 KB in and out a second) ran on the daemon's core in some runs and not in
    # others, and the same tree's CPU a tick read 716 ms in one run and 800 in the next.
    others = (os.sched_getaffinity(0) - {ns.cpu}) or {ns.cpu}
    os.sched_setaffinity(0, others)  # threads started from here on inherit it
    if broker.process is not None:
        pin_threads(broker.process.pid, others)
    focus = "focus"
    daemon = DaemonProcess(focus, ["--pulsar-url", broker.url, "--config", str(config), "--tick", "1",
                                   "--log-dir", str(work / "logs"), "--data-dir", str(work),
                                   *(ns.daemon_arg if code is None else ns.baseline_arg)],
                           log_path=work / "focus.out", cpus={ns.cpu}, cwd=str(code) if code else None)
    stop = threading.Event()
    figures = Figures()
    captured: list[tuple[bool, bytes]] = []
    threads: list[threading.Thread] = []
    print(f"{label}: starting the daemon pinned to core {ns.cpu}...", flush=True)
    try:
        daemon.start()
        daemon.wait_ready(60)
        pid = daemon.process.pid
        asyncio.run(warm(daemon.url, own))
        rss_start = rss_mb(pid)
        heard = FocusHeard(focus)
        capture = threading.Thread(target=capture_own, args=(broker.url, DEFAULT_TOPIC, focus, stop, captured, heard),
                                   daemon=True)
        capture.start()
        threads.append(capture)
        time.sleep(1.5)  # the capture subscription is in place before the daemon's next reports
        _, m0 = scrape(daemon.url)  # before the peers publish: it answers
        publisher = threading.Thread(target=publish_peers, daemon=True,
                                     args=(broker.url, DEFAULT_TOPIC, peers, ns.sent_share, ns.seconds, stop, figures,
                                           heard))
        sampler_stop = threading.Event()

        def sample() -> None:
            while not sampler_stop.wait(1.0):
                tree_mb, own_mb = rss_tree_and_own_mb(pid)
                figures.rss_mb.append(tree_mb)
                figures.rss_own_mb.append(own_mb)
                figures.pss_mb.append(pss_mb(pid))
                figures.cpu_s.append(sum(map(cpu_seconds, _process_tree(pid))))

        def scrape_loop() -> None:
            while not sampler_stop.wait(SCRAPE_EVERY_S):
                try:
                    took, _ = scrape(daemon.url)
                except OSError:
                    took = ASK_TIMEOUT_S
                figures.metrics_s.append(took)

        for target in (sample, scrape_loop):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            threads.append(t)
        publisher.start()
        threads.append(publisher)
        print(f"{label}: {ns.peers} peers publishing for {ns.seconds:.0f} s...", flush=True)
        children = _process_tree(pid)[1:]  # with --cluster-process: the cluster process
        cpu0 = cpu_seconds(pid), sum(map(cpu_seconds, children))
        load_started = time.monotonic()
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            (figures.latencies, figures.timeouts, figures.errors, figures.usage_posts) = pool.submit(
                load_elsewhere, daemon.url, own, ns.ask_rate, ns.seconds, others).result()
        cpu1 = cpu_seconds(pid), sum(map(cpu_seconds, children))
        load_seconds = time.monotonic() - load_started
        publisher.join(30)
        sampler_stop.set()
        tree_mb, own_mb = rss_tree_and_own_mb(pid)  # both: a last read of one alone may be a page larger
        figures.rss_mb.append(tree_mb)
        figures.rss_own_mb.append(own_mb)
        m1 = final_scrape(daemon.url, figures)
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        daemon.stop()
        broker.stop()
        if not ns.keep:  # the usage log of every report received
            shutil.rmtree(work, ignore_errors=True)
    calibrated.append(calibrate(ns.cpu))

    if not m1:
        m0 = {}
    ticks = m1.get("rgd_tick_seconds_count", 0) - m0.get("rgd_tick_seconds_count", 0)
    # The daemon's tick is 1 s; CPU was measured over the load, which lasts longer than
    # --seconds when asks time out at the end (dividing by --seconds read 1.2 cores of one).
    load_ticks = max(load_seconds, 1e-9) / 1.0

    def per_tick(name: str) -> float | None:
        if f"{name}_sum" not in m1:
            return None
        return 1000 * (m1[f"{name}_sum"] - m0.get(f"{name}_sum", 0)) / max(1, ticks)

    tick_reports = [d for restated, d in captured if not restated]
    first = tick_reports[0] if tick_reports else b""
    later = tick_reports[1:]
    first_sizes = codec_sizes(first)
    later_sizes = [codec_sizes(d) for d in later]
    # Every report after the first tick report (tick, early, restatement) per tick report.
    after_first = captured[[d for _, d in captured].index(first) + 1:] if first else []
    all_sizes = [codec_sizes(d) for _, d in after_first]

    def all_per_tick(codec: str) -> float | None:
        xs = [s[codec] for s in all_sizes if s.get(codec) is not None]
        return sum(xs) / max(1, len(later)) if xs else None

    def mean_of(codec: str) -> float | None:
        xs = [s[codec] for s in later_sizes if s.get(codec) is not None]
        return statistics.fmean(xs) if xs else None

    lat = figures.latencies
    # Brokers answered on a loop of their own: a cluster process (a child), or a cluster thread.
    args = ns.daemon_arg if code is None else ns.baseline_arg
    split = bool(children) or "--cluster-thread" in args
    codec = _default_codec(code)  # the setting's default in that tree unless a flag says otherwise
    for i, arg in enumerate(args):
        if arg.startswith("--report-compression"):
            codec = arg.partition("=")[2] or args[i + 1]
    return {
        "label": label, "published_codec": codec,
        "seconds": ns.seconds, "peers": ns.peers, "groups": len(own), "ask_rate": ns.ask_rate, "cpu": ns.cpu,
        "asks": len(lat), "timeouts": figures.timeouts, "errors": figures.errors,
        "acquire_p50_ms": 1000 * percentile(lat, 0.50), "acquire_p99_ms": 1000 * percentile(lat, 0.99),
        "acquire_max_ms": 1000 * max(lat) if lat else float("nan"),
        "ticks": ticks, "tick_mean_ms": (per_tick("rgd_tick_seconds") or 0.0) if ticks else None,
        "react_ms_per_tick": per_tick("rgd_react_seconds") if ticks else None,
        "reacts_per_tick": (m1.get("rgd_react_seconds_count", 0.0) - m0.get("rgd_react_seconds_count", 0.0))
        / max(1, ticks) if ticks else None,
        "calc_ms_per_tick": per_tick("rgd_quota_calculation_seconds") if ticks else None,
        "split": split, "cluster_thread": bool(split and not children),
        "serving_link_ms_per_tick": {
            d: 1000 * (m1.get(f'rgd_serving_link_seconds_total{{direction="{d}"}}', 0.0)
                       - m0.get(f'rgd_serving_link_seconds_total{{direction="{d}"}}', 0.0)) / max(1, ticks)
            for d in ("counts", "limits")} if split else None,
        "serving_gc_ms_per_tick": 1000 * (m1.get("rgd_serving_gc_seconds_total", 0.0)
                                          - m0.get("rgd_serving_gc_seconds_total", 0.0)) / max(1, ticks)
        if split else None,
        "serving_cpu_ms_per_tick": 1000 * (cpu1[0] - cpu0[0]) / load_ticks,
        "cluster_cpu_ms_per_tick": 1000 * (cpu1[1] - cpu0[1]) / load_ticks if children else None,
        "rss_start_mb": rss_start, "rss_max_mb": max(figures.rss_mb, default=0.0),
        "rss_own_max_mb": max(figures.rss_own_mb, default=0.0), "pss_max_mb": max(figures.pss_mb, default=0.0),
        "rss_mb_each_second": [round(x, 1) for x in figures.rss_mb],
        "calibration_ms_before_after": [round(1000 * c) for c in calibrated],
        "cpu_ms_each_second": [round(1000 * (b - a)) for a, b in zip(figures.cpu_s, figures.cpu_s[1:])],
        "metrics_max_s": max(figures.metrics_s, default=float("nan")),
        "peer_rounds": figures.rounds, "peer_round_lag_max_s": max(figures.round_lag_s, default=0.0),
        "peer_mb_published": figures.published_bytes / 1e6, "usage_posts": figures.usage_posts,
        "report_first_bytes": first_sizes, "report_tick_reports": len(later),
        "report_per_tick_bytes": {c: mean_of(c) for c in ("none", "lz4", "zstd")},
        "report_decode_ms": {c: mean_of(f"{c}_decode_ms") for c in ("none", "lz4", "zstd")},
        "reports_after_first": len(after_first),
        "report_all_per_tick_bytes": {c: all_per_tick(c) for c in ("none", "lz4", "zstd")},
        "report_groups_first": len(UsageReport.FromString(first).groups) if first else 0,
        "report_groups_per_tick": statistics.fmean(len(UsageReport.FromString(d).groups) for d in later)
        if later else 0,
        # Where the daemon's ticks fall in the peers' rounds (0: as a round's 99 reports go
        # out; a tick report's publish time is its tick's start), median over the run.
        "tick_phase_in_round": statistics.median(
            (UsageReport.FromString(d).publish_time_ms / 1000 - figures.rounds_wall_start) % 1.0 for d in later)
        if later and figures.rounds_wall_start else None,
        "counted": {name.removeprefix("rgd_").removesuffix("_total"): m1.get(name, 0.0) - m0.get(name, 0.0)
                    for name in sorted(set(m1) | set(m0), key=str)
                    if name.startswith(COUNTERS) or name.startswith("rejected ")},
    }


def _kb(x: float | None) -> str:
    return "n/a" if x is None else f"{x / 1000:.1f} KB"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} ms"


def _count(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def print_result(r: dict) -> None:
    codec = r["published_codec"]
    first = r["report_first_bytes"].get(codec) if r["report_first_bytes"]["none"] else None
    per_tick = r["report_per_tick_bytes"].get(codec)
    if r.get("split"):
        # The loop that answers brokers is the serving process's: its work besides answering
        # is the hand-over of counts, the limits applied and its garbage collection.
        link = r["serving_link_ms_per_tick"]
        work = link["counts"] + link["limits"] + r["serving_gc_ms_per_tick"]
        work_name = ("event-loop work per tick besides answering, of the process answering brokers "
                     "(counts handed over, limits applied, garbage collection), mean")
    else:
        work = None if r["tick_mean_ms"] is None else r["tick_mean_ms"] + (r["react_ms_per_tick"] or 0.0)
        work_name = "event-loop work per tick (tick + reacts between ticks), mean"
    cpu = r["serving_cpu_ms_per_tick"] + (r.get("cluster_cpu_ms_per_tick") or 0.0)
    checks = [
        ("CPU of the daemon's processes per second over the load", _ms(cpu), f"<= {CPU_MS_PER_S:.0f} ms",
         cpu <= CPU_MS_PER_S),
        ("acquire p99", f"{r['acquire_p99_ms']:.1f} ms", f"<= {P99_MS:.0f} ms", r["acquire_p99_ms"] <= P99_MS),
        ("acquire max", f"{r['acquire_max_ms']:.1f} ms", f"<= {MAX_MS:.0f} ms", r["acquire_max_ms"] <= MAX_MS),
        (work_name, _ms(work), f"<= {TICK_WORK_MS:.0f} ms", work is not None and work <= TICK_WORK_MS),
        ("RSS max", f"{r['rss_max_mb']:.0f} MB (start {r['rss_start_mb']:.0f} MB"
         + (f"; the process answering brokers at most {r['rss_own_max_mb']:.0f} MB"
            if r.get("split") and not r.get("cluster_thread") else "")
         + f"; PSS summed at most {r.get('pss_max_mb', 0.0):.0f} MB)",
         f"<= {RSS_MB:.0f} MB",
         r["rss_max_mb"] <= RSS_MB),
        (f"first report as published ({codec})", _kb(first), f"<= {FIRST_REPORT_KB:.0f} KB",
         first is not None and first <= FIRST_REPORT_KB * 1000),
        (f"report per tick after the first as published ({codec})", _kb(per_tick), f"<= {TICK_REPORT_KB:.0f} KB",
         per_tick is not None and per_tick <= TICK_REPORT_KB * 1000),
    ]
    r["pass"] = all(ok for *_, ok in checks)
    r["checks"] = {name: {"measured": m, "bound": b, "pass": ok} for name, m, b, ok in checks}
    print(f"\n{r['label']}: 1 daemon pinned to core {r['cpu']}, {r['groups']} groups, {r['peers']} peers x "
          f"{r['peer_rounds']} rounds ({r['peer_mb_published']:.0f} MB published, worst round start "
          f"{r['peer_round_lag_max_s'] * 1000:.0f} ms late), {r['asks']} timed asks at {r['ask_rate']:.0f}/s "
          f"({r['timeouts']} timed out, {r['errors']} errors), {r['usage_posts']} usage posts of 500 groups")
    if not r["ticks"]:
        print("no tick figures: /metrics did not answer within "
              f"{ASK_TIMEOUT_S:.0f} s, also 30 s after the peers stopped")
    print(f"acquire p50 {r['acquire_p50_ms']:.1f} ms; ticks {r['ticks']}: "
          f"rgd_tick_seconds mean {_ms(r['tick_mean_ms'])}, "
          f"reacts {_ms(r['react_ms_per_tick'])} per tick ({_count(r.get('reacts_per_tick'))} of them), "
          "calculator (in ticks and reacts, on or off the loop) "
          f"{_ms(r['calc_ms_per_tick'])} per tick; /metrics worst {r['metrics_max_s']:.2f} s")
    if r.get("serving_cpu_ms_per_tick") is not None:
        cluster = r.get("cluster_cpu_ms_per_tick")
        if r.get("split"):
            link = r["serving_link_ms_per_tick"]
            half = "thread" if r.get("cluster_thread") else "process"
            print(f"{half} answering brokers, per tick: counts handed over {_ms(link['counts'])}, limits applied "
                  f"{_ms(link['limits'])}, garbage collection {_ms(r['serving_gc_ms_per_tick'])}")
        print(f"CPU per tick over the load: the daemon's process {_ms(r['serving_cpu_ms_per_tick'])}"
              + ("" if cluster is None else f", its cluster process {_ms(cluster)} (tick and react figures above "
                                            "are the cluster process's)"))
    if r.get("tick_phase_in_round") is not None:
        print(f"the daemon's ticks start {r['tick_phase_in_round']:.2f} s into the peers' 1 s rounds (median)")
    f, t, d = r["report_first_bytes"], r["report_per_tick_bytes"], r["report_decode_ms"]
    print(f"own reports: first {_kb(f['none'])} with {r['report_groups_first']} groups (lz4 {_kb(f['lz4'])}, "
          f"zstd {_kb(f['zstd'])}); per tick after it {_kb(t['none'])} with {r['report_groups_per_tick']:.0f} groups "
          f"(lz4 {_kb(t['lz4'])}, zstd {_kb(t['zstd'])}) over {r['report_tick_reports']} reports; decompress + "
          f"parse per tick report: none {_ms(d['none'])}, lz4 {_ms(d['lz4'])}, zstd {_ms(d['zstd'])}")
    a = r["report_all_per_tick_bytes"]
    print(f"all own reports (tick, early, restatements: {r['reports_after_first']}) per tick: {_kb(a['none'])} "
          f"(lz4 {_kb(a['lz4'])}, zstd {_kb(a['zstd'])})")
    print("counted over the run: " + ", ".join(f"{k} {v:.0f}" for k, v in r.get("counted", {}).items()))
    series = r.get("rss_mb_each_second") or []
    if series:  # where the peak is: the first round's full reports, or growth
        print("RSS every 5 s (MB): " + " ".join(f"{x:.0f}" for x in series[::5]))
    if r.get("calibration_ms_before_after"):
        before, after = r["calibration_ms_before_after"]
        print(f"a fixed piece of Python on the daemon's core (bench/scale_probe.py calibrate): {before} ms before "
              f"the run, {after} ms after")
    cpu = r.get("cpu_ms_each_second") or []
    if cpu:
        print("CPU ms a second, mean of each 5 s: " + " ".join(f"{statistics.fmean(cpu[i:i + 5]):.0f}"
                                                             for i in range(0, len(cpu), 5)))
    for name, m, b, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}: {m} (bound {b})")


if __name__ == "__main__":
    raise SystemExit(main())
