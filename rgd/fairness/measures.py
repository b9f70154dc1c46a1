"""The report's math, pure and vectorized: fair shares, Jain's index, per-tick figures, convergence.

Definitions (per group, per dimension such as publish messages/s, per tick):
- quota Q: the group's cluster-wide quota (the median of what the daemons
  report, so one daemon with a stale config does not move it);
- a_d, w_d: daemon d's admitted rate and demand (admitted + throttled);
- fair share f = max-min fair split of Q over the demands (water-filling:
  nobody gets more than it asks for, the rest share equally what is left);
- overshoot = max(0, sum a - Q); overshoot ratio = overshoot / Q;
- utilization = sum a / min(Q, sum w): how much of what could be admitted was;
- fair error = max_d |a_d - f_d| / Q: the worst daemon's distance from its share;
- Jain's index over x_d = a_d / f_d for daemons with f_d > 0 (Jain 1984,
  normalised by the optimal allocation): 1 = every daemon has its fair share;
- fair shift = sum_d |f_d(t) - f_d(t-1)| / Q: how much the fair split moved.
A convergence event is a tick whose set of live daemons changed, or whose fair
shift exceeds a threshold (demand moved); the convergence time is how long
until fair error and overshoot ratio both stay within a tolerance for `hold`
consecutive ticks. Another event arriving first censors the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def max_min_fair(demands: np.ndarray, capacity: float) -> np.ndarray:
    """Max-min fair split of `capacity` over `demands` (1-D); e.g. 120 over 1000/50/10 -> 60/50/10."""
    d = np.asarray(demands, dtype=float)
    return max_min_fair_matrix(d[:, None], np.array([capacity], dtype=float))[:, 0]


def max_min_fair_matrix(demands: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Column-wise water-filling: demands [n, T] (NaN = absent, taken as 0), capacity [T] -> shares [n, T].

    With the demands of a column sorted, d_(0) <= ... <= d_(n-1), and S_k the
    sum of the k smallest, level_k = (Q - S_k) / (n - k) is the equal share
    left if the k smallest are fully served; the water level is level_k for
    the first k whose d_(k) exceeds it, and f_d = min(d_d, level).
    An infinite capacity serves every demand; a capacity <= 0 serves none.
    """
    d = np.nan_to_num(np.asarray(demands, dtype=float), nan=0.0)
    d = np.maximum(d, 0.0)
    n, t = d.shape
    cap = np.asarray(capacity, dtype=float)
    if n == 0:
        none: np.ndarray = d.copy()
        return none
    s = np.sort(d, axis=0)
    prefix = np.vstack([np.zeros((1, t)), np.cumsum(s, axis=0)[:-1]])
    remaining = (n - np.arange(n))[:, None].astype(float)
    with np.errstate(invalid="ignore"):
        levels = (cap[None, :] - prefix) / remaining
    short = s > levels
    first = np.argmax(short, axis=0)
    any_short = short.any(axis=0)
    level = np.where(any_short, levels[first, np.arange(t)], np.inf)
    level = np.where(np.isinf(cap), np.inf, np.maximum(level, 0.0))
    shares: np.ndarray = np.minimum(d, level[None, :])
    return shares


def jain_index(x: np.ndarray, mask: np.ndarray | None = None, axis: int = 0) -> np.ndarray:
    """Jain's fairness index (sum x)^2 / (n sum x^2) over `axis`, counting only `mask`; NaN when empty."""
    x = np.asarray(x, dtype=float)
    m = np.ones_like(x, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    xs = np.where(m, x, 0.0)
    n = m.sum(axis=axis)
    s1 = xs.sum(axis=axis)
    s2 = (xs * xs).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = s1 * s1 / (n * s2)
    out = np.where(n == 0, np.nan, out)
    return np.where((n > 0) & (s2 == 0), 1.0, out)  # everybody at zero is perfectly even


@dataclass(frozen=True, slots=True)
class TickFigures:
    """Per-tick figures of one group and dimension (arrays of length T)."""

    admitted: np.ndarray
    demand: np.ndarray
    overshoot: np.ndarray
    overshoot_ratio: np.ndarray
    utilization: np.ndarray
    fair_error: np.ndarray
    jain: np.ndarray
    fair_shift: np.ndarray
    worst: np.ndarray  # index of the daemon farthest from its share (-1: none)
    fair: np.ndarray  # [D, T]


def tick_figures(admitted: np.ndarray, demand: np.ndarray, present: np.ndarray, quota: np.ndarray,
                 prev_fair: np.ndarray | None = None) -> TickFigures:
    """The figures above from per-daemon rates [D, T] (`present`: daemon has a live value) and Q [T].

    `prev_fair` [D] is the fair split of the tick before the first column (for the first fair shift).
    """
    a = np.where(present, admitted, 0.0)
    w = np.where(present, np.maximum(demand, a), 0.0)
    q = np.asarray(quota, dtype=float)
    fair = max_min_fair_matrix(w, q)
    adm = a.sum(axis=0)
    dem = w.sum(axis=0)
    finite = np.isfinite(q) & (q > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        over = np.where(np.isfinite(q), np.maximum(adm - q, 0.0), 0.0)
        over_ratio = np.where(finite, over / q, np.nan)
        usable = np.minimum(q, dem)
        util = np.where(usable > 0, adm / usable, np.nan)
        dev = np.abs(a - fair)
        fair_error = np.where(finite, dev.max(axis=0, initial=0.0) / q, np.nan)
        x = np.where(fair > 0, a / np.where(fair > 0, fair, 1.0), 0.0)
    jain = jain_index(x, present & (fair > 0))
    before = np.concatenate([(fair[:, :1] if prev_fair is None else prev_fair[:, None]), fair[:, :-1]], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        shift = np.where(finite, np.abs(fair - before).sum(axis=0) / q, np.nan)
    worst = np.where(present.any(axis=0), np.argmax(np.where(present, dev, -1.0), axis=0), -1)
    return TickFigures(adm, dem, over, over_ratio, util, fair_error, jain, shift, worst, fair)


@dataclass(frozen=True, slots=True)
class ConvergenceEvent:
    index: int  # tick position of the event
    kind: str  # "start", "membership", "demand"
    converged: bool
    ticks: int  # to convergence, or until censored (next event / end of data)
    end_index: int  # where it converged or was censored


def convergence(members: np.ndarray, fair_shift: np.ndarray, fair_error: np.ndarray,
                overshoot_ratio: np.ndarray, shift_threshold: float = 0.10, tolerance: float = 0.05,
                hold: int = 3) -> list[ConvergenceEvent]:
    """Events and their convergence, over consecutive ticks of one group and dimension.

    `members` is any per-tick fingerprint of the live daemon set; NaN figures
    (no quota, no demand) count as converged. The first tick is a "start" event.
    """
    n = len(members)
    if n == 0:
        return []
    m = np.asarray(members)
    changed = np.zeros(n, dtype=bool)
    changed[1:] = m[1:] != m[:-1]
    shift = np.nan_to_num(np.asarray(fair_shift, dtype=float), nan=0.0)
    moved = shift > shift_threshold
    moved[0] = False
    starts = [0] + [int(i) for i in np.flatnonzero(changed | moved) if i > 0]
    kinds = ["start"] + ["membership" if changed[i] else "demand" for i in starts[1:]]
    err = np.nan_to_num(np.asarray(fair_error, dtype=float), nan=0.0)
    over = np.nan_to_num(np.asarray(overshoot_ratio, dtype=float), nan=0.0)
    good = (err <= tolerance) & (over <= tolerance)
    # run[i] = length of the run of good ticks starting at i
    run = np.zeros(n + 1, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        run[i] = run[i + 1] + 1 if good[i] else 0
    out = []
    for j, (s, kind) in enumerate(zip(starts, kinds)):
        stop = starts[j + 1] if j + 1 < len(starts) else n
        hit = -1
        for i in range(s, stop):
            if run[i] >= min(hold, n - i):  # a good run reaching the end of the data counts
                hit = i
                break
        if hit >= 0:
            out.append(ConvergenceEvent(s, kind, True, hit - s, hit))
        else:
            out.append(ConvergenceEvent(s, kind, False, stop - s, stop))
    return out


__all__ = [
    "ConvergenceEvent",
    "TickFigures",
    "convergence",
    "jain_index",
    "max_min_fair",
    "max_min_fair_matrix",
    "tick_figures"
]
