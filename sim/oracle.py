"""The judge's ideal allocation: dominant-resource max-min fairness with demand caps.

Written apart from the allocator on purpose: the simulator must not grade a strategy
with the function that strategy allocates with (an error shared by both would be
invisible). Nothing here imports rgd.quota; tests cross-check it against a
lexicographic max-min computed by repeated linear programs (scipy's HiGHS).

The problem, per group and kind: daemon i asks for d_i messages/s of s_i bytes each;
the group allows M messages/s and B bytes/s (either may be unlimited, -1). A feasible
allocation x has 0 <= x_i <= d_i, sum x_i <= M and sum x_i * s_i <= B. Daemon i's
dominant share is max(x_i / M, x_i * s_i / B): how much of the scarcer resource it
holds. The ideal is the lexicographic max-min of dominant shares (Dominant Resource
Fairness with demand caps). With one limited dimension, or equal message sizes, it is
plain max-min fairness (water-filling) in that dimension.

How: progressive filling. Every unfrozen daemon's dominant share rises at the same
pace; a daemon freezes when it reaches its demand or when a constraint it uses
becomes tight. Between two such events every quantity is linear in the common
level, so the next event is found in closed form (no bisection, no tolerance).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

UNLIMITED = -1.0


@dataclass(frozen=True, slots=True)
class Constraint:
    """sum_i coeffs[i] * x_i <= capacity (coeffs >= 0)."""

    name: str
    capacity: float
    coeffs: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Allocation:
    shares: tuple[float, ...]  # x_i, messages/s
    tight: tuple[str, ...]  # constraints the ideal uses up (names), in the order given


def constraints_of(sizes: Sequence[float], messages_quota: float, bytes_quota: float) -> list[Constraint]:
    """The limited dimensions of one group and kind as packing constraints (-1 = unlimited)."""
    out = []
    if messages_quota >= 0:
        out.append(Constraint("messages", float(messages_quota), tuple(1.0 for _ in sizes)))
    if bytes_quota >= 0:
        out.append(Constraint("bytes", float(bytes_quota), tuple(float(s) for s in sizes)))
    return out


def dominant_weights(constraints: Sequence[Constraint], n: int) -> list[float]:
    """w_i with dominant share = w_i * x_i: the largest fraction of any capacity one message takes.

    A zero capacity that a daemon uses makes its weight infinite (it can hold nothing).
    """
    w = [0.0] * n
    for c in constraints:
        for i, a in enumerate(c.coeffs):
            if a <= 0:
                continue
            w[i] = max(w[i], math.inf if c.capacity <= 0 else a / c.capacity)
    return w


def progressive_fill(demands: Sequence[float], constraints: Sequence[Constraint]) -> Allocation:
    """Lexicographic max-min of dominant shares under packing constraints, capped by demand."""
    n = len(demands)
    d = [max(0.0, float(v)) for v in demands]
    w = dominant_weights(constraints, n)
    x = [0.0] * n
    tight: list[str] = []
    frozen = [False] * n
    for i in range(n):
        if d[i] == 0 or math.isinf(w[i]):
            frozen[i] = True  # nothing to give, or a resource it needs has no capacity
        elif w[i] == 0:
            x[i], frozen[i] = d[i], True  # uses no limited resource
    open_constraints = [c for c in constraints if c.capacity > 0]
    level = 0.0  # the common dominant share of every unfrozen daemon
    while not all(frozen):
        live = [i for i in range(n) if not frozen[i]]
        # Next level at which some live daemon reaches its demand ...
        nxt = min(d[i] * w[i] for i in live)
        # ... or some constraint fills: used_by_frozen + level * sum(a_i / w_i over live) = capacity.
        filling: list[tuple[float, Constraint]] = []
        for c in open_constraints:
            slope = sum(c.coeffs[i] / w[i] for i in live)
            if slope <= 0:
                continue
            fixed = sum(c.coeffs[i] * x[i] for i in range(n) if frozen[i])
            filling.append((max(level, (c.capacity - fixed) / slope), c))
        if filling:
            nxt = min(nxt, min(t for t, _ in filling))
        level = nxt
        for i in live:
            x[i] = min(d[i], level / w[i])
            if d[i] * w[i] <= level:
                x[i], frozen[i] = d[i], True
        for t, c in filling:
            if t <= level:
                tight.append(c.name)
                open_constraints.remove(c)
                for i in live:
                    if c.coeffs[i] > 0:
                        frozen[i] = True
    # A constraint may also end exactly full when the last daemons freeze at their demand.
    for c in open_constraints:
        if c.capacity > 0 and sum(a * v for a, v in zip(c.coeffs, x)) >= c.capacity * (1 - 1e-12):
            tight.append(c.name)
    for c in constraints:
        if c.capacity <= 0 and c.name not in tight and any(a > 0 for a in c.coeffs):
            tight.append(c.name)
    order = [c.name for c in constraints]
    return Allocation(tuple(x), tuple(sorted(set(tight), key=order.index)))


def max_min_fair(capacity: float, demands: Sequence[float]) -> list[float]:
    """One dimension: the max-min fair split of `capacity` over `demands` (-1 = unlimited)."""
    return list(progressive_fill(demands, constraints_of([1.0] * len(demands), capacity, UNLIMITED)).shares)


def dominant_fair(demands: Sequence[float], sizes: Sequence[float], messages_quota: float,
                  bytes_quota: float) -> Allocation:
    """Messages/s per daemon under a messages and/or bytes quota (-1 = unlimited)."""
    if len(sizes) != len(demands):
        raise ValueError(f"sizes: expected {len(demands)} message sizes, got {len(sizes)}")
    return progressive_fill(demands, constraints_of(sizes, messages_quota, bytes_quota))


__all__ = [
    "UNLIMITED",
    "Allocation",
    "Constraint",
    "constraints_of",
    "dominant_fair",
    "dominant_weights",
    "max_min_fair",
    "progressive_fill",
]
