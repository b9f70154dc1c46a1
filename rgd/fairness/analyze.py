"""One group's chunk of ticks: from series rows to tick, share and per-daemon figures (no Spark).

`analyze_chunk` returns a ChunkResult: the tick rows (one per group,
dimension and tick where any daemon has a live value, as an Arrow table),
the shares (per dimension, bin of `bin_ticks` ticks and daemon: mean admitted
rate, demand, fair share, limit), the per-daemon sums of the chunk, and per
dimension the partial aggregates of the summary, the binned chart series, the
chunk's worst ticks and its convergence events (`small`). The Spark task
writes ticks and shares as Parquet files itself and hands back only the
bounded rest, so the driver never scans the tick table.
Rates are per second: counts * 1000 / tick_ms of the report in force, or, for a daemon whose log
keeps tick accounting, the counts collected in each bucket per grid tick (series.ACCOUNTED_BIT).

Convergence is measured per chunk and stitched across chunks by
`stitch_convergence`: an event still open at the end of a chunk continues
into the next chunk's first ("continuation") event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rgd.fairness.measures import convergence, tick_figures
from rgd.fairness.series import DIMS, Grid, SeriesRow, assemble, forward_fill_index

if TYPE_CHECKING:  # pyarrow is imported where it is used: the driver's merge stage never needs it
    import pyarrow as pa

# the tick table's columns and their types
COLUMNS: dict[str, str] = {
    "group": "string", "dim": "string", "bucket": "long", "time_s": "double",
    "quota": "double", "admitted": "double", "demand": "double", "limit": "double", "overshoot": "double",
    "overshoot_ratio": "double", "utilization": "double", "fair_error": "double", "jain": "double",
    "fair_shift": "double", "n_present": "long", "n_reported": "long", "n_members": "long", "members_fp": "long",
    "worst_daemon": "string",
}
WORST_PER_CHUNK = 10


@dataclass(slots=True)
class Context:
    """Everything a reducer needs besides its rows (broadcast once)."""

    grid: Grid
    group_ttl: int  # buckets a suppressed group's last value stays live
    t_first: int  # first and last bucket of the data
    t_last: int
    bin_ticks: int  # chart bin width, divides chunk_ticks (bins start at grid.origin)
    names: dict[int, str]
    barriers: dict[int, np.ndarray]  # daemon key -> sorted eviction buckets
    members_n: np.ndarray  # live daemons (cluster-wide) per bucket from t_first
    tolerance: float = 0.05
    shift_threshold: float = 0.10
    hold: int = 3
    extra: dict[str, Any] = field(default_factory=dict)


_PA_TYPES = {"string": "string", "long": "int64", "double": "float64", "binary": "binary"}


def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([(c, getattr(pa, _PA_TYPES[t])()) for c, t in COLUMNS.items()])


def _frame(cols: dict[str, object], n: int) -> pa.Table:
    """One part of the union layout as an Arrow table (missing columns null)."""
    import pyarrow as pa

    arrays = []
    for name, kind in COLUMNS.items():
        typ = getattr(pa, _PA_TYPES[kind])()
        v = cols.get(name)
        if v is None:
            arrays.append(pa.nulls(n, typ))
        elif np.isscalar(v) or isinstance(v, bytes):
            arrays.append(pa.array([v], typ).take(pa.array(np.zeros(n, np.int64))) if n else pa.array([], typ))
        else:
            arr = np.asarray(v)
            if kind == "string":
                arrays.append(pa.array(arr.astype(object), typ, from_pandas=True))
            else:
                arrays.append(pa.array(arr.astype(np.int64 if kind == "long" else np.float64), typ))
    return pa.Table.from_arrays(arrays, schema=arrow_schema())


def column_median(x: np.ndarray) -> np.ndarray:
    """Median of each column ignoring NaN (NaN when a column has none); sorts once, no masked arrays."""
    s = np.sort(x, axis=0)  # NaN sort last
    c = (~np.isnan(s)).sum(axis=0)
    cols = np.arange(x.shape[1])
    lo = s[np.maximum((c - 1) // 2, 0), cols]
    hi = s[np.maximum(c // 2, 0), cols]
    with np.errstate(invalid="ignore"):
        med = np.where(lo == hi, lo, (lo + hi) / 2)
    return np.where(c > 0, med, np.nan)


def _fingerprint(present: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Per tick, a number that changes when the set of live daemons changes (sum of keys, wrapping)."""
    with np.errstate(over="ignore"):
        fp: np.ndarray = np.where(present, keys[:, None], np.int64(0)).sum(axis=0, dtype=np.int64)
    return fp


def bin_stat(x: np.ndarray, starts: np.ndarray, how: str) -> np.ndarray:
    """Mean, min or max of each run x[starts[i]:starts[i+1]] ignoring NaN (NaN for a run without a number),
    like pandas' groupby aggregations over consecutive bins, without building a frame per bin."""
    ok = ~np.isnan(x)
    n = np.add.reduceat(ok, starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        if how == "mean":
            out = np.add.reduceat(np.where(ok, x, 0.0), starts) / n
        elif how == "max":
            out = np.maximum.reduceat(np.where(ok, x, -np.inf), starts)
        else:
            out = np.minimum.reduceat(np.where(ok, x, np.inf), starts)
    return np.where(n > 0, out, np.nan)


def _nanstat(x: np.ndarray, how: str) -> float:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan")
    if how not in ("sum", "min", "max"):
        raise KeyError(how)
    return float(getattr(x, how)())


def _chunk_convergence(t_ok: np.ndarray, fp: np.ndarray, shift: np.ndarray, err: np.ndarray,
                       over: np.ndarray, buckets: np.ndarray, lb: int, ctx: Context) -> list[dict[str, Any]]:
    """Events of the output ticks (cols >= lb); uses the lookback tick before to classify the first."""
    out = []
    W = t_ok.size
    i = lb
    while i < W:
        if not t_ok[i]:
            i += 1
            continue
        j = i
        while j + 1 < W and t_ok[j + 1]:
            j += 1
        seg = slice(i, j + 1)
        evs = convergence(fp[seg], shift[seg], err[seg], over[seg], ctx.shift_threshold, ctx.tolerance, ctx.hold)
        prev_ok = i > 0 and t_ok[i - 1]
        for e in evs:
            kind = e.kind
            if e.index == 0 and prev_ok:
                # the tick before is in the lookback: a real event only if something changed there
                if fp[i] != fp[i - 1]:
                    kind = "membership"
                elif np.nan_to_num(shift[i]) > ctx.shift_threshold:
                    kind = "demand"
                else:
                    kind = "continuation" if i == lb else "start"
            end_idx = i + e.end_index
            out.append({"bucket": int(buckets[i + e.index]), "kind": kind, "converged": bool(e.converged),
                        "ticks": int(e.ticks),
                        "end_bucket": int(buckets[min(end_idx, W - 1)]) + (0 if end_idx < W else 1),
                        "open": (not e.converged) and (i + e.index + e.ticks >= W) and j == W - 1})
        i = j + 1
    return out


@dataclass(slots=True)
class ChunkResult:
    """What one (group, chunk) produces; all None/empty when nothing in it is live."""

    ticks: pa.Table | None  # TICK columns
    shares: pd.DataFrame | None
    daemons: pd.DataFrame | None
    small: dict[str, dict[str, Any]]  # per dimension: agg, tbin, worst, conv


def analyze_chunk(group_key: int, chunk: int, rows: list[SeriesRow], ctx: Context) -> ChunkResult:
    """Ticks, shares, per-daemon sums and the summary partials of one group's chunk."""
    g = ctx.grid
    L, lb = g.chunk_ticks, g.lookback
    c0 = g.chunk_start(chunk)
    w0, W = c0 - lb, L + lb
    m = assemble(rows, w0, W)
    D = m.daemons.size
    if D == 0:
        return ChunkResult(None, None, None, {})
    group = ctx.names.get(group_key, f"#{group_key}")
    dnames = np.array([ctx.names.get(int(k), f"#{k}") for k in m.daemons], dtype=object)
    empty = np.zeros(0, np.int64)
    last, live = forward_fill_index(m.reports > 0, w0, ctx.group_ttl,
                                    [ctx.barriers.get(int(k), empty) for k in m.daemons])
    ri = np.arange(D)[:, None]
    tick_at = m.tick_ms[ri, last]
    live &= tick_at > 0
    per_s = np.where(live, 1000.0 / np.where(tick_at > 0, tick_at, 1.0), 0.0)
    # Counts: a published report's hold until the next one (suppression left the ticks between
    # out), divided by its own tick; tick accounting's are each bucket's own, per grid tick, so
    # the per-tick series adds up to the totals exactly. Limits and quotas hold as reported.
    counted = np.where(m.accounted[:, None], np.arange(W)[None, :], last)
    count_per_s = np.where(m.accounted[:, None], np.where(live, 1000.0 / g.grid_ms, 0.0), per_s)
    buckets = w0 + np.arange(W)
    in_span = (buckets >= ctx.t_first) & (buckets <= ctx.t_last)
    out_cols = (buckets >= c0) & in_span
    members_idx = np.clip(buckets - ctx.t_first, 0, max(ctx.members_n.size - 1, 0))
    frames = []
    shares: list[pd.DataFrame] = []
    daemons: list[pd.DataFrame] = []
    small: dict[str, dict[str, Any]] = {}
    tsec = g.grid_ms / 1000.0
    for k in sorted(m.admitted):
        adm = m.admitted[k][ri, counted] * count_per_s
        dem = adm + m.throttled[k][ri, counted] * count_per_s
        lim = m.limit[k][ri, last]
        quo = np.where(live, m.quota[k][ri, last], np.nan)
        quota = column_median(quo)
        present = live & ~np.isnan(quo)
        ok = present.any(axis=0) & np.isfinite(quota) & in_span  # ticks with figures, lookback included
        active = ok & out_cols
        if not active.any():
            continue
        fig = tick_figures(adm, dem, present, quota)
        fp = _fingerprint(present, m.daemons)
        cols = np.flatnonzero(active)
        reported = (m.reports > 0) & present
        lim_sum = np.where(present & np.isfinite(lim), lim, 0.0).sum(axis=0)
        worst = fig.worst[cols]
        dim = DIMS[k]
        tick = {
            "group": group, "dim": dim, "bucket": buckets[cols], "time_s": buckets[cols] * tsec,
            "quota": quota[cols], "admitted": fig.admitted[cols], "demand": fig.demand[cols], "limit": lim_sum[cols],
            "overshoot": fig.overshoot[cols], "overshoot_ratio": fig.overshoot_ratio[cols],
            "utilization": fig.utilization[cols], "fair_error": fig.fair_error[cols], "jain": fig.jain[cols],
            "fair_shift": fig.fair_shift[cols], "n_present": present[:, cols].sum(axis=0),
            "n_reported": reported[:, cols].sum(axis=0),
            "n_members": ctx.members_n[members_idx[cols]] if ctx.members_n.size else 0,
            "members_fp": fp[cols], "worst_daemon": np.where(worst >= 0, dnames[np.maximum(worst, 0)], None),
        }
        frames.append(_frame(tick, cols.size))
        # shares, binned on the epoch grid (bins never straddle chunks: bin_ticks divides L)
        bt = ctx.bin_ticks
        nb = L // bt
        sl = slice(lb, W)
        pres = present[:, sl] & active[None, sl]

        # called only within this iteration; the defaults bind its loop variables (B023)
        def binned(x: np.ndarray, mask: np.ndarray = pres, sl: slice = sl, nb: int = nb, bt: int = bt) -> np.ndarray:
            sums: np.ndarray = np.where(mask, x[:, sl], 0.0).reshape(-1, nb, bt).sum(axis=2)
            return sums

        cnt = pres.reshape(D, nb, bt).sum(axis=2)
        di, bi = np.nonzero(cnt > 0)
        if di.size:
            c = cnt[di, bi]
            lim_fin = np.where(np.isfinite(lim), lim, 0.0)
            lim_inf = (pres & ~np.isfinite(lim[:, sl])).reshape(D, nb, bt).any(axis=2)[di, bi]
            bstart = c0 + bi * bt
            shares.append(pd.DataFrame({
                "group": group, "dim": dim, "bucket": bstart, "time_s": bstart * tsec,
                "daemon": dnames[di], "admitted": binned(adm)[di, bi] / c, "demand": binned(dem)[di, bi] / c,
                "fair": binned(fig.fair)[di, bi] / c,
                "limit": np.where(lim_inf, np.inf, binned(lim_fin)[di, bi] / c), "ticks": c,
            }))
        # per-daemon sums over this chunk's ticks
        pm = present[:, cols]
        dev = np.abs(adm - fig.fair)[:, cols]
        q = quota[cols][None, :]
        keep = pm.any(axis=1)
        daemons.append(pd.DataFrame({
            "group": group, "dim": dim, "daemon": dnames[keep],
            "admitted": np.where(pm, adm[:, cols], 0).sum(axis=1)[keep],
            "demand": np.where(pm, dem[:, cols], 0).sum(axis=1)[keep],
            "fair": np.where(pm, fig.fair[:, cols], 0).sum(axis=1)[keep],
            "abs_dev": np.where(pm, dev, 0).sum(axis=1)[keep],
            "max_dev_ratio": np.where(pm, dev / q, 0).max(axis=1, initial=0.0)[keep],
            "ticks": pm.sum(axis=1)[keep],
            "ticks_over": (pm & (adm[:, cols] - fig.fair[:, cols] > ctx.tolerance * q)).sum(axis=1)[keep],
        }))
        # small: summary partials, chart bins, worst ticks, convergence
        def t_all(x: np.ndarray, cols: np.ndarray = cols) -> np.ndarray:  # default: binds the loop's cols (B023)
            picked: np.ndarray = x[cols]
            return picked

        o_r, util, jain, fe = t_all(fig.overshoot_ratio), t_all(fig.utilization), t_all(fig.jain), t_all(fig.fair_error)
        agg = {
            "ticks": int(cols.size), "first_s": float(buckets[cols[0]] * tsec),
            "last_s": float(buckets[cols[-1]] * tsec),
            "quota_sum": float(quota[cols].sum()), "admitted_sum": float(fig.admitted[cols].sum()),
            "demand_sum": float(fig.demand[cols].sum()), "overshoot_ratio_max": _nanstat(o_r, "max"),
            "overshoot_ratio_sum": _nanstat(o_r, "sum"), "overshoot_ratio_n": int(np.isfinite(o_r).sum()),
            "ticks_over_quota": int((np.nan_to_num(o_r) > ctx.tolerance).sum()),
            "utilization_sum": _nanstat(util, "sum"), "utilization_n": int(np.isfinite(util).sum()),
            "jain_sum": _nanstat(jain, "sum"), "jain_n": int(np.isfinite(jain).sum()),
            "jain_min": _nanstat(jain, "min"),
            "fair_error_sum": _nanstat(fe, "sum"), "fair_error_n": int(np.isfinite(fe).sum()),
            "fair_error_max": _nanstat(fe, "max"), "daemons_max": int(present[:, cols].sum(axis=0).max()),
        }
        b_of = (buckets[cols] - g.origin) // bt
        bins, first = np.unique(b_of, return_index=True)  # b_of ascends with the ticks
        tbin = pd.DataFrame({
            "bin": bins, "time_s": buckets[cols][first] * tsec, "quota": bin_stat(quota[cols], first, "mean"),
            "admitted": bin_stat(fig.admitted[cols], first, "mean"),
            "admitted_max": bin_stat(fig.admitted[cols], first, "max"),
            "demand": bin_stat(fig.demand[cols], first, "mean"), "jain": bin_stat(jain, first, "mean"),
            "jain_min": bin_stat(jain, first, "min"), "fair_error": bin_stat(fe, first, "mean"),
            "fair_error_max": bin_stat(fe, first, "max"), "overshoot_ratio_max": bin_stat(o_r, first, "max")})
        score = np.nan_to_num(fe) + np.nan_to_num(o_r)
        top = np.argsort(-score, kind="stable")[:WORST_PER_CHUNK]
        worst_rows = pd.DataFrame({
            "bucket": buckets[cols][top], "time_s": buckets[cols][top] * tsec, "quota": quota[cols][top],
            "admitted": fig.admitted[cols][top], "demand": fig.demand[cols][top], "overshoot_ratio": o_r[top],
            "fair_error": fe[top], "jain": jain[top], "n_present": present[:, cols].sum(axis=0)[top],
            "daemon": np.where(worst[top] >= 0, dnames[np.maximum(worst[top], 0)], None), "score": score[top]})
        conv = _chunk_convergence(ok, fp, fig.fair_shift, fig.fair_error, fig.overshoot_ratio, buckets, lb, ctx)
        small[dim] = {"agg": agg, "tbin": tbin, "worst": worst_rows, "conv": conv}
    if not frames:
        return ChunkResult(None, None, None, {})
    import pyarrow as pa

    return ChunkResult(pa.concat_tables(frames), pd.concat(shares, ignore_index=True) if shares else None,
                       pd.concat(daemons, ignore_index=True) if daemons else None, small)


def stitch_convergence(events: pd.DataFrame, grid_ms: int) -> pd.DataFrame:
    """Join events cut at chunk ends with the next chunk's "continuation"; seconds from ticks.

    `events`: group, dim, bucket, kind, converged, ticks, end_bucket, open (chunk-local events).
    """
    cols = ["group", "dim", "event_bucket", "event_time_s", "kind", "converged", "seconds", "end_bucket"]
    out = []
    if events.empty:
        return pd.DataFrame(columns=cols)
    for (grp, dim), ev in events.sort_values(["group", "dim", "bucket"]).groupby(["group", "dim"], sort=True):
        pending: dict[str, Any] | None = None  # an open event waiting for its continuation
        r: Any  # a row of `ev` (pandas types its fields no closer)
        for r in ev.itertuples(index=False):
            if r.kind == "continuation":
                if pending is not None and int(pending["end_bucket"]) == int(r.bucket):
                    pending["ticks"] += int(r.ticks)
                    pending["end_bucket"] = int(r.end_bucket)
                    pending["converged"] = bool(r.converged)
                    if not r.open:
                        out.append(pending)
                        pending = None
                continue
            if pending is not None:
                out.append(pending)
                pending = None
            e: dict[str, Any] = {"group": grp, "dim": dim, "bucket": int(r.bucket), "kind": r.kind,
                                 "converged": bool(r.converged), "ticks": int(r.ticks), "end_bucket": int(r.end_bucket)}
            if r.open:
                pending = e
            else:
                out.append(e)
        if pending is not None:
            out.append(pending)
    df = pd.DataFrame(out)
    return pd.DataFrame({
        "group": df["group"], "dim": df["dim"], "event_bucket": df["bucket"],
        "event_time_s": df["bucket"] * grid_ms / 1000.0, "kind": df["kind"], "converged": df["converged"],
        "seconds": df["ticks"] * grid_ms / 1000.0, "end_bucket": df["end_bucket"]})[cols]


__all__ = [
    "COLUMNS",
    "WORST_PER_CHUNK",
    "ChunkResult",
    "Context",
    "analyze_chunk",
    "arrow_schema",
    "bin_stat",
    "column_median",
    "stitch_convergence"
]
