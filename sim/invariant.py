"""The cluster's safety invariant, checked at every sub-step of a simulated run.

The invariant (docs: the cluster protocol's safety argument): at every instant, for every
group, kind and limited dimension (messages/s, bytes/s), the local limits the live daemons
have granted themselves sum to at most the quota times (1 + TOLERANCE). It is stricter than
the judge's overshoot (sim/metrics.py), which looks at what was admitted in whole ticks: a
daemon that holds a limit its brokers do not spend yet breaks it as surely as one that
spends it, and the next surge of demand turns the one into the other.

What counts:
- every running daemon, partitioned ones included (their brokers still ask them); a
  crashed or departed daemon grants nothing, and neither does one past the end of its lease
  (`Limiter.lease_until`: its limiter refuses every ask, whenever its node recomputes next);
- a dimension whose quota is unlimited (-1) is outside the check, and so is a limit of INF
  (unlimited): it is no grant one can add up;
- a group the daemon holds a limit for but the config no longer has is not checked.

A violation is one episode: consecutive checks (two per sub-step: after the ticks, which
set limits the sub-step's traffic meets, and after the reacts) over the bound in one
dimension. It keeps its first and last instant, how many checks it lasted, and the worst
instant's sum, per-daemon limits and situation (who was partitioned, newly joined,
crashed or healed within the TTL; the transport's loss and delay), so the premise that
failed can be named beside it.

Cheap on purpose (the fuzzer runs 500 scenarios under 5 strategies): a daemon's grants are
read again only when its limiter says a limit, its set of states or its lease moved
(`Limiter.limit_changes`, `Limiter.states_version`, `Limiter.lease_until`), and only
the dimensions it touched are summed again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from rgd.config.groups import ResourceGroup
from rgd.limiting.limiter import Limiter

__all__ = ["TOLERANCE", "UNITS", "InvariantChecker", "Situation", "Violation", "grants_of"]

# The same 10 % the judge allows a tick's usage over the quota (sim.metrics.TOLERANCE).
TOLERANCE = 0.10
# A sum within this fraction of the bound is float noise of shares that add up to it.
RELATIVE_EPSILON = 1e-9
UNITS = ("messages", "bytes")

Dimension = tuple[str, str, str]  # group, kind, unit


class HasLimiter(Protocol):
    @property
    def limiter(self) -> Limiter: ...


@dataclass(frozen=True)
class Situation:
    """What was going on when the invariant broke: the premises a violation may be laid to."""

    partitioned: tuple[str, ...] = ()  # cut off from the topic now
    joined: tuple[str, ...] = ()  # joined within the TTL (the daemons of the start, in its first TTL)
    crashed: tuple[str, ...] = ()  # crashed within the TTL (peers may still count them)
    healed: tuple[str, ...] = ()  # back from a partition within the TTL
    loss: float = 0.0
    delay: float = 0.0  # ticks

    def describe(self) -> str:
        parts = [f"{what} {','.join(ids)}" for what, ids in (
            ("partitioned", self.partitioned), ("joined", self.joined), ("crashed", self.crashed),
            ("healed", self.healed)) if ids]
        parts.append(f"loss {self.loss:g}, delay {self.delay:g} ticks")
        return "; ".join(parts)


@dataclass(frozen=True)
class Violation:
    """One episode over the bound in one dimension, with its worst instant."""

    dimension: str  # "group/kind"
    unit: str  # messages | bytes (per second)
    start: float  # seconds of simulated time
    end: float  # the last check over the bound
    checks: int  # consecutive checks over the bound
    at: float  # the worst instant
    total: float  # the sum of granted limits then
    quota: float
    limits: tuple[tuple[str, float], ...]  # each daemon's limit then
    situation: Situation

    @property
    def excess_pct(self) -> float:
        """How far the sum was above the quota, in % of the quota (INF for a quota of 0)."""
        return (self.total / self.quota - 1.0) * 100.0 if self.quota > 0 else math.inf

    def describe(self) -> str:
        return (f"{self.dimension} {self.unit} at t={self.at:.2f} s: granted {self.total:g} of {self.quota:g} "
                f"({self.excess_pct:+.1f} %), {self.checks} check(s) from t={self.start:.2f} to {self.end:.2f} s "
                f"[{self.situation.describe()}]")


def grants_of(limiter: Limiter, groups: Mapping[str, ResourceGroup], now: float = -math.inf) -> dict[Dimension, float]:
    """A daemon's finite limits in every limited dimension of the groups in the config; none
    at all from the end of its lease on (`Limiter.lease_until`: it refuses every ask then)."""
    out: dict[Dimension, float] = {}
    leased = now < limiter.lease_until
    for (name, kind), st in limiter.states.items():
        group = groups.get(name)
        if group is None:
            continue
        for unit, quota, limit in zip(UNITS, group.rates(kind), st.limit, strict=True):
            if quota >= 0 and limit != math.inf:
                out[(name, kind, unit)] = limit if leased else 0.0
    return out


def _quota(groups: Mapping[str, ResourceGroup], dim: Dimension) -> float | None:
    group = groups.get(dim[0])
    if group is None:
        return None
    quota = group.rates(dim[1])[UNITS.index(dim[2])]
    return quota if quota >= 0 else None


@dataclass
class _Episode:
    start: float
    end: float
    checks: int
    worst: Violation


class InvariantChecker:
    """Checks the invariant over a run's daemons; `check` at every instant, `finish` at the end."""

    def __init__(self, tolerance: float = TOLERANCE) -> None:
        self.tolerance = tolerance
        self.violations: list[Violation] = []
        self.checks = 0
        # node id -> (limiter, states_version, changes, lease_until, leased)
        self._seen: dict[str, tuple[Limiter, int, int, float, bool]] = {}
        self._grants: dict[str, dict[Dimension, float]] = {}
        self._by_dim: dict[Dimension, dict[str, float]] = {}
        self._open: dict[Dimension, _Episode] = {}
        self._dirty_all = True  # judge every dimension at the next check (the start, a config change)

    def config_changed(self) -> None:
        """Quotas moved: read every daemon's grants again and judge every dimension."""
        self._seen.clear()
        self._dirty_all = True

    def check(self, now: float, nodes: Mapping[str, HasLimiter], groups: Mapping[str, ResourceGroup],
              situation: Callable[[], Situation]) -> None:
        self.checks += 1
        dirty: set[Dimension] = set()
        for gone in [n for n in self._grants if n not in nodes]:
            self._set_grants(gone, {}, dirty)
            del self._grants[gone]
            self._seen.pop(gone, None)
        for node_id, node in nodes.items():
            lim = node.limiter
            seen = self._seen.get(node_id)
            now_seen = (lim, lim.states_version, lim.limit_changes, lim.lease_until, now < lim.lease_until)
            if seen == now_seen:  # the same limiter (compared by identity), nothing moved
                continue
            self._seen[node_id] = now_seen
            self._set_grants(node_id, grants_of(lim, groups, now), dirty)
        if self._dirty_all:
            dirty.update(self._by_dim)
            dirty.update(self._open)
            self._dirty_all = False
        for dim in dirty:
            self._judge(now, dim, groups, situation)
        for dim, ep in self._open.items():
            if dim not in dirty:  # nothing moved: still over
                ep.end, ep.checks = now, ep.checks + 1

    def _set_grants(self, node_id: str, new: dict[Dimension, float], dirty: set[Dimension]) -> None:
        old = self._grants.get(node_id, {})
        for dim in old.keys() | new.keys():
            value = new.get(dim)
            if old.get(dim) == value:
                continue
            dirty.add(dim)
            per = self._by_dim.setdefault(dim, {})
            if value is None:
                per.pop(node_id, None)
                if not per:
                    del self._by_dim[dim]
            else:
                per[node_id] = value
        self._grants[node_id] = new

    def _judge(self, now: float, dim: Dimension, groups: Mapping[str, ResourceGroup],
               situation: Callable[[], Situation]) -> None:
        per = self._by_dim.get(dim, {})
        quota = _quota(groups, dim)
        total = math.fsum(per.values())
        if quota is None or total <= quota * (1.0 + self.tolerance) * (1.0 + RELATIVE_EPSILON):
            ep = self._open.pop(dim, None)
            if ep is not None:
                self._close(ep)
            return
        ep = self._open.get(dim)
        if ep is not None:
            ep.end, ep.checks = now, ep.checks + 1
            if total <= ep.worst.total:
                return
        worst = Violation(f"{dim[0]}/{dim[1]}", dim[2], now, now, 1, now, total, quota,
                          tuple(sorted(per.items())), situation())
        if ep is None:
            self._open[dim] = _Episode(now, now, 1, worst)
        else:
            ep.worst = worst

    def _close(self, ep: _Episode) -> None:
        w = ep.worst
        self.violations.append(Violation(w.dimension, w.unit, ep.start, ep.end, ep.checks, w.at, w.total,
                                         w.quota, w.limits, w.situation))

    def finish(self) -> list[Violation]:
        """Close the episodes still open; every violation of the run, by start."""
        for ep in self._open.values():
            self._close(ep)
        self._open.clear()
        self.violations.sort(key=lambda v: (v.start, v.dimension, v.unit))
        return self.violations
