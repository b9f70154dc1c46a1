"""A second, independent judge for tests: lexicographic max-min by repeated linear programs.

Used to check sim/oracle.py (progressive filling) on random problems. Nothing is shared
with the oracle but the problem statement: maximize the smallest dominant share
w_i * x_i over 0 <= x <= d, A x <= c; fix every daemon that cannot rise above that
level without lowering someone else; repeat with the rest (scipy's HiGHS solver).
"""

from __future__ import annotations

from collections.abc import Sequence

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
    # Variables: y_i = w_i x_i (dominant shares) and t. In share units every coefficient lies in
    # (0, 1] and every right-hand side is 1, so HiGHS sees a well-scaled problem whatever the
    # quotas (it drops matrix entries below 1e-9, e.g. 1 / 1e9 msg/s).
    share_rows = []
    for row, cap in zip(rows, caps):
        if cap <= 0:
            continue
        share_rows.append(np.where(w > 0, row / cap / np.where(w > 0, w, 1.0), 0.0))
    while len(fixed) < n:
        free = [i for i in range(n) if i not in fixed]

        def constraints(level: float | None) -> tuple[np.ndarray, np.ndarray, list[tuple[float, float]]]:
            a_ub, b_ub = [], []
            for row in share_rows:
                a_ub.append(np.append(row, 0.0))
                b_ub.append(1.0)
            for i in free:  # noqa: B023 - t <= y_i (called in this iteration only)
                r = np.zeros(n + 1)
                r[i] = -1.0
                r[n] = 1.0
                a_ub.append(r)
                b_ub.append(0.0)
            bounds = []
            for i in range(n):
                if i in fixed:
                    y = fixed[i] * w[i] if w[i] > 0 and np.isfinite(w[i]) else 0.0
                    bounds.append((y, y))
                else:
                    bounds.append((0.0, float(d[i] * w[i])))
            bounds.append((level, level) if level is not None else (0.0, None))
            return np.array(a_ub), np.array(b_ub), bounds

        a_ub, b_ub, bounds = constraints(None)
        c = np.zeros(n + 1)
        c[n] = -1.0
        res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
        assert res.status == 0, res.message
        level = float(res.x[n])
        a_ub, b_ub, bounds = constraints(level * (1 - tol))
        newly = []
        for i in free:
            ci = np.zeros(n + 1)
            ci[i] = -1.0
            r = linprog(ci, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
            assert r.status == 0, r.message
            if -r.fun <= level * (1 + 1e-6) + 1e-12:
                newly.append(i)
        if not newly:  # numerical corner: freeze the lowest one at the level
            newly = [min(free, key=lambda i: res.x[i])]
        for i in newly:
            fixed[i] = min(float(d[i]), level / w[i])
    return [fixed[i] for i in range(n)]
