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

from dataclasses import dataclass

import numpy as np

from rgd.report.decode import (
    COUNT_FIELDS, F_INDEX, G_HASH, G_REP, KINDS, LIMIT_FIELDS, PER_KIND, R_DHASH, R_PUB_MS, R_TICK_MS,
    DecodedSegment, njit,
)

UNITS = ("messages", "bytes")
# One dimension per traffic kind in the schema and unit: publish_messages, publish_bytes, dispatch_messages, ...
DIMS: tuple[str, ...] = tuple(f"{k}_{u}" for k in KINDS for u in UNITS)
# per dimension: (admitted, throttled) columns in DecodedSegment.counts, (limit, quota) columns in .limits
COUNT_OF = tuple((PER_KIND * i + COUNT_FIELDS.index(f"admitted_{u}"), PER_KIND * i + COUNT_FIELDS.index(f"throttled_{u}"))
                 for i in range(len(KINDS)) for u in UNITS)
LIMIT_OF = tuple((PER_KIND * i + LIMIT_FIELDS.index(f"limit_{u}"), PER_KIND * i + LIMIT_FIELDS.index(f"quota_{u}"))
                 for i in range(len(KINDS)) for u in UNITS)


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
        return np.floor_divide(ms, self.grid_ms).astype(np.int64)


@dataclass(slots=True)
class SeriesRow:
    group_key: int
    chunk: int
    daemon_key: int
    order: int  # first log index of the segment: later segments overwrite limits
    b0: int
    n: int
    dims: int  # bit k set: dimension k present in blob
    blob: bytes


def pack_blob(reports: np.ndarray, tick_ms: np.ndarray, per_dim: list[tuple[np.ndarray, ...]]) -> bytes:
    """Series arrays of one row -> bytes.

    Layout: int32 run count per dimension; uint16 reports[n]; float32 tick_ms[n];
    per dimension float32 admitted[n], throttled[n], limit[n]; then per
    dimension the quota run-length encoded (int32 starts[r], float64 values[r]).
    Counts and limits as float32 (rates need no more; exact totals travel in
    SegmentMeta.totals); the quota, which rarely changes, as runs, forward-filled
    over unreported buckets first so a suppressed tick does not start a run.
    """
    runs = []
    for adm, thr, lim, quo in per_dim:
        q = quo.copy()
        has = reports > 0
        idx = np.where(has, np.arange(q.size), 0)
        np.maximum.accumulate(idx, out=idx)
        q = q[idx]
        change = np.flatnonzero(np.concatenate([[True], q[1:] != q[:-1]]))
        runs.append((change.astype(np.int32), q[change].astype(np.float64)))
    parts = [np.array([r[0].size for r in runs], np.int32).tobytes(), reports.astype(np.uint16).tobytes(),
             tick_ms.astype(np.float32).tobytes()]
    for adm, thr, lim, _ in per_dim:
        parts += [adm.astype(np.float32).tobytes(), thr.astype(np.float32).tobytes(), lim.astype(np.float32).tobytes()]
    for starts, vals in runs:
        parts += [starts.tobytes(), vals.tobytes()]
    return b"".join(parts)


def unpack_blob(blob: bytes, n: int, dims: int) -> dict[tuple[str, int], np.ndarray]:
    """The arrays of one series row, keyed by (field, dimension or -1); inverse of pack_blob."""
    present = [k for k in range(len(DIMS)) if dims >> k & 1]
    off = 4 * len(present)
    nruns = np.frombuffer(blob, np.int32, count=len(present), offset=0)
    out = {}

    def take(dt: type, count: int) -> np.ndarray:
        nonlocal off
        a = np.frombuffer(blob, dt, count=count, offset=off)
        off += a.nbytes
        return a

    out[("reports", -1)] = take(np.uint16, n)
    out[("tick_ms", -1)] = take(np.float32, n)
    for k in present:
        out[("admitted", k)] = take(np.float32, n)
        out[("throttled", k)] = take(np.float32, n)
        out[("limit", k)] = take(np.float32, n)
    for k, r in zip(present, nruns.tolist()):
        starts = take(np.int32, r)
        vals = take(np.float64, r)
        q = np.empty(n)
        bounds = np.append(starts, n)
        q[:] = np.repeat(vals, np.diff(bounds)) if r else np.nan
        out[("quota", k)] = q
    return out


# dense fields per (key, bucket): reports, tick_ms, then per dimension admitted, throttled, limit, quota
NF = 2 + 4 * len(DIMS)


@njit(cache=True, nogil=True)
def _dense(kid, bidx, tick, counts, limits, nkeys, nb, count_of, limit_of):  # pragma: no cover - compiled
    """Scatter group rows (log order) into [nkeys, nb, NF]; later rows overwrite limit and quota.

    The width comes from `count_of`, not the global NF: numba's cache keys on
    this file's source, and NF follows the wire schema (one more traffic kind
    would otherwise run a stale compiled width)."""
    arr = np.zeros((nkeys, nb, 2 + 4 * count_of.shape[0]))
    dims = np.zeros(nkeys, np.int64)
    for i in range(kid.size):
        k = kid[i]
        b = bidx[i]
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
                dims[k] |= 1 << d
    return arr, dims


COUNT_OF_A = np.array(COUNT_OF, dtype=np.int64)
LIMIT_OF_A = np.array(LIMIT_OF, dtype=np.int64)
DENSE_BUDGET = 1 << 28  # bytes of the dense scatter array per batch of keys


def segment_series(seg: DecodedSegment, grid: Grid) -> list[SeriesRow]:
    """One row per (group, daemon, chunk) touched by this segment's reports."""
    import pandas as pd

    gm = seg.group_meta
    if gm.shape[0] == 0:
        return []
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
    counts = np.ascontiguousarray(seg.counts, dtype=np.float64)
    limits = np.ascontiguousarray(seg.limits, dtype=np.float64)
    per_batch = max(1, DENSE_BUDGET // (nb * NF * 8))
    L, lb = grid.chunk_ticks, grid.lookback
    out: list[SeriesRow] = []
    for k0 in range(0, nkeys_all, per_batch):
        k1 = min(nkeys_all, k0 + per_batch)
        sel = (kid_all >= k0) & (kid_all < k1) if (k0 or k1 < nkeys_all) else slice(None)
        arr, dims = _dense(np.ascontiguousarray(kid_all[sel] - k0), np.ascontiguousarray(bidx_all[sel]),
                           np.ascontiguousarray(tick[sel]), counts[sel], limits[sel], k1 - k0, nb,
                           COUNT_OF_A, LIMIT_OF_A)
        for k in range(k1 - k0):
            rep_k = arr[k, :, 0]
            hit = np.flatnonzero(rep_k)
            if hit.size == 0:
                continue
            first, last = int(hit[0]) + bmin, int(hit[-1]) + bmin
            dm = int(dims[k])
            g_key, d_key = int(guniq[(k + k0) // duniq.size]), int(duniq[(k + k0) % duniq.size])
            for c in range(grid.chunk_of(first), grid.chunk_of(last + lb) + 1):
                lo = max(first, grid.chunk_start(c) - lb)
                hi = min(last, grid.chunk_start(c) + L - 1)
                if lo > hi:
                    continue
                sl = slice(lo - bmin, hi - bmin + 1)
                per_dim = [(arr[k, sl, 2 + 4 * d], arr[k, sl, 3 + 4 * d], arr[k, sl, 4 + 4 * d], arr[k, sl, 5 + 4 * d])
                           for d in range(len(DIMS)) if dm >> d & 1]
                out.append(SeriesRow(g_key, c, d_key, order, lo, hi - lo + 1, dm,
                                     pack_blob(arr[k, sl, 0], arr[k, sl, 1], per_dim)))
    return out


@dataclass(slots=True)
class ChunkMatrix:
    """One group's chunk as [D, W] matrices over buckets w0 .. w0 + W - 1."""

    w0: int
    daemons: np.ndarray  # daemon keys, row order
    reports: np.ndarray  # [D, W] reports per bucket
    tick_ms: np.ndarray  # [D, W]
    admitted: dict[int, np.ndarray]  # dim -> [D, W] summed counts
    throttled: dict[int, np.ndarray]
    limit: dict[int, np.ndarray]  # dim -> [D, W] (inf = unlimited), NaN where not reported
    quota: dict[int, np.ndarray]


def assemble(rows: list[SeriesRow], w0: int, width: int) -> ChunkMatrix:
    """Scatter a chunk's rows into dense matrices (sum counts; later segments overwrite limits)."""
    daemons = np.array(sorted({r.daemon_key for r in rows}), dtype=np.int64)
    di = {k: i for i, k in enumerate(daemons.tolist())}
    D = daemons.size
    reports = np.zeros((D, width), np.int64)
    tick = np.zeros((D, width))
    dims = 0
    for r in rows:
        dims |= r.dims
    adm = {k: np.zeros((D, width)) for k in range(len(DIMS)) if dims >> k & 1}
    thr = {k: np.zeros((D, width)) for k in adm}
    lim = {k: np.full((D, width), np.nan) for k in adm}
    quo = {k: np.full((D, width), np.nan) for k in adm}
    for r in sorted(rows, key=lambda r: (r.daemon_key, r.order)):
        d = di[r.daemon_key]
        lo = max(r.b0, w0)
        hi = min(r.b0 + r.n, w0 + width)
        if lo >= hi:
            continue
        a = unpack_blob(r.blob, r.n, r.dims)
        src = slice(lo - r.b0, hi - r.b0)
        dst = slice(lo - w0, hi - w0)
        rep = a[("reports", -1)][src]
        reports[d, dst] += rep
        tick[d, dst] += a[("tick_ms", -1)][src]
        has = rep > 0
        for k in adm:
            if not r.dims >> k & 1:
                # this daemon reported no traffic and no quota in k: zeros, unlimited
                lim[k][d, dst] = np.where(has, np.inf, lim[k][d, dst])
                quo[k][d, dst] = np.where(has, np.inf, quo[k][d, dst])
                continue
            adm[k][d, dst] += a[("admitted", k)][src]
            thr[k][d, dst] += a[("throttled", k)][src]
            lim[k][d, dst] = np.where(has, a[("limit", k)][src], lim[k][d, dst])
            quo[k][d, dst] = np.where(has, a[("quota", k)][src], quo[k][d, dst])
    return ChunkMatrix(w0, daemons, reports, tick, adm, thr, lim, quo)


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
