"""Receipts: report loss from sequence gaps, report delay and staleness.

Per segment (map side) receipts are reduced to small tables so the 36 M
receipts of a large run never cross a shuffle:
- runs: maximal runs of consecutive publisher sequences per (receiver,
  publisher, incarnation); merging the runs of all segments gives the exact
  number of distinct sequences received, duplicates across segments included;
- histograms per (receiver, publisher) of delay (receive - publish time) and
  staleness (age of the newest report from that publisher just before the next
  one arrived: receive time minus the previous report's publish time), on
  fixed log-spaced bins so they add up across segments;
- boundary rows (first and last receipt of each run key) so staleness across
  two segments of the same receiver is not lost;
- per receiver and tick: receipts, summed and max delay, max staleness.

Loss per (receiver, publisher, incarnation) = (max - min + 1) - distinct: the
gaps between the first and the last report heard. A new incarnation restarts
the sequence and is never counted as loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from rgd.fairness.decode import Arr, Int, njit

EDGES_MS = 10.0 ** np.linspace(-1.0, 6.0, 141)  # 0.1 ms .. 1000 s, 20 bins per decade
NBINS = EDGES_MS.size + 1


def bin_of(ms: np.ndarray) -> np.ndarray:
    """Histogram bin of each value (0: below 0.1 ms, including negative clock skew)."""
    return np.searchsorted(EDGES_MS, ms, side="right")


def quantile_from_hist(hist: np.ndarray, q: float, max_value: float) -> float:
    """Approximate quantile: the geometric middle of the bin holding it (exact bin, ~6 % wide)."""
    total = hist.sum()
    if total == 0:
        return float("nan")
    k = int(np.searchsorted(np.cumsum(hist), q * total, side="left"))
    if k == 0:
        return 0.0
    if k >= EDGES_MS.size:
        return float(max_value)
    return float(min(np.sqrt(EDGES_MS[k - 1] * EDGES_MS[k]), max_value))


def quantiles_from_hists(hists: np.ndarray, q: float, max_values: np.ndarray) -> np.ndarray:
    """`quantile_from_hist` for every row of a [n, NBINS] matrix at once."""
    n = hists.shape[0]
    total = hists.sum(axis=1)
    cum = np.cumsum(hists, axis=1)
    k = np.argmax(cum >= (q * total)[:, None], axis=1)
    mids = np.concatenate([[0.0], np.sqrt(EDGES_MS[:-1] * EDGES_MS[1:]), [np.inf]])
    out = np.minimum(mids[np.minimum(k, mids.size - 1)], max_values)
    out = np.where(k >= EDGES_MS.size, max_values, out)
    return np.where(total > 0, out, np.nan) if n else np.zeros(0)


@dataclass(slots=True)
class ReceiptTables:
    """What one segment's receipts reduce to (all columns numpy arrays)."""

    runs: dict[str, np.ndarray]  # receiver, publisher, incarnation, start, end, frames
    # receiver, publisher, n, delay_sum, delay_max, delay_min, stale_n, stale_sum, stale_max
    pairs: dict[str, np.ndarray]
    delay_hist: np.ndarray  # [pairs, NBINS]
    stale_hist: np.ndarray  # [pairs, NBINS]
    edges: dict[str, np.ndarray]  # receiver, publisher, incarnation, order, first_recv_ms, last_recv_ms, last_pub_ms
    ticks: dict[str, np.ndarray]  # receiver, bucket, n, delay_sum, delay_max, stale_max


@njit(cache=True, nogil=True)
def _receipt_pass(key: Arr, pair: Arr, tick: Arr, seq: Arr, recv_ms: Arr, pub_ms: Arr, nkeys: Int, npairs: Int,
                  nticks: Int, edges_ms: Arr) -> tuple[Arr, ...]:  # pragma: no cover
    """One pass over a segment's receipts in log order; see reduce_receipts."""
    n = key.size
    nb = edges_ms.size + 1
    run_key = np.empty(n + nkeys, np.int64)
    run_start = np.empty(n + nkeys, np.int64)
    run_end = np.empty(n + nkeys, np.int64)
    run_frames = np.empty(n + nkeys, np.int64)
    nr = 0
    has = np.zeros(nkeys, np.bool_)
    last_seq = np.zeros(nkeys, np.int64)
    cur_start = np.zeros(nkeys, np.int64)
    cur_frames = np.zeros(nkeys, np.int64)
    last_pub = np.zeros(nkeys)
    first_recv = np.zeros(nkeys)
    last_recv = np.zeros(nkeys)
    dh = np.zeros((npairs, nb), np.int64)
    sh = np.zeros((npairs, nb), np.int64)
    pf = np.zeros((npairs, 7))  # n, delay_sum, delay_max, delay_min, stale_n, stale_sum, stale_max
    for q in range(npairs):
        pf[q, 2] = -np.inf
        pf[q, 3] = np.inf
        pf[q, 6] = -np.inf
    tf = np.zeros((nticks, 4))  # n, delay_sum, delay_max, stale_max
    for q in range(nticks):
        tf[q, 2] = -np.inf
        tf[q, 3] = -np.inf
    for i in range(n):
        k = key[i]
        s = seq[i]
        pr = pair[i]
        tk = tick[i]
        if has[k]:
            if s == last_seq[k] + 1:
                cur_frames[k] += 1
            else:
                run_key[nr] = k
                run_start[nr] = cur_start[k]
                run_end[nr] = last_seq[k]
                run_frames[nr] = cur_frames[k]
                nr += 1
                cur_start[k] = s
                cur_frames[k] = 1
            st = recv_ms[i] - last_pub[k]
            sh[pr, np.searchsorted(edges_ms, st, side="right")] += 1
            pf[pr, 4] += 1
            pf[pr, 5] += st
            pf[pr, 6] = max(pf[pr, 6], st)
            tf[tk, 3] = max(tf[tk, 3], st)
        else:
            has[k] = True
            cur_start[k] = s
            cur_frames[k] = 1
            first_recv[k] = recv_ms[i]
        last_seq[k] = s
        last_pub[k] = pub_ms[i]
        last_recv[k] = recv_ms[i]
        d = recv_ms[i] - pub_ms[i]
        dh[pr, np.searchsorted(edges_ms, d, side="right")] += 1
        pf[pr, 0] += 1
        pf[pr, 1] += d
        pf[pr, 2] = max(pf[pr, 2], d)
        pf[pr, 3] = min(pf[pr, 3], d)
        tf[tk, 0] += 1
        tf[tk, 1] += d
        tf[tk, 2] = max(tf[tk, 2], d)
    for k in range(nkeys):
        if has[k]:
            run_key[nr] = k
            run_start[nr] = cur_start[k]
            run_end[nr] = last_seq[k]
            run_frames[nr] = cur_frames[k]
            nr += 1
    return (run_key[:nr], run_start[:nr], run_end[:nr], run_frames[:nr], has, first_recv, last_recv, last_pub,
            dh, sh, pf, tf)


def _codes(keys: np.ndarray, space: int, dense_max: int = 1 << 12) -> tuple[np.ndarray, np.ndarray]:
    """(code per key, key per code): the keys themselves when their space [0, space) is small (no
    hashing; codes not present are filtered out afterwards), pandas' factorize otherwise. The bound
    keeps the per-code tables small: a pair holds two histograms of NBINS counts, and a skewed clock
    can make the tick space huge."""
    if space <= dense_max:
        return np.ascontiguousarray(keys, dtype=np.int64), np.arange(space, dtype=np.int64)
    codes, uniq = pd.factorize(keys)
    return codes.astype(np.int64), np.asarray(uniq, np.int64)


def reduce_receipts(receiver: np.ndarray, publisher: np.ndarray, incarnation: np.ndarray, seq: np.ndarray,
                    recv_us: np.ndarray, pub_ms: np.ndarray, order: int, grid_ms: int) -> ReceiptTables:
    """Reduce one segment's receipts (arrays in log order); `order` sorts segments of a receiver."""
    recv_ms = np.ascontiguousarray(recv_us, dtype=np.float64) / 1000.0
    pub = np.ascontiguousarray(pub_ms, dtype=np.float64)
    ri, ru = pd.factorize(receiver)
    pi, pu = pd.factorize(publisher)
    ii, iu = pd.factorize(incarnation)
    ru, pu, iu = np.asarray(ru, np.int64), np.asarray(pu, np.int64), np.asarray(iu, np.int64)
    nr_, np_, ni_ = max(ru.size, 1), max(pu.size, 1), max(iu.size, 1)
    pair = (ri * np_ + pi).astype(np.int64)
    key = (pair * ni_ + ii).astype(np.int64)
    kcodes, kuniq = _codes(key, nr_ * np_ * ni_)
    pcodes, puniq = _codes(pair, nr_ * np_)
    bucket = np.floor_divide(recv_ms, grid_ms).astype(np.int64)
    b0 = int(bucket.min()) if bucket.size else 0
    nb = int(bucket.max()) - b0 + 1 if bucket.size else 1
    tcodes, tuniq = _codes(ri.astype(np.int64) * nb + (bucket - b0), nr_ * nb)
    (rk, rs, re_, rf, has, first_recv, last_recv, last_pub, dh, sh, pf, tf) = _receipt_pass(
        kcodes, pcodes, tcodes, np.ascontiguousarray(seq, dtype=np.int64), recv_ms, pub, int(kuniq.size),
        int(puniq.size), int(tuniq.size), EDGES_MS)

    def split_key(k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return ru[k // ni_ // np_], pu[(k // ni_) % np_], iu[k % ni_]

    r_r, r_p, r_i = split_key(kuniq[rk])
    runs = {"receiver": r_r, "publisher": r_p, "incarnation": r_i, "start": rs, "end": re_, "frames": rf}
    seen = pf[:, 0] > 0  # codes may be a dense space: keep what this segment has
    pf, dh, sh, puniq = pf[seen], dh[seen], sh[seen], puniq[seen]
    pairs = {"receiver": ru[puniq // np_], "publisher": pu[puniq % np_], "n": pf[:, 0].astype(np.int64),
             "delay_sum": pf[:, 1], "delay_max": pf[:, 2], "delay_min": pf[:, 3],
             "stale_n": pf[:, 4].astype(np.int64), "stale_sum": pf[:, 5], "stale_max": pf[:, 6]}
    e_r, e_p, e_i = split_key(kuniq[has])
    edges = {"receiver": e_r, "publisher": e_p, "incarnation": e_i,
             "order": np.full(e_r.size, order, dtype=np.int64),
             "first_recv_ms": first_recv[has], "last_recv_ms": last_recv[has], "last_pub_ms": last_pub[has]}
    tf, tuniq = tf[tf[:, 0] > 0], tuniq[tf[:, 0] > 0]
    ticks = {"receiver": ru[tuniq // nb] if tuniq.size else ru[:0], "bucket": tuniq % nb + b0,
             "n": tf[:, 0].astype(np.int64), "delay_sum": tf[:, 1], "delay_max": tf[:, 2], "stale_max": tf[:, 3]}
    return ReceiptTables(runs, pairs, dh, sh, edges, ticks)


@njit(cache=True, nogil=True)
def _union(key: Arr, start: Arr, end: Arr, nkeys: Int) -> tuple[Arr, Arr, Arr]:  # pragma: no cover - compiled
    """Per key (rows sorted by key, start): distinct values covered by the [start, end] intervals."""
    distinct = np.zeros(nkeys, np.int64)
    lo = np.zeros(nkeys, np.int64)
    hi = np.zeros(nkeys, np.int64)
    i = 0
    n = key.size
    while i < n:
        k = key[i]
        cs, ce = start[i], end[i]
        lo[k] = cs
        hi[k] = ce
        i += 1
        while i < n and key[i] == k:
            s, e = start[i], end[i]
            if s <= ce + 1:
                if e > ce:
                    ce = e
            else:
                distinct[k] += ce - cs + 1
                cs, ce = s, e
            if e > hi[k]:
                hi[k] = e
            i += 1
        distinct[k] += ce - cs + 1
    return distinct, lo, hi


def merge_loss(runs: pd.DataFrame) -> pd.DataFrame:
    """Loss per (receiver, publisher, incarnation) from the runs of every segment."""
    cols = ["receiver", "publisher", "incarnation", "received", "distinct", "first_seq", "last_seq",
            "expected", "lost", "duplicates"]
    if runs.empty:
        return pd.DataFrame(columns=cols)
    kc, ku = pd.factorize(pd.MultiIndex.from_arrays([runs["receiver"], runs["publisher"], runs["incarnation"]]))
    start = runs["start"].to_numpy(np.int64)
    end = runs["end"].to_numpy(np.int64)
    o = np.lexsort((end, start, kc))
    distinct, lo, hi = _union(kc[o].astype(np.int64), start[o], end[o], len(ku))
    received = np.bincount(kc, weights=runs["frames"].to_numpy(np.float64), minlength=len(ku)).astype(np.int64)
    expected = hi - lo + 1
    out = pd.DataFrame({"receiver": ku.get_level_values(0).to_numpy(np.int64),
                        "publisher": ku.get_level_values(1).to_numpy(np.int64),
                        "incarnation": ku.get_level_values(2).to_numpy(np.int64),
                        "received": received, "distinct": distinct, "first_seq": lo, "last_seq": hi,
                        "expected": expected, "lost": expected - distinct, "duplicates": received - distinct})
    return out.sort_values(["receiver", "publisher", "incarnation"], ignore_index=True)[cols]


def boundary_staleness(edges: pd.DataFrame) -> pd.DataFrame:
    """Staleness samples across segment boundaries: next segment's first receive - last publish before."""
    if edges.empty:
        return pd.DataFrame(columns=["receiver", "publisher", "stale_ms"])
    e = edges.sort_values(["receiver", "publisher", "incarnation", "order"])
    same = ((e["receiver"].to_numpy()[1:] == e["receiver"].to_numpy()[:-1])
            & (e["publisher"].to_numpy()[1:] == e["publisher"].to_numpy()[:-1])
            & (e["incarnation"].to_numpy()[1:] == e["incarnation"].to_numpy()[:-1]))
    nxt = e.iloc[1:][same]
    prv = e.iloc[:-1][same]
    return pd.DataFrame({"receiver": nxt["receiver"].to_numpy(), "publisher": nxt["publisher"].to_numpy(),
                         "stale_ms": nxt["first_recv_ms"].to_numpy() - prv["last_pub_ms"].to_numpy()})


__all__ = [
    "EDGES_MS",
    "NBINS",
    "ReceiptTables",
    "bin_of",
    "boundary_staleness",
    "merge_loss",
    "quantile_from_hist",
    "quantiles_from_hists",
    "reduce_receipts"
]
