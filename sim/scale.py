"""Scale mode: PIP-82's sizing (100 daemons, 100 000 groups, each active on 5 daemons).

PIP-82 estimates, for 5 000 namespaces per broker and 100 brokers: about 1 MB of
usage-map memory per broker (32 B of usage x 5 brokers x 5 000 namespaces, plus
400 KB of names) and 560 KB per publish per broker (32 B x 5 000 + 80-byte names);
that is 56 MB published per round cluster-wide and 5.6 GB consumed.

What this measures, for one daemon ("the focus"), on the real code paths:
- published bytes per tick: the focus daemon runs rgd's Limiter, report_builder,
  select_reports (PIP-82 suppression) and serializes real UsageReport messages;
  its brokers' demand drifts each tick (`jitter`), so some groups change enough to
  be reported and the rest wait for the periodic refresh;
- usage-map memory: the focus daemon decodes and folds its 99 peers' reports
  (generated the same way, with the same suppression) into rgd's UsageMap, under
  tracemalloc. Twice: every group of every report (as the daemon folded before it
  filtered), and only the groups the focus daemon serves (PIP-82's assumption, and what
  ClusterNode.folds keeps, besides a bounded few groups it does not serve);
- receive time per tick (decode_report + fold of all peers' reports, both ways: every
  entry parsed, or through the reports' index only the focus daemon's) and
  the quota calculator's time per tick over the focus daemon's groups;
- the focus daemon's reports as LZ4 and ZSTD producers carry them (rgd publishes with
  ZSTD by default: `report_compression`), and what decompressing costs a receiver.
Peers' limiters are not simulated (500 000 token buckets would only measure the
simulator); their reports carry the same fields, drift and suppression.
"""

from __future__ import annotations

import gc
import random
import time
import tracemalloc
from dataclasses import asdict, dataclass
from typing import Any

from rgd.cluster.report_builder import figures, group_entries, peer_usage
from rgd.cluster.report_codec import FoldScope, decode_report, serialize_report
from rgd.cluster.suppression import SuppressionState, select_reports
from rgd.cluster.usage_map import UsageMap
from rgd.config.groups import ResourceGroup
from rgd.limiting.limiter import Limiter
from rgd.quota.calculator import compute_limits
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage, UsageReport
from sim.profiles import RGD_SUPPRESSION

PIP82 = {
    "memory_bytes_per_daemon": 1_000_000,  # ~800 KB usage + ~400 KB names, rounded by the PIP to 1 MB
    "publish_bytes_per_daemon": 560_000,  # 160 KB usage + 400 KB names
    "publish_bytes_cluster": 56_000_000,
    "consume_bytes_cluster": 5_600_000_000,
}


@dataclass(frozen=True)
class ScaleSpec:
    daemons: int = 100
    groups: int = 100_000
    spread: int = 5  # daemons each group is active on
    ticks: int = 8
    jitter: float = 0.08  # per-tick demand drift (fraction)
    seed: int = 1


@dataclass
class ScaleResult:
    spec: dict[str, Any]
    groups_per_daemon: int
    report_bytes_first: int  # the first report: every active group
    report_bytes_per_tick: float  # mean after the first, with suppression (one refresh round included)
    report_bytes_unsuppressed: int  # one report with every group, for comparison
    report_first_compressed: dict[str, int | None]  # the first report as LZ4 / ZSTD producers carry it
    report_per_tick_compressed: dict[str, float | None]  # ... and the mean after it
    report_decode_seconds: dict[str, float | None]  # decompress + parse the first report, per codec
    groups_sent_share: float  # of group-ticks after the first
    cluster_publish_bytes_per_tick: float
    cluster_consume_bytes_per_tick: float
    map_entries_all: int
    map_bytes_all: int  # the usage map as the daemon builds it (every group of every report)
    map_entries_own: int
    map_bytes_own: int  # filtered to the focus daemon's groups
    receive_seconds_per_tick: float  # decode + fold, after the first tick, without tracemalloc
    receive_own_seconds_per_tick: float  # the same, folding only the focus daemon's groups
    calc_seconds_per_tick: float
    avg_group_name: float
    avg_namespace_name: float
    wall_seconds: float


def _publish_ms(tick: int) -> int:
    return 1_767_225_600_000 + tick * 1000


def compressed(data: bytes) -> dict[str, int | None]:
    """The bytes a Pulsar producer with LZ4 or ZSTD compression (rgd's report_compression)
    carries for this payload, by the same codecs (None: the codec's module is not
    installed; both come with rgd's bench extra)."""
    out: dict[str, int | None] = {"lz4": None, "zstd": None}
    try:
        import lz4.block
        out["lz4"] = len(lz4.block.compress(data, store_size=False))
    except ImportError:
        pass
    try:
        import zstandard
        out["zstd"] = len(zstandard.ZstdCompressor(level=3).compress(data))
    except ImportError:
        pass
    return out


def _decode_seconds(data: bytes) -> dict[str, float | None]:
    """Decompressing and parsing one report, per codec (what a receiving daemon pays)."""
    out: dict[str, float | None] = {"none": None, "lz4": None, "zstd": None}
    rounds = 5
    started = time.perf_counter()
    for _ in range(rounds):
        UsageReport.FromString(data)
    out["none"] = (time.perf_counter() - started) / rounds
    try:
        import lz4.block
        packed = lz4.block.compress(data, store_size=False)
        started = time.perf_counter()
        for _ in range(rounds):
            UsageReport.FromString(lz4.block.decompress(packed, uncompressed_size=len(data)))
        out["lz4"] = (time.perf_counter() - started) / rounds
    except ImportError:
        pass
    try:
        import zstandard
        packed = zstandard.ZstdCompressor(level=3).compress(data)
        started = time.perf_counter()
        for _ in range(rounds):
            UsageReport.FromString(zstandard.ZstdDecompressor().decompress(packed))
        out["zstd"] = (time.perf_counter() - started) / rounds
    except ImportError:
        pass
    return out


def daemon_id(i: int) -> str:
    return f"rgd-node-{i:03d}.cluster.local"


def group_name(g: int) -> str:
    return f"tenant-{g:06d}-rg"


def namespace_name(g: int) -> str:
    return f"tenant-{g:06d}/namespace-{g:06d}"


def members_of(g: int, spec: ScaleSpec) -> list[int]:
    """Deterministic and balanced: every daemon serves groups * spread / daemons groups."""
    step = max(1, spec.daemons // spec.spread)
    return sorted({(g + j * step) % spec.daemons for j in range(spec.spread)})


class _Peer:
    """A peer's report stream: drifting figures, the same suppression, real protobufs."""

    def __init__(self, index: int, groups: list[int], rng: random.Random) -> None:
        self.id = daemon_id(index)
        self.groups = groups
        self.base = {g: rng.uniform(50, 2000) for g in groups}
        self.state = SuppressionState()
        self.sequence = 0

    def report(self, tick: int, rng: random.Random, jitter: float) -> bytes:
        current: dict[str, tuple[float, ...]] = {}
        usage: dict[str, tuple[int, int, int]] = {}
        for g in self.groups:
            self.base[g] *= 1.0 + rng.uniform(-jitter, jitter)
            demand = int(self.base[g])
            admitted = int(demand * 0.9)
            usage[group_name(g)] = (g, admitted, demand - admitted)
            current[group_name(g)] = (admitted, admitted * 1000, demand - admitted, (demand - admitted) * 1000,
                                      0, 0, 0, 0)
        send, _ = select_reports(RGD_SUPPRESSION, self.state, current)
        self.sequence += 1
        # What changed since its previous report (every receiver holds that one here): base.
        rep = UsageReport(daemon_id=self.id, sequence=self.sequence, publish_time_ms=_publish_ms(tick),
                          tick_ms=1000, incarnation=1, base=self.sequence - 1)
        for name in sorted(send):
            g, adm, thr = usage[name]
            gu = GroupUsage(group=name, namespaces=[namespace_name(g)], topics=3)
            gu.publish.CopyFrom(KindUsage(
                admitted_messages=adm, admitted_bytes=adm * 1000, throttled_messages=thr,
                throttled_bytes=thr * 1000, limit_messages=float(adm), limit_bytes=-1.0,
                quota_messages=10_000.0, quota_bytes=-1.0,
            ))
            gu.dispatch.CopyFrom(KindUsage(limit_messages=-1.0, limit_bytes=-1.0, quota_messages=-1.0,
                                           quota_bytes=-1.0))
            rep.groups.append(gu)
        return serialize_report(rep)


def _fold_all(payloads: list[list[bytes]], keep: set[str] | None, traced: bool) -> tuple[UsageMap, int, list[float]]:
    """Decode, vet and fold every tick's reports into a new map (rgd.cluster.report_codec's
    decode_report, as the daemon receives them): every group, as the daemon did before it
    filtered, or only those in `keep`, as it does now (ClusterNode.folds: through the
    reports' index, parsing only those entries; it also holds a bounded few groups it does
    not serve, left out here). Returns the map, its traced size
    (0 when not traced) and the seconds spent decoding and folding, per tick."""
    gc.collect()
    if traced:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] if traced else 0
    um = UsageMap()
    spent: list[float] = []
    scope = None if keep is None else FoldScope(keep)
    for tick, reports in enumerate(payloads):
        started = time.perf_counter()
        for data in reports:
            rep = decode_report(data, _publish_ms(tick), "scale-focus", 1, scope=scope)
            um.fold(rep, float(tick), 0)
        spent.append(time.perf_counter() - started)
    gc.collect()
    size = 0
    if traced:
        size = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
    return um, size, spent


def run_scale(spec: ScaleSpec = ScaleSpec(), progress=None) -> ScaleResult:
    started = time.perf_counter()
    say = progress or (lambda _msg: None)
    rng = random.Random(f"scale:{spec.seed}")
    served: dict[int, list[int]] = {i: [] for i in range(spec.daemons)}
    for g in range(spec.groups):
        for d in members_of(g, spec):
            served[d].append(g)
    focus = 0
    own = served[focus]
    own_names = {group_name(g) for g in own}
    say(f"{spec.daemons} daemons, {spec.groups} groups x {spec.spread} daemons: {len(own)} groups on the focus daemon")

    # The focus daemon: real limiter, real report path; its share is 90 % of its first demand.
    now = [0.0]
    registry = {group_name(g): ResourceGroup(group_name(g), publish_msgs=10_000.0) for g in own}
    demand = {g: rng.uniform(50, 2000) for g in own}
    share = {group_name(g): int(demand[g] * 0.9) for g in own}
    limiter = Limiter(lambda: now[0], initial_limits=lambda group, kind: (float(share[group.name]), float("inf")))
    state = SuppressionState()
    sizes: list[int] = []
    packed: list[dict[str, int | None]] = []
    first_payload = b""
    sent_groups = 0
    peers = [_Peer(i, served[i], random.Random(f"peer:{spec.seed}:{i}")) for i in range(1, spec.daemons)]
    payloads: list[list[bytes]] = []
    peer_bytes: list[int] = []
    for tick in range(spec.ticks):
        for g in own:
            demand[g] *= 1.0 + rng.uniform(-spec.jitter, spec.jitter)
            group = registry[group_name(g)]
            for _ in range(10):  # ten acquires per tick
                n = max(1, int(demand[g] / 10))
                limiter.acquire(group, "publish", n, n * 1000, namespace_name(g), now=now[0])
        now[0] += 1.0
        entries = group_entries(limiter.collect(), limiter.states, registry)
        send, _ = select_reports(RGD_SUPPRESSION, state, {n: figures(gu) for n, gu in entries.items()})
        rep = UsageReport(daemon_id=daemon_id(focus), sequence=tick + 1, publish_time_ms=_publish_ms(tick),
                          tick_ms=1000, incarnation=1)
        rep.groups.extend(entries[n] for n in sorted(send))
        payload = serialize_report(rep)
        sizes.append(len(payload))
        packed.append(compressed(payload))
        if not tick:
            first_payload = payload
        if tick:
            sent_groups += len(send)
        reports = [p.report(tick, rng, spec.jitter) for p in peers]
        peer_bytes.append(sum(len(r) for r in reports))
        payloads.append(reports)
        say(f"tick {tick}: focus report {sizes[-1]} B ({len(send)} groups), peers {peer_bytes[-1] / 1e6:.1f} MB")
    full = UsageReport(daemon_id=daemon_id(focus), sequence=1, tick_ms=1000, incarnation=1)
    full.groups.extend(entries.values())
    unsuppressed = len(serialize_report(full))

    say("decoding and folding every peer report, as the daemon does (timed)...")
    um_all, _, spent = _fold_all(payloads, None, traced=False)
    receive_s = sum(spent[1:]) / max(1, len(spent) - 1)
    del um_all
    say("... again under tracemalloc (memory)")
    um_all, bytes_all, _ = _fold_all(payloads, None, traced=True)
    entries_all = sum(len(e) for e in um_all.groups.values())
    del um_all
    say("... filtered to the focus daemon's groups (PIP-82's assumption), timed and traced")
    _, _, spent_own = _fold_all(payloads, own_names, traced=False)
    receive_own_s = sum(spent_own[1:]) / max(1, len(spent_own) - 1)
    um_own, bytes_own, _ = _fold_all(payloads, own_names, traced=True)
    del payloads
    registry_own = {n: registry[n] for n in own_names}
    # Our own entries, as the daemon puts them in its map.
    for n, gu in entries.items():
        um_own.set_local(daemon_id(focus), n, peer_usage(gu, 1.0), now[0])
    members = set(um_own.members) | {daemon_id(focus)}
    say("quota calculator over the focus daemon's groups...")
    calc_started = time.perf_counter()
    rounds = 3
    for _ in range(rounds):
        for n, group in registry_own.items():
            compute_limits(group, um_own.group_usage(n), daemon_id(focus), members)
    calc_s = (time.perf_counter() - calc_started) / rounds
    steady = sizes[1:] or sizes
    per_tick_cluster = (sum(peer_bytes[1:]) / max(1, len(peer_bytes) - 1)) * spec.daemons / max(1, spec.daemons - 1)
    return ScaleResult(
        spec=asdict(spec),
        groups_per_daemon=len(own),
        report_bytes_first=sizes[0],
        report_bytes_per_tick=sum(steady) / len(steady),
        report_bytes_unsuppressed=unsuppressed,
        report_first_compressed=packed[0],
        report_per_tick_compressed={
            c: (sum(p[c] for p in packed[1:]) / max(1, len(packed) - 1)) if packed[0][c] is not None else None
            for c in ("lz4", "zstd")
        },
        report_decode_seconds=_decode_seconds(first_payload),
        groups_sent_share=sent_groups / max(1, len(own) * (spec.ticks - 1)),
        cluster_publish_bytes_per_tick=per_tick_cluster,
        cluster_consume_bytes_per_tick=per_tick_cluster * (spec.daemons - 1),
        map_entries_all=entries_all,
        map_bytes_all=bytes_all,
        map_entries_own=sum(len(e) for e in um_own.groups.values()),
        map_bytes_own=bytes_own,
        receive_seconds_per_tick=receive_s,
        receive_own_seconds_per_tick=receive_own_s,
        calc_seconds_per_tick=calc_s,
        avg_group_name=sum(len(group_name(g)) for g in own) / len(own),
        avg_namespace_name=sum(len(namespace_name(g)) for g in own) / len(own),
        wall_seconds=time.perf_counter() - started,
    )


def _maybe(x: float | None) -> str:
    return "n/a (codec not installed)" if x is None else _mb(x)


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1000:.1f} ms"


def _mb(x: float) -> str:
    return f"{x / 1e6:.2f} MB" if x >= 1e5 else f"{x / 1e3:.1f} KB"


def markdown(r: ScaleResult) -> str:
    s = r.spec
    return "\n".join([
        f"## Scale: {s['daemons']} daemons, {s['groups']} groups, each on {s['spread']} "
        f"({r.groups_per_daemon} per daemon), {s['ticks']} ticks",
        "",
        "| per daemon | measured | PIP-82 estimate |",
        "|---|---:|---:|",
        f"| report published, first tick (all groups) | {_mb(r.report_bytes_first)} "
        f"| {_mb(PIP82['publish_bytes_per_daemon'])} |",
        f"| report published per tick, with suppression | {_mb(r.report_bytes_per_tick)} "
        f"({r.groups_sent_share:.0%} of groups) | — |",
        f"| report with every group (no suppression) | {_mb(r.report_bytes_unsuppressed)} "
        f"| {_mb(PIP82['publish_bytes_per_daemon'])} |",
        f"| first report as published with ZSTD (rgd's default) / LZ4 | {_maybe(r.report_first_compressed['zstd'])} / "
        f"{_maybe(r.report_first_compressed['lz4'])} | {_mb(PIP82['publish_bytes_per_daemon'])} |",
        f"| report per tick with suppression, ZSTD / LZ4 | {_maybe(r.report_per_tick_compressed['zstd'])} / "
        f"{_maybe(r.report_per_tick_compressed['lz4'])} | — |",
        f"| decompress + parse the first report: none / ZSTD / LZ4 | {_ms(r.report_decode_seconds['none'])} / "
        f"{_ms(r.report_decode_seconds['zstd'])} / {_ms(r.report_decode_seconds['lz4'])} | — |",
        f"| usage map, own groups only ({r.map_entries_own} entries) | {_mb(r.map_bytes_own)} "
        f"| {_mb(PIP82['memory_bytes_per_daemon'])} |",
        f"| usage map folding every group, as the daemon did before it filtered ({r.map_entries_all} entries) "
        f"| {_mb(r.map_bytes_all)} | — |",
        f"| decode + vet + fold of all peers' reports per tick (after the first), every group | "
        f"{r.receive_seconds_per_tick * 1000:.0f} ms | — |",
        f"| ... the daemon's groups only (as it folds now) | {r.receive_own_seconds_per_tick * 1000:.0f} ms | — |",
        f"| quota calculator per tick ({r.groups_per_daemon} groups) | {r.calc_seconds_per_tick * 1000:.0f} ms | — |",
        f"| cluster: published / consumed per tick | {_mb(r.cluster_publish_bytes_per_tick)} / "
        f"{_mb(r.cluster_consume_bytes_per_tick)} | {_mb(PIP82['publish_bytes_cluster'])} / "
        f"{_mb(PIP82['consume_bytes_cluster'])} |",
        "",
        f"Names: groups {r.avg_group_name:.0f} B, namespaces {r.avg_namespace_name:.0f} B on average "
        "(PIP-82 assumed 80 B namespace names). Memory is what tracemalloc attributes to the folded "
        "UsageMap (Python objects: dicts, dataclasses, floats), not protobuf wire size. "
        f"Wall time {r.wall_seconds:.0f} s.",
        "",
    ])
