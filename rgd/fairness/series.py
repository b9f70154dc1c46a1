"""Dense per-(group, daemon) time series: built per segment, reassembled per (group, chunk).

The grid: tick buckets `b = floor(publish_time_ms / grid_ms)` on the Unix
epoch, cut in chunks of `chunk_ticks` buckets from `origin` (any bucket every
task agrees on; the driver picks one near the start of the data so a short
run fits in one chunk): `chunk = (b - origin) // chunk_ticks`.
A segment's reports of one group become, per chunk they touch, ONE row whose
`blob` holds dense arrays over the buckets it covers: reports per bucket, the
summed tick length, and per dimension the summed admitted and throttled counts
and the last limit and quota (see pack_blob). So the shuffle moves a few thousand large rows
per segment instead of one row per report and group (36 M in the benchmark),
and each reducer sees the whole of one group's chunk at once. Rows of the last
`lookback` buckets before a chunk are sent to that chunk too, so forward fill
and the first tick's fair shift need nothing from other chunks.

Reduce side, per daemon: the value at bucket b is the one of the daemon's last
report of the group at or before b (PIP-82 suppression leaves out groups that
did not move, like the usage map keeps them), as long as it is at most
`group_ttl` buckets old and no eviction (leaving, silence) came in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rgd.fairness.decode import (
    COUNT_FIELDS,
    F_INDEX,
    G_HASH,
    G_REP,
    KINDS,
    LIMIT_FIELDS,
    PER_KIND,
    R_DHASH,
    R_PUB_MS,
    R_TICK_MS,
    Arr,
    DecodedSegment,
    Int,
    njit,
)

UNITS = ("messages", "bytes")
# One dimension per traffic kind in the schema and unit: publish_messages, publish_bytes, dispatch_messages, ...
DIMS: tuple[str, ...] = tuple(f"{k}_{u}" for k in KINDS for u in UNITS)
# per dimension: (admitted, throttled) columns in DecodedSegment.counts, (limit, quota) columns in .limits
COUNT_OF = tuple((PER_KIND * i + COUNT_FIELDS.index(f"admitted_{u}"),
                  PER_KIND * i + COUNT_FIELDS.index(f"throttled_{u}")) for i in range(len(KINDS)) for u in UNITS)
LIMIT_OF = tuple((PER_KIND * i + LIMIT_FIELDS.index(f"limit_{u}"),
                  PER_KIND * i + LIMIT_FIELDS.index(f"quota_{u}")) for i in range(len(KINDS)) for u in UNITS)


# A series row's `dims` bit (above every dimension's): its counts are tick accounting (rgd.usage_log.
# accounting), every count once in the bucket it was collected in, so a bucket without a row had
# none (its counts went to the next one): the reducer takes counts per bucket, without forward fill.
ACCOUNTED_BIT = 1 << 62


@dataclass(frozen=True, slots=True)
class Grid:
    grid_ms: int
    chunk_ticks: int
    lookback: int
    origin: int = 0

    def chunk_of(self, b: int) -> int:
        return (b - self.origin) // self.chunk_ticks

    def chunk_start(self, c: int) -> int:
        return self.origin + c * self.chunk_ticks

    def bucket(self, ms: np.ndarray) -> np.ndarray:
        buckets: np.ndarray = np.floor_divide(ms, self.grid_ms).astype(np.int64)
        return buckets


@dataclass(slots=True)
class SeriesRow:
    group_key: int
    chunk: int
    daemon_key: int
    order: int  # first log index of the segment: later segments overwrite limits
    b0: int
    n: int
    dims: int  # bit k set: dimension k present in blob; ACCOUNTED_BIT: counts are tick accounting
    blob: bytes


@njit(cache=True, nogil=True)
def _rle(cols: Arr, filled: Arr) -> tuple[Arr, Arr, Arr]:  # pragma: no cover - compiled
    """Runs of each column of `cols` [n, c]: (int32 counts[c], int32 starts, float64 values), all columns'
    runs concatenated. Columns with `filled[j]` first take, in buckets without a report (cols[:, 0] == 0),
    the value of the last bucket that had one."""
    n, c = cols.shape
    counts = np.zeros(c, np.int32)
    starts = np.empty(n * c, np.int32)
    values = np.empty(n * c, np.float64)
    m = 0
    for j in range(c):
        prev = np.nan
        for i in range(n):
            v = cols[i, j]
            if filled[j] and i > 0 and cols[i, 0] == 0:
                v = prev
            if i == 0 or not (v == prev or (v != v and prev != prev)):
                starts[m] = i
                values[m] = v
                m += 1
                counts[j] += 1
            prev = v
    return counts, starts[:m], values[:m]


def pack_blob(reports: np.ndarray, tick_ms: np.ndarray, per_dim: Sequence[tuple[np.ndarray, ...]]) -> bytes:
    """Series arrays of one row -> bytes.

    Layout: int32 run count of each run-length column; all their float64 run
    values, then all their int32 run starts, column after column (values
    first, so they stay 8-byte aligned): reports
    per bucket, summed tick_ms, then per dimension the limit and the quota;
    then per dimension float32 admitted[n] and throttled[n]. Counts as float32
    (rates need no more; exact totals travel in SegmentMeta.totals). Reports,
    tick lengths, limits and quotas change rarely, so they go as runs: the
    shuffle carries about 8 bytes per bucket and dimension instead of 18.
    Limits and quotas count only where a report is (the reducer takes them
    there), so they are forward-filled over unreported buckets first, which
    keeps a suppressed tick from starting a run; reports and tick lengths are
    summed across rows by the reducer and go exactly as they are.
    """
    cols = np.empty((reports.size, 2 + 2 * len(per_dim)))
    cols[:, 0], cols[:, 1] = reports, tick_ms
    for i, (_, _, lim, quo) in enumerate(per_dim):
        cols[:, 2 + 2 * i], cols[:, 3 + 2 * i] = lim, quo
    filled = np.ones(cols.shape[1], np.bool_)
    filled[:2] = False
    counts, starts, values = _rle(cols, filled)
    parts = [counts.tobytes(), values.tobytes(), starts.tobytes()]
    for adm, thr, _, _ in per_dim:
        parts += [adm.astype(np.float32).tobytes(), thr.astype(np.float32).tobytes()]
    return b"".join(parts)


def unpack_blob(blob: bytes, n: int, dims: int) -> dict[tuple[str, int], np.ndarray]:
    """The arrays of one series row, keyed by (field, dimension or -1); inverse of pack_blob."""
    present = [k for k in range(len(DIMS)) if dims >> k & 1]
    ncols = 2 + 2 * len(present)
    nruns = np.frombuffer(blob, np.int32, count=ncols)
    total = int(nruns.sum())
    off = 4 * ncols
    values = np.frombuffer(blob, np.float64, count=total, offset=off)
    starts = np.frombuffer(blob, np.int32, count=total, offset=off + 8 * total)
    off += 12 * total
    bounds = np.concatenate(([0], np.cumsum(nruns)))
    cols = []
    for j in range(ncols):
        s0, s1 = int(bounds[j]), int(bounds[j + 1])
        cols.append(np.repeat(values[s0:s1], np.diff(np.append(starts[s0:s1], n))) if s1 > s0 else np.full(n, np.nan))
    out = {("reports", -1): cols[0].astype(np.int64), ("tick_ms", -1): cols[1]}
    for i, k in enumerate(present):
        out[("limit", k)] = cols[2 + 2 * i]
        out[("quota", k)] = cols[3 + 2 * i]
        out[("admitted", k)] = np.frombuffer(blob, np.float32, count=n, offset=off + 8 * n * i)
        out[("throttled", k)] = np.frombuffer(blob, np.float32, count=n, offset=off + 8 * n * i + 4 * n)
    return out


# dense fields per (key, bucket): reports, tick_ms, then per dimension admitted, throttled, limit, quota


@njit(cache=True, nogil=True)
def _dense(kid: Arr, bidx: Arr, tick: Arr, counts: Arr, icounts: Arr, limits: Arr, nkeys: Int, nb: Int,
           count_of: Arr, limit_of: Arr, dim_ids: Arr) -> tuple[Arr, Arr, Arr]:  # pragma: no cover
    """Scatter group rows (log order) into [nkeys, nb, 2 + 4 * dims]; later rows overwrite limit and quota.

    Only the dimensions in `dim_ids` (rows of count_of/limit_of): the ones
    this segment has any traffic or quota in; `dims` gets their DIMS bits.
    The width comes from the arguments, not a global: numba's cache keys on
    this file's source, and DIMS follows the wire schema (one more traffic
    kind would otherwise run a stale compiled width)."""
    arr = np.zeros((nkeys, nb, 2 + 4 * count_of.shape[0]))
    dims = np.zeros(nkeys, np.int64)
    totals = np.zeros((nkeys, icounts.shape[1]), np.int64)  # exact: summed as the integers they are
    for i in range(kid.size):
        k = kid[i]
        b = bidx[i]
        for c in range(icounts.shape[1]):
            totals[k, c] += icounts[i, c]
        arr[k, b, 0] += 1.0
        arr[k, b, 1] += tick[i]
        for d in range(count_of.shape[0]):
            a = counts[i, count_of[d, 0]]
            t = counts[i, count_of[d, 1]]
            lim = limits[i, limit_of[d, 0]]
            quo = limits[i, limit_of[d, 1]]
            arr[k, b, 2 + 4 * d] += a
            arr[k, b, 3 + 4 * d] += t
            arr[k, b, 4 + 4 * d] = np.inf if lim < 0 else lim
            arr[k, b, 5 + 4 * d] = np.inf if quo < 0 else quo
            if quo >= 0 or a != 0 or t != 0:
                dims[k] |= 1 << dim_ids[d]
    return arr, dims, totals


COUNT_OF_A = np.array(COUNT_OF, dtype=np.int64)
LIMIT_OF_A = np.array(LIMIT_OF, dtype=np.int64)
DENSE_BUDGET = 1 << 28  # bytes of the dense scatter array per batch of keys


def segment_series(seg: DecodedSegment, grid: Grid) -> tuple[list[SeriesRow], dict[str, np.ndarray]]:
    """One row per (group, daemon, chunk) touched by this segment's reports, and the exact totals:
    {"group": keys, "daemon": keys, "counts": int64 [n, PER_KIND * kinds]} per (group, daemon)."""
    import pandas as pd

    gm = seg.group_meta
    if gm.shape[0] == 0:
        return [], {}
    R = seg.reports
    rep = gm[:, G_REP]
    bucket = grid.bucket(R[rep, R_PUB_MS])
    tick = R[rep, R_TICK_MS].astype(np.float64)
    tick = np.where(tick > 0, tick, float(grid.grid_ms))
    gcode, guniq = pd.factorize(gm[:, G_HASH])
    dcode, duniq = pd.factorize(R[rep, R_DHASH])
    guniq, duniq = np.asarray(guniq, np.int64), np.asarray(duniq, np.int64)
    kid_all = gcode.astype(np.int64) * duniq.size + dcode
    nkeys_all = guniq.size * duniq.size
    bmin = int(bucket.min())
    nb = int(bucket.max()) - bmin + 1
    bidx_all = bucket - bmin
    order = int(seg.frames[F_INDEX, 0]) if seg.frames.shape[1] else 0
    # A log with accounting frames has its published reports' rows skipped: every row is accounting.
    accounted = ACCOUNTED_BIT if seg.accounting.size else 0
    icounts = np.ascontiguousarray(seg.counts, dtype=np.int64)
    counts = icounts.astype(np.float64)
    limits = np.ascontiguousarray(seg.limits, dtype=np.float64)
    if accounted:
        # Each collect's counts over the buckets its span covers, in proportion: a tick that ran
        # late puts its counts where they happened, not two ticks' worth in one bucket. The
        # exact totals take each row once (its first piece).
        row, bucket, tick, weight, first_piece = spread_over_buckets(R[rep, R_PUB_MS].astype(np.float64), tick,
                                                                     grid.grid_ms)
        kid_all = kid_all[row]
        counts = counts[row] * weight[:, None]
        icounts = np.where(first_piece[:, None], icounts[row], 0)
        limits = limits[row]
        bmin = int(bucket.min())
        nb = int(bucket.max()) - bmin + 1
        bidx_all = bucket - bmin
    tot_keys, tot_counts = [], []
    # dimensions with traffic or a quota anywhere in the segment: the others would scatter zeros
    dim_ids = np.array([d for d, ((a, t), (_, q)) in enumerate(zip(COUNT_OF, LIMIT_OF))
                        if (icounts[:, a] != 0).any() or (icounts[:, t] != 0).any() or (limits[:, q] >= 0).any()],
                       np.int64)
    count_of, limit_of = COUNT_OF_A[dim_ids], LIMIT_OF_A[dim_ids]
    per_batch = max(1, DENSE_BUDGET // (nb * (2 + 4 * dim_ids.size) * 8))
    L, lb = grid.chunk_ticks, grid.lookback
    out: list[SeriesRow] = []
    for k0 in range(0, nkeys_all, per_batch):
        k1 = min(nkeys_all, k0 + per_batch)
        sel = (kid_all >= k0) & (kid_all < k1) if (k0 or k1 < nkeys_all) else slice(None)
        arr, dims, totals = _dense(np.ascontiguousarray(kid_all[sel] - k0), np.ascontiguousarray(bidx_all[sel]),
                                   np.ascontiguousarray(tick[sel]), counts[sel], icounts[sel], limits[sel], k1 - k0,
                                   nb, count_of, limit_of, dim_ids)
        for k in range(k1 - k0):
            rep_k = arr[k, :, 0]
            hit = np.flatnonzero(rep_k)
            if hit.size == 0:
                continue
            tot_keys.append(k + k0)
            tot_counts.append(totals[k])
            first, last = int(hit[0]) + bmin, int(hit[-1]) + bmin
            dm = int(dims[k]) | accounted
            g_key, d_key = int(guniq[(k + k0) // duniq.size]), int(duniq[(k + k0) % duniq.size])
            for c in range(grid.chunk_of(first), grid.chunk_of(last + lb) + 1):
                lo = max(first, grid.chunk_start(c) - lb)
                hi = min(last, grid.chunk_start(c) + L - 1)
                if lo > hi:
                    continue
                sl = slice(lo - bmin, hi - bmin + 1)
                per_dim = [(arr[k, sl, 2 + 4 * j], arr[k, sl, 3 + 4 * j], arr[k, sl, 4 + 4 * j], arr[k, sl, 5 + 4 * j])
                           for j, d in enumerate(dim_ids.tolist()) if dm >> d & 1]
                out.append(SeriesRow(g_key, c, d_key, order, lo, hi - lo + 1, dm,
                                     pack_blob(arr[k, sl, 0], arr[k, sl, 1], per_dim)))
    keys = np.array(tot_keys, np.int64)
    totals_out = {"group": guniq[keys // duniq.size], "daemon": duniq[keys % duniq.size],
                  "counts": np.array(tot_counts, np.int64).reshape(keys.size, icounts.shape[1])}
    return out, totals_out


MAX_SPREAD_BUCKETS = 3600  # a collect's span over more buckets than this goes into the last ones


def spread_over_buckets(end_ms: np.ndarray, span_ms: np.ndarray, grid_ms: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows whose counts cover (end - span, end] in ms, cut at bucket borders: per piece its row,
    bucket, length (ms), share of the row's span, and whether it is the row's first piece.
    Pieces come in row order, and within a row by bucket."""
    end = np.asarray(end_ms, np.float64)
    span = np.maximum(np.asarray(span_ms, np.float64), 1e-3)
    start = end - span
    last = np.floor_divide(end - 1e-6, grid_ms).astype(np.int64)
    b0 = np.maximum(np.floor_divide(start, grid_ms).astype(np.int64), last - (MAX_SPREAD_BUCKETS - 1))
    start = np.maximum(start, b0 * float(grid_ms))
    rows, buckets, lengths = [], [], []
    for k in range(int((last - b0).max()) + 1 if end.size else 0):
        sel = np.flatnonzero(last - b0 >= k)
        b = b0[sel] + k
        lo = np.maximum(start[sel], b * float(grid_ms))
        hi = np.minimum(end[sel], (b + 1) * float(grid_ms))
        rows.append(sel)
        buckets.append(b)
        lengths.append(np.maximum(hi - lo, 0.0))
    row = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    bucket = np.concatenate(buckets) if buckets else np.zeros(0, np.int64)
    length = np.concatenate(lengths) if lengths else np.zeros(0)
    order = np.argsort(row, kind="stable")
    row, bucket, length = row[order], bucket[order], length[order]
    total = np.zeros(end.size)
    np.add.at(total, row, length)
    weight = length / np.where(total[row] > 0, total[row], 1.0)
    first = np.ones(row.size, np.bool_)
    first[1:] = row[1:] != row[:-1]
    return row, bucket, np.where(length > 0, length, 1e-3), weight, first


@dataclass(slots=True)
class ChunkMatrix:
    """One group's chunk as [D, W] matrices over buckets w0 .. w0 + W - 1."""

    w0: int
    daemons: np.ndarray  # daemon keys, row order
    accounted: np.ndarray  # [D] bool: the daemon's counts are tick accounting (ACCOUNTED_BIT)
    reports: np.ndarray  # [D, W] reports per bucket
    tick_ms: np.ndarray  # [D, W]
    admitted: dict[int, np.ndarray]  # dim -> [D, W] summed counts
    throttled: dict[int, np.ndarray]
    limit: dict[int, np.ndarray]  # dim -> [D, W] (inf = unlimited), NaN where not reported
    quota: dict[int, np.ndarray]


@njit(cache=True, nogil=True)
def _scatter(reports: Arr, tick: Arr, A: Arr, T: Arr, L: Arr, Q: Arr, d: Int, src_lo: Int, dst_lo: Int,
             count: Int, n: Int, nruns: Arr, values: Arr, starts: Arr, dense: Arr, rpos: Arr,
             missing: Arr) -> None:  # pragma: no cover - compiled
    """One row's blob sections into daemon row `d` of the chunk matrices, buckets [src_lo, src_lo + count)
    of the row to [dst_lo, ...) of the chunk. Reports, tick lengths and counts add up; where this row has
    a report, its limit and quota replace what an earlier segment said. `rpos`: matrix slot of each of the
    row's dimensions; `missing`: slots of dimensions the row does not carry (where it reports: unlimited)."""
    ncols = nruns.size
    cols = np.empty((ncols, count))
    k = 0
    for j in range(ncols):  # expand the runs over the buckets taken
        for r in range(nruns[j]):
            s0 = starts[k + r]
            s1 = starts[k + r + 1] if r + 1 < nruns[j] else n
            for i in range(max(s0, src_lo), min(s1, src_lo + count)):
                cols[j, i - src_lo] = values[k + r]
        k += nruns[j]
    for i in range(count):
        t = dst_lo + i
        rep = cols[0, i]
        reports[d, t] += np.int64(rep)
        tick[d, t] += cols[1, i]
        has = rep > 0
        for m in range(rpos.size):
            p = rpos[m]
            A[p, d, t] += dense[2 * m * n + src_lo + i]
            T[p, d, t] += dense[(2 * m + 1) * n + src_lo + i]
            if has:
                L[p, d, t] = cols[2 + 2 * m, i]
                Q[p, d, t] = cols[3 + 2 * m, i]
        if has:
            for p in missing:
                L[p, d, t] = np.inf
                Q[p, d, t] = np.inf


def assemble(rows: list[SeriesRow], w0: int, width: int) -> ChunkMatrix:
    """Scatter a chunk's rows into dense matrices (sum counts; later segments overwrite limits).

    Rows go in (daemon, log order), so a later segment's limit wins where two
    segments of a daemon cover the same bucket. A row that does not carry a
    dimension reported no traffic and no quota in it: zeros, unlimited.
    """
    daemons = np.array(sorted({r.daemon_key for r in rows}), dtype=np.int64)
    di = {k: i for i, k in enumerate(daemons.tolist())}
    D = daemons.size
    accounted = np.zeros(D, np.bool_)
    for r in rows:
        if r.dims & ACCOUNTED_BIT:
            accounted[di[r.daemon_key]] = True
    dims = 0
    for r in rows:
        dims |= r.dims
    union = [k for k in range(len(DIMS)) if dims >> k & 1]
    slot = {k: i for i, k in enumerate(union)}
    K = len(union)
    reports = np.zeros((D, width), np.int64)
    tick = np.zeros((D, width))
    A = np.zeros((K, D, width))
    T = np.zeros((K, D, width))
    L = np.full((K, D, width), np.nan)
    Q = np.full((K, D, width), np.nan)
    for r in sorted(rows, key=lambda r: (r.daemon_key, r.order)):
        lo = max(r.b0, w0)
        hi = min(r.b0 + r.n, w0 + width)
        if lo >= hi:
            continue
        present = [k for k in union if r.dims >> k & 1]
        ncols = 2 + 2 * len(present)
        nruns = np.frombuffer(r.blob, np.int32, count=ncols)
        total = int(nruns.sum())
        off = 4 * ncols
        values = np.frombuffer(r.blob, np.float64, count=total, offset=off)
        starts = np.frombuffer(r.blob, np.int32, count=total, offset=off + 8 * total)
        dense = np.frombuffer(r.blob, np.float32, count=2 * len(present) * r.n, offset=off + 12 * total)
        _scatter(reports, tick, A, T, L, Q, di[r.daemon_key], lo - r.b0, lo - w0, hi - lo, r.n, nruns, values,
                 starts, dense, np.array([slot[k] for k in present], np.int64),
                 np.array([slot[k] for k in union if not r.dims >> k & 1], np.int64))
    return ChunkMatrix(w0, daemons, accounted, reports, tick, {k: A[slot[k]] for k in union},
                       {k: T[slot[k]] for k in union}, {k: L[slot[k]] for k in union}, {k: Q[slot[k]] for k in union})


def forward_fill_index(reported: np.ndarray, w0: int, group_ttl: int,
                       barriers: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """For each (daemon, bucket): the column of the report in force, and whether it is live.

    Live: there is a report at or before the bucket, at most `group_ttl` buckets
    old, and no barrier (eviction bucket of that daemon, from `barriers[d]`,
    sorted absolute buckets) lies in (report, bucket].
    """
    D, W = reported.shape
    cols = np.arange(W)
    last = np.maximum.accumulate(np.where(reported, cols[None, :], -1), axis=1)
    live = (last >= 0) & (cols[None, :] - last <= group_ttl)
    safe_last = np.maximum(last, 0)
    for d in range(D):
        b = barriers[d]
        if b.size == 0:
            continue
        count_at = np.searchsorted(b, w0 + cols, side="right")  # barriers <= bucket
        live[d] &= count_at == count_at[safe_last[d]]
    return safe_last, live


__all__ = [
    "ACCOUNTED_BIT",
    "COUNT_OF",
    "COUNT_OF_A",
    "DENSE_BUDGET",
    "DIMS",
    "LIMIT_OF",
    "LIMIT_OF_A",
    "UNITS",
    "ChunkMatrix",
    "Grid",
    "SeriesRow",
    "assemble",
    "forward_fill_index",
    "pack_blob",
    "segment_series",
    "spread_over_buckets",
    "unpack_blob"
]
