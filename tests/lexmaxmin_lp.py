"""A second, independent judge for tests: lexicographic max-min by repeated linear programs.

Used to check sim/oracle.py (progressive filling) on random problems. Nothing is shared
with the oracle but the problem statement: maximize the smallest dominant share
w_i * x_i over 0 <= x <= d, A x <= c; fix every daemon that cannot rise above that
level without lowering someone else; repeat with the rest (scipy's HiGHS solver).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.optimize import linprog

__all__ = ["lexicographic_max_min"]


def lexicographic_max_min(demands: Sequence[float], sizes: Sequence[float], messages_quota: float,
                          bytes_quota: float, tol: float = 1e-7) -> list[float]:
    d = np.asarray(demands, dtype=float)
    s = np.asarray(sizes, dtype=float)
    n = len(d)
    rows, caps = [], []
    if messages_quota >= 0:
        rows.append(np.ones(n))
        caps.append(float(messages_quota))
    if bytes_quota >= 0:
        rows.append(s.copy())
        caps.append(float(bytes_quota))
    if n == 0:
        return []
    # Dominant share per message; a daemon that uses only unlimited resources gets its demand.
    w = np.zeros(n)
    for row, cap in zip(rows, caps):
        with np.errstate(divide="ignore"):
            w = np.maximum(w, np.where(row > 0, row / cap if cap > 0 else np.inf, 0.0))
    fixed: dict[int, float] = {}
    for i in range(n):
        if d[i] <= 0 or np.isinf(w[i]):
            fixed[i] = 0.0
        elif w[i] == 0:
            fixed[i] = float(d[i])
    # Variables: x_0..x_{n-1}, t. Shares are scaled by `scale` to keep HiGHS well conditioned.
    scale = 1.0 / max(1e-300, float(np.max(w[np.isfinite(w)], initial=1.0)))
    while len(fixed) < n:
        free = [i for i in range(n) if i not in fixed]

        def constraints(level: float | None) -> tuple[np.ndarray, np.ndarray, list[tuple[float, float]]]:
            a_ub, b_ub = [], []
            for row, cap in zip(rows, caps):
                a_ub.append(np.append(row, 0.0))
                b_ub.append(cap)
            for i in free:  # t <= w_i x_i / scale  ->  t - w_i x_i / scale <= 0
                r = np.zeros(n + 1)
                r[i] = -w[i] * scale
                r[n] = 1.0
                a_ub.append(r)
                b_ub.append(0.0)
            bounds = [(fixed[i], fixed[i]) if i in fixed else (0.0, float(d[i])) for i in range(n)]
            bounds.append((level, level) if level is not None else (0.0, None))
            return np.array(a_ub), np.array(b_ub), bounds

        a_ub, b_ub, bounds = constraints(None)
        c = np.zeros(n + 1)
        c[n] = -1.0
        res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
        assert res.status == 0, res.message
        level = float(res.x[n])
        a_ub, b_ub, bounds = constraints(level * (1 - tol) if level > 0 else 0.0)
        newly = []
        for i in free:
            ci = np.zeros(n + 1)
            ci[i] = -w[i] * scale
            r = linprog(ci, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
            assert r.status == 0, r.message
            if -r.fun <= level * (1 + 1e-6) + 1e-9:
                newly.append(i)
        if not newly:  # numerical corner: freeze the lowest one at the level
            newly = [min(free, key=lambda i: res.x[i] * w[i])]
        for i in newly:
            fixed[i] = min(float(d[i]), level / (w[i] * scale))
    return [fixed[i] for i in range(n)]
