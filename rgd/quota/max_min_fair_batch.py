"""Strategy `rgd`'s share of one daemon (`max_min_fair.allocate`'s value for it) in many
groups at once.

At PIP-82's scale a daemon recomputes thousands of groups a second (every group whose
brokers' usage moved), each with a few active entries among 100 members. One Python call
per group cost ~50 us, nearly all of it interpreter overhead on five-element lists. Here
every (group, dimension) is a *segment* of flat arrays and each step of `max_min_fair`
runs once for all segments. The water-filling goes column by column: step k serves the
k-th smallest want of every segment still filling. That is the same sequence of float
operations as the per-group loop, sums included (added in the same order, never
pairwise), so the shares are the same floats: tests/system/test_quota_batch.py compares them
with the per-group code on generated maps, `repr` for `repr`.

Python's `max(a, x)` returns `a` unless `x > a`; numpy's `maximum` may return -0.0 where
Python returns 0.0, so `_py_max` spells out Python's rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rgd.quota.inputs import INF, QuotaParams


@dataclass
class Segments:
    """Problems to solve, one per (group, dimension), filled by `add_segment`.

    A segment's entries are its members *with demand* (> 0), in id order (the order
    `max_min_fair` breaks ties of equal wants in); members without demand only count in
    `n`. `mine` marks the entry of the daemon whose share is wanted, if it has one."""

    quota: list[float] = field(default_factory=list)
    n: list[int] = field(default_factory=list)  # members (ids) in the group, with or without demand
    segment: list[int] = field(default_factory=list)  # per entry: its segment, nondecreasing
    demand: list[float] = field(default_factory=list)
    admitted: list[float] = field(default_factory=list)
    granule: list[float] = field(default_factory=list)
    mine: list[bool] = field(default_factory=list)

    def add_segment(self, quota: float, n: int, entries: list[tuple[float, float, float, bool]]) -> int:
        """A new segment and its entries, each (demand > 0, admitted, granule, mine); returns
        its index. `n` counts the daemon whose share is wanted, so it is at least 1."""
        if n < 1:
            raise ValueError(f"a segment has at least one member (the daemon asking), not {n}")
        index = len(self.quota)
        self.quota.append(quota)
        self.n.append(n)
        if entries:
            demand, admitted, granule, mine = zip(*entries, strict=True)
            self.segment.extend([index] * len(entries))
            self.demand.extend(demand)
            self.admitted.extend(admitted)
            self.granule.extend(granule)
            self.mine.extend(mine)
        return index


def _py_max(a: float, x: np.ndarray) -> np.ndarray:
    """Python's `max(a, x)` elementwise: `a` unless x > a (numpy's maximum may give -0.0)."""
    return np.where(x > a, x, a)


class _Layout:
    """Where each segment's entries lie in the flat arrays (entries are grouped by segment)."""

    def __init__(self, segment: np.ndarray, segments: int) -> None:
        self.segment = segment
        self.count = np.bincount(segment, minlength=segments)
        self.start = np.zeros(segments, dtype=np.int64)
        np.cumsum(self.count[:-1], out=self.start[1:])
        self.columns = int(self.count.max()) if segments else 0

    def sum(self, x: np.ndarray) -> np.ndarray:
        """Per segment, `sum(...)` of its entries in entry order (left to right, as Python's)."""
        acc = np.zeros(len(self.count))
        for k in range(self.columns):
            has = np.flatnonzero(self.count > k)
            acc[has] += x[self.start[has] + k]
        return acc


def water_fill(pool: np.ndarray, wants: np.ndarray, layout: _Layout) -> np.ndarray:
    """`max_min_fair.water_fill(pool[s], wants of s)` for every segment s at once.

    Each segment's wants are served smallest first (ties in entry order: a stable sort);
    at step k, every segment still filling compares its k-th smallest want with the equal
    split of what it has left, exactly as the scalar loop does at position k."""
    out = np.zeros(len(wants))
    if len(wants) == 0:
        return out
    segment, count, start = layout.segment, layout.count, layout.start
    order = np.lexsort((np.arange(len(wants)), wants, segment))  # by segment, then want, then entry order
    left = pool.astype(float, copy=True)
    filling = (count > 0) & (pool > 0)
    cut_at = np.full(len(count), -1, dtype=np.int64)  # the step at which a segment's want exceeded its split
    cut_share = np.zeros(len(count))
    for k in range(layout.columns):
        seg = np.flatnonzero(filling & (count > k))
        if len(seg) == 0:
            break
        idx = order[start[seg] + k]
        share = left[seg] / (count[seg] - k)
        w = _py_max(0.0, wants[idx])
        fits = w <= share
        out[idx[fits]] = w[fits]
        left[seg[fits]] -= w[fits]
        over = seg[~fits]
        cut_at[over] = k
        cut_share[over] = share[~fits]
        filling[over] = False
    # Everyone from the step that did not fit onwards gets that step's split.
    position = np.empty(len(wants), dtype=np.int64)
    position[order] = np.arange(len(wants)) - start[segment[order]]
    rest = (cut_at[segment] >= 0) & (position >= cut_at[segment])
    out[rest] = cut_share[segment[rest]]
    return out


def own_shares(problems: Segments, params: QuotaParams) -> np.ndarray:
    """Per segment, `max_min_fair.allocate(quota, entries, members, params)[me]`, where me is
    the entry marked `mine` (or a member without demand if none is): the share of one daemon.

    The steps, as in max_min_fair: an infinite quota is infinite, a quota <= 0 is 0; with
    nobody's demand, quota / n; else the floor phi for all, the rest water-filled over
    demand above the floor, spare water-filled as headroom, the drain-aware cut, and the
    scale that keeps the sum within the quota despite rounding."""
    quota = np.asarray(problems.quota, dtype=float)
    n = np.asarray(problems.n, dtype=np.int64)
    segment = np.asarray(problems.segment, dtype=np.int64)
    demand = np.asarray(problems.demand, dtype=float)
    admitted = np.asarray(problems.admitted, dtype=float)
    granule = np.asarray(problems.granule, dtype=float)
    mine = np.asarray(problems.mine, dtype=bool)
    layout = _Layout(segment, len(quota))
    count = layout.count

    # The steps below run on every segment; those with an infinite quota, a quota <= 0 or
    # nobody's demand are answered at the end, and meanwhile fill a quota of 0.
    solved = (quota != INF) & (quota > 0) & (count > 0)
    q = np.where(solved, quota, 0.0)
    phi = q * np.minimum(params.newcomer_fraction, params.idle_reserve_fraction / np.maximum(n, 1))
    pool = _py_max(0.0, q - n * phi)
    fill = water_fill(pool, _py_max(0.0, demand - phi[segment]), layout)
    spare = pool - layout.sum(fill)
    head = np.zeros(len(demand))
    if params.headroom_fraction > 0:
        head = water_fill(np.where(spare > 0, spare, 0.0), params.headroom_fraction * demand + granule, layout)
    alloc = (phi[segment] + fill) + head
    throttled = demand - admitted
    cut = (throttled <= 1e-9 * _py_max(1.0, demand)) & (demand > alloc * (1.0 + params.cut_margin))
    alloc[cut] = alloc[cut] / (1.0 + params.burst_seconds)
    total = layout.sum(alloc) + (n - count) * phi
    scale = np.ones(len(q))
    over = total > q
    scale[over] = q[over] / total[over]
    share = phi * scale
    own = np.flatnonzero(mine)
    share[segment[own]] = alloc[own] * scale[segment[own]]

    idle = (count == 0) & (quota != INF) & (quota > 0)
    share[idle] = quota[idle] / n[idle]
    share[quota <= 0] = 0.0
    return np.where(quota == INF, INF, share)


__all__ = ["Segments", "own_shares", "water_fill"]
