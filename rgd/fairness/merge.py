"""Driver side: the small per-segment results merged into cluster-wide tables (no Spark).

Each decode task returns, besides its series rows, one `SegmentMeta`: its
damage counters, the headers of the reports it logged, exact admitted and
throttled totals per (group, daemon), the receipt tables, and the names behind
the 64-bit keys. From those this module derives membership (who was live at
each tick, and when a daemon was evicted: the barriers forward fill stops at),
frames lost between segments, and report loss, delay and staleness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rgd.fairness.decode import COUNT_FIELDS, KINDS
from rgd.fairness.receipts import (
    NBINS,
    ReceiptTables,
    bin_of,
    boundary_staleness,
    merge_loss,
    quantiles_from_hists,
)


@dataclass(slots=True)
class SegmentMeta:
    uri: str
    size: int
    error: str | None = None  # unreadable, or the decoder failed: the segment is skipped whole
    frames: int = 0
    published: int = 0
    receipts: int = 0
    group_rows: int = 0
    corrupt_regions: int = 0
    bytes_skipped: int = 0
    tail_bytes: int = 0
    frames_lost: int = 0
    bad_payloads: int = 0
    first_index: int = -1
    last_index: int = -1
    writer: int = 0  # key of the daemon that wrote the log
    problems: list[str] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)
    # daemon, incarnation, seq, pub_ms, tick_ms, leaving, groups
    headers: dict[str, np.ndarray] = field(default_factory=dict)
    totals: dict[str, np.ndarray] = field(default_factory=dict)  # group, daemon, counts [n, 8]
    # ACCOUNTING frames: daemon, incarnation, seq, pub_ms, tick_ms, write_us, running totals
    # (admitted/throttled messages/bytes), final, order (log index)
    accounting: dict[str, np.ndarray] = field(default_factory=dict)
    accounted_published: int = 0  # PUBLISHED frames whose counts are in ACCOUNTING frames
    receipt_tables: ReceiptTables | None = None
    series_keys: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))  # (group, chunk)

    @property
    def is_open(self) -> bool:
        return self.uri.endswith(".open")


# columns of the exact totals, in DecodedSegment.counts order: publish_messages_admitted, ... per kind
TOTAL_COLS = tuple(f"{kind}_{field.split('_')[1]}_{field.split('_')[0]}" for kind in KINDS for field in COUNT_FIELDS)


def segments_table(metas: list[SegmentMeta], names: dict[int, str]) -> pd.DataFrame:
    rows = []
    for m in metas:
        tail_damage = 0 if m.is_open else m.tail_bytes
        rows.append({
            "segment": m.uri, "daemon": names.get(m.writer, ""), "bytes": m.size, "frames": m.frames,
            "published": m.published, "receipts": m.receipts, "group_rows": m.group_rows,
            "first_index": m.first_index, "last_index": m.last_index,
            "corrupt_regions": m.corrupt_regions, "bytes_skipped": m.bytes_skipped,
            "torn_tail_bytes": tail_damage, "open_tail_bytes": m.tail_bytes - tail_damage,
            "frames_lost": m.frames_lost, "bad_payloads": m.bad_payloads, "skipped": m.error is not None,
            "error": m.error or "", "open": m.is_open,
        })
    return pd.DataFrame(rows)


def frames_lost_between(segs: pd.DataFrame) -> int:
    """Log indexes missing between consecutive segments of one writer (a deleted or lost segment)."""
    lost = 0
    ok = segs[(segs["first_index"] >= 0) & ~segs["skipped"]]
    for _, g in ok.groupby("daemon"):
        g = g.sort_values("first_index")
        prev_last = None
        for first, last in zip(g["first_index"], g["last_index"]):
            if prev_last is not None and first > prev_last + 1:
                lost += int(first - prev_last - 1)
            prev_last = max(prev_last or -1, last)
    return lost


def damage_summary(segs: pd.DataFrame, metas: list[SegmentMeta]) -> dict[str, Any]:
    problems = [p for m in metas for p in m.problems] + [f"{m.uri}: skipped: {m.error}" for m in metas if m.error]
    damaged = segs[(segs["corrupt_regions"] > 0) | (segs["torn_tail_bytes"] > 0) | segs["skipped"]
                   | (segs["bad_payloads"] > 0)] if not segs.empty else segs
    return {
        "segments_damaged": int(len(damaged)),
        "segments_skipped": int(segs["skipped"].sum()) if not segs.empty else 0,
        "corrupt_regions": int(segs["corrupt_regions"].sum()) if not segs.empty else 0,
        "bytes_skipped": int(segs["bytes_skipped"].sum()) if not segs.empty else 0,
        "torn_tail_bytes": int(segs["torn_tail_bytes"].sum()) if not segs.empty else 0,
        "open_tail_bytes": int(segs["open_tail_bytes"].sum()) if not segs.empty else 0,
        "frames_lost_in_segments": int(segs["frames_lost"].sum()) if not segs.empty else 0,
        "frames_lost_between_segments": frames_lost_between(segs) if not segs.empty else 0,
        "bad_payloads": int(segs["bad_payloads"].sum()) if not segs.empty else 0,
        "problems": problems[:200],
        "problems_total": len(problems),
    }


def headers_frame(metas: list[SegmentMeta]) -> pd.DataFrame:
    parts = [pd.DataFrame(m.headers) for m in metas if m.headers and len(m.headers.get("daemon", ()))]
    cols = ["daemon", "incarnation", "seq", "pub_ms", "tick_ms", "leaving", "groups", "order"]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    return pd.concat(parts, ignore_index=True)


def choose_grid_ms(headers: pd.DataFrame, default: int = 1000) -> int:
    """The most common tick length among the reports (the cluster's tick)."""
    t = headers["tick_ms"][headers["tick_ms"] > 0] if not headers.empty else pd.Series(dtype="int64")
    return int(t.mode().iloc[0]) if len(t) else default


@dataclass(slots=True)
class Membership:
    t_first: int
    t_last: int
    barriers: dict[int, np.ndarray]  # daemon key -> sorted buckets at which it was evicted
    members_n: np.ndarray  # per bucket from t_first
    members_fp: np.ndarray
    events: pd.DataFrame  # daemon, bucket, event ("join", "leave", "silent", "restart")


def membership(headers: pd.DataFrame, grid_ms: int, member_ttl: int,
               extent_ms: tuple[int, int] | None = None) -> Membership:
    """Who is live when, mirroring rgd.cluster.usage_map: join on the first report, a leaving report
    evicts at once, silence longer than `member_ttl` ticks evicts, a new incarnation does not.
    The span runs from the first report to the last, widened to `extent_ms` (first and last
    time of the tick accounting) when given."""
    if headers.empty:
        return Membership(0, -1, {}, np.zeros(0, np.int64), np.zeros(0, np.int64),
                          pd.DataFrame(columns=["daemon", "bucket", "event"]))
    h = headers.assign(bucket=np.floor_divide(headers["pub_ms"].to_numpy(), grid_ms))
    t_first, t_last = int(h["bucket"].min()), int(h["bucket"].max())
    if extent_ms is not None:
        t_first, t_last = min(t_first, extent_ms[0] // grid_ms), max(t_last, extent_ms[1] // grid_ms)
    T = t_last - t_first + 1
    members_n = np.zeros(T, np.int64)
    members_fp = np.zeros(T, np.int64)
    barriers: dict[int, np.ndarray] = {}
    events = []
    key: Any  # a daemon key (pandas types group keys no closer)
    for key, g in h.sort_values(["daemon", "bucket", "order"]).groupby("daemon", sort=False):
        b = g["bucket"].to_numpy() - t_first
        leaving = g["leaving"].to_numpy().astype(bool)
        inc = g["incarnation"].to_numpy()
        cover = np.zeros(T + 1, np.int64)  # difference arrays over buckets
        cut = np.zeros(T + 1, np.int64)
        bars = []
        for i in range(b.size):
            bi = int(b[i])
            nxt = int(b[i + 1]) if i + 1 < b.size else None
            if leaving[i]:
                stop = T if nxt is None else max(nxt, bi + 1)  # not a member until it reports again
                cut[bi] += 1
                cut[stop] -= 1
                bars.append(bi + 1)
                events.append((key, bi + t_first, "leave"))
                continue
            end = bi + member_ttl
            cover[bi] += 1
            cover[min(end, T - 1) + 1] -= 1
            if (nxt is None and end < T - 1) or (nxt is not None and nxt > end):
                bars.append(end + 1)
            if i > 0 and inc[i] != inc[i - 1] and not leaving[i - 1]:
                events.append((key, bi + t_first, "restart"))
        live = (np.cumsum(cover[:T]) > 0) & (np.cumsum(cut[:T]) == 0)
        edges = np.diff(np.concatenate([[False], live, [False]]).astype(np.int8))
        for x in np.flatnonzero(edges == 1):
            events.append((key, int(x) + t_first, "join"))
        left = set(int(x) for x in b[leaving])
        for x in np.flatnonzero(edges == -1):
            if int(x) not in left and int(x) < T:
                events.append((key, int(x) + t_first, "silent"))
        members_n += live
        members_fp += np.where(live, np.int64(key), np.int64(0))
        barriers[int(key)] = np.unique(np.array(bars, dtype=np.int64)) + t_first
    ev = pd.DataFrame(events, columns=["daemon", "bucket", "event"])
    return Membership(t_first, t_last, barriers, members_n, members_fp, ev)


def publisher_gaps(headers: pd.DataFrame) -> int:
    """Sequence numbers missing from publishers' own logs (reports published but not logged)."""
    lost = 0
    for _, g in headers.groupby(["daemon", "incarnation"]):
        s = np.unique(g["seq"].to_numpy())
        if s.size > 1:
            lost += int(s[-1] - s[0] + 1 - s.size)
    return lost


def totals_frame(metas: list[SegmentMeta], names: dict[int, str]) -> pd.DataFrame:
    parts = []
    for m in metas:
        t = m.totals
        if not t or not len(t.get("group", ())):
            continue
        df = pd.DataFrame(t["counts"], columns=list(TOTAL_COLS))
        df.insert(0, "daemon", t["daemon"])
        df.insert(0, "group", t["group"])
        parts.append(df)
    if not parts:
        return pd.DataFrame(columns=["group", "daemon", *TOTAL_COLS])
    df = pd.concat(parts, ignore_index=True).groupby(["group", "daemon"], as_index=False).sum()
    df["group"] = [names.get(int(k), f"#{k}") for k in df["group"]]
    df["daemon"] = [names.get(int(k), f"#{k}") for k in df["daemon"]]
    return df


ACCOUNTING_COLS = ("daemon", "incarnation", "seq", "pub_ms", "tick_ms", "write_us", "admitted_messages",
                   "admitted_bytes", "throttled_messages", "throttled_bytes", "final", "order", "own_admitted_messages")


def accounting_summary(metas: list[SegmentMeta], names: dict[int, str], daemons: list[str]) -> dict[str, Any]:
    """Where the totals come from and how complete they are, per daemon (summary.json "accounting").

    A daemon whose log has ACCOUNTING frames (rgd.usage_log.accounting) is counted from them:
    every message its limiter answered, once. Per incarnation, a gap in their sequence is a
    lost frame whose admitted messages are the running total's difference around it (exact); a
    log that ends without a final frame ended in a crash, losing what was admitted after its
    last frame (the moment is `last_write_s`). A daemon without them (an rgd older than the
    accounting) is counted from its published reports: suppressed ticks are then missing."""
    parts = [pd.DataFrame({c: m.accounting[c] for c in ACCOUNTING_COLS}) for m in metas
             if m.accounting and len(m.accounting.get("daemon", ()))]
    acct = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(ACCOUNTING_COLS))
    marked = {m.writer for m in metas if m.accounted_published}
    per_daemon: dict[str, Any] = {}
    seen = set()
    key: Any
    for key, g in acct.groupby("daemon"):
        name = names.get(int(key), f"#{key}")
        seen.add(name)
        incs = []
        inc: Any
        for inc, h in g.drop_duplicates(["incarnation", "seq"]).sort_values("seq").groupby("incarnation", sort=True):
            seq = h["seq"].to_numpy()
            last = h.iloc[-1]
            incs.append({
                "incarnation": int(inc), "frames": int(len(h)), "missing_frames": int(seq[-1] - len(h)),
                "missing_admitted_messages": int(last["admitted_messages"] - h["own_admitted_messages"].sum()),
                "admitted_messages": int(last["admitted_messages"]),
                "ended": "stopped" if bool(last["final"]) else "crashed",
                "last_write_s": float(last["write_us"]) / 1e6, "last_collect_ms": int(last["pub_ms"]),
            })
        last_inc = incs[-1]
        per_daemon[name] = {
            "source": "tick accounting", "incarnations": incs,
            "missing_frames": sum(i["missing_frames"] for i in incs),
            "missing_admitted_messages": sum(i["missing_admitted_messages"] for i in incs),
            "ended": last_inc["ended"], "crashes": sum(1 for i in incs if i["ended"] == "crashed"),
            "last_write_s": last_inc["last_write_s"], "last_collect_ms": last_inc["last_collect_ms"],
        }
    for name in daemons:
        if name not in seen:
            per_daemon[name] = {"source": "published reports only"}
    legacy = sorted(n for n, d in per_daemon.items() if d["source"] != "tick accounting")
    mixed = [names.get(k, f"#{k}") for k in marked if names.get(k, f"#{k}") not in seen]
    return {
        "source": ("tick accounting" if not legacy else
                   "published reports only" if len(legacy) == len(per_daemon) else "mixed"),
        "daemons_published_only": legacy,
        "daemons_marked_without_frames": sorted(mixed),
        "crashed": sorted(n for n, d in per_daemon.items() if d.get("crashes")),
        "missing_frames": sum(d.get("missing_frames", 0) for d in per_daemon.values()),
        "missing_admitted_messages": sum(d.get("missing_admitted_messages", 0) for d in per_daemon.values()),
        "daemons": per_daemon,
    }


@dataclass(slots=True)
class ReceiptSummary:
    loss: pd.DataFrame  # per receiver, publisher, incarnation
    pairs: pd.DataFrame  # per receiver, publisher: delay and staleness figures
    ticks: pd.DataFrame  # per receiver, bucket
    delay_hist: np.ndarray
    stale_hist: np.ndarray
    delay_max: float
    stale_max: float


def merge_receipts(metas: list[SegmentMeta], names: dict[int, str]) -> ReceiptSummary:
    tables = [m.receipt_tables for m in metas if m.receipt_tables is not None]
    runs = pd.concat([pd.DataFrame(t.runs) for t in tables], ignore_index=True) if tables else pd.DataFrame()
    loss = merge_loss(runs)
    # pairs: add up per (receiver, publisher)
    pair_parts, dh, sh = [], [], []
    for t in tables:
        if len(t.pairs["receiver"]):
            pair_parts.append(pd.DataFrame(t.pairs))
            dh.append(t.delay_hist)
            sh.append(t.stale_hist)
    edges = pd.concat([pd.DataFrame(t.edges) for t in tables], ignore_index=True) if tables else pd.DataFrame()
    bstale = boundary_staleness(edges)
    if pair_parts:
        allp = pd.concat(pair_parts, ignore_index=True)
        dh_all, sh_all = np.vstack(dh), np.vstack(sh)
        keys, inv = np.unique(allp[["receiver", "publisher"]].to_numpy(), axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        k = keys.shape[0]
        delay_hist = np.zeros((k, NBINS), np.int64)
        stale_hist = np.zeros((k, NBINS), np.int64)
        np.add.at(delay_hist, inv, dh_all)
        np.add.at(stale_hist, inv, sh_all)
        agg = pd.DataFrame({"receiver": keys[:, 0], "publisher": keys[:, 1]})
        for col, how in (("n", "sum"), ("delay_sum", "sum"), ("delay_max", "max"), ("delay_min", "min"),
                         ("stale_n", "sum"), ("stale_sum", "sum"), ("stale_max", "max")):
            agg[col] = allp.groupby(inv)[col].agg(how).to_numpy()
        if not bstale.empty:
            pos = pd.Series(np.arange(k), index=pd.MultiIndex.from_arrays([keys[:, 0], keys[:, 1]]))
            idx = pos.reindex(pd.MultiIndex.from_arrays([bstale["receiver"].to_numpy(np.int64),
                                                         bstale["publisher"].to_numpy(np.int64)])).to_numpy()
            ok = ~np.isnan(idx)
            i_ = idx[ok].astype(np.int64)
            sv = bstale["stale_ms"].to_numpy(np.float64)[ok]
            np.add.at(stale_hist, (i_, bin_of(sv)), 1)
            agg["stale_n"] = agg["stale_n"].to_numpy() + np.bincount(i_, minlength=k)
            agg["stale_sum"] = agg["stale_sum"].to_numpy() + np.bincount(i_, weights=sv, minlength=k)
            smax = agg["stale_max"].to_numpy(np.float64).copy()
            np.maximum.at(smax, i_, sv)
            agg["stale_max"] = smax
    else:
        delay_hist = stale_hist = np.zeros((0, NBINS), np.int64)
        agg = pd.DataFrame(columns=["receiver", "publisher", "n", "delay_sum", "delay_max", "delay_min",
                                    "stale_n", "stale_sum", "stale_max"])
    pairs = agg.copy()
    if len(pairs):
        pairs["delay_mean_ms"] = pairs["delay_sum"] / pairs["n"]
        pairs["delay_p50_ms"] = quantiles_from_hists(delay_hist, 0.5, pairs["delay_max"].to_numpy(float))
        pairs["delay_p99_ms"] = quantiles_from_hists(delay_hist, 0.99, pairs["delay_max"].to_numpy(float))
        pairs["stale_mean_ms"] = pairs["stale_sum"] / pairs["stale_n"].where(pairs["stale_n"] > 0)
        pairs["stale_p99_ms"] = quantiles_from_hists(stale_hist, 0.99, pairs["stale_max"].to_numpy(float))
    tick_parts = [pd.DataFrame(t.ticks) for t in tables if len(t.ticks["receiver"])]
    if tick_parts:
        tk = pd.concat(tick_parts, ignore_index=True).groupby(["receiver", "bucket"], as_index=False).agg(
            n=("n", "sum"), delay_sum=("delay_sum", "sum"), delay_max=("delay_max", "max"),
            stale_max=("stale_max", "max"))
        tk["delay_mean_ms"] = tk["delay_sum"] / tk["n"]
        tk["stale_max"] = tk["stale_max"].where(np.isfinite(tk["stale_max"]))
    else:
        tk = pd.DataFrame(columns=["receiver", "bucket", "n", "delay_sum", "delay_max", "stale_max", "delay_mean_ms"])
    for df in (loss, pairs, tk):
        for col in ("receiver", "publisher"):
            if col in df.columns:
                df[col] = [names.get(int(k), f"#{k}") for k in df[col]]
    return ReceiptSummary(loss, pairs, tk, delay_hist.sum(axis=0) if len(delay_hist) else np.zeros(NBINS, np.int64),
                          stale_hist.sum(axis=0) if len(stale_hist) else np.zeros(NBINS, np.int64),
                          float(pairs["delay_max"].max()) if len(pairs) else float("nan"),
                          float(pairs["stale_max"].max()) if len(pairs) else float("nan"))


__all__ = [
    "ACCOUNTING_COLS",
    "TOTAL_COLS",
    "Membership",
    "ReceiptSummary",
    "SegmentMeta",
    "accounting_summary",
    "choose_grid_ms",
    "damage_summary",
    "frames_lost_between",
    "headers_frame",
    "membership",
    "merge_receipts",
    "publisher_gaps",
    "segments_table",
    "totals_frame"
]
