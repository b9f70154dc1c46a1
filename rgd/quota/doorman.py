"""Strategies `doorman-proportional` and `doorman-fair`: YouTube Doorman's algorithms.

Facts from reading youtube/doorman `go/server/doorman/algorithm.go`; every client
has one subclient here (one daemon), its *wants* are its demand and its *has* is
the limit it last reported (its outstanding lease):
- ProportionalShare: equal = capacity / clients. A client gets what it wants if
  the sum of all wants fits the capacity or it wants no more than `equal`;
  otherwise `equal + (wants - equal) * extra / need`, where `extra` is what the
  clients below their equal share leave and `need` is the sum of (wants - equal)
  over the others. Docs' example, capacity 120, wants 1000/50/10: 69.69/40.31/10.
- FairShare: what it wants if no more than `equal`; else the equal share plus an
  equal part of what the small clients leave (first round), and, if it wants more
  than that too, an equal part of what the clients between the two levels leave
  (second round; Doorman stops there). Same example: 60/50/10.
- Both cap the grant at the capacity not leased to other clients
  (`capacity - SumHas + old.Has`). The server sees refreshes one at a time; we
  replay them in sorted id order, each later client seeing the earlier grants, so
  one view never leases more than the capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from rgd.quota.inputs import INF, DimensionInput, QuotaParams, Strategy, all_ids

Algorithm = Callable[[float, str, Mapping[str, float]], float]


def proportional_share(capacity: float, client: str, wants: Mapping[str, float]) -> float:
    """Doorman's ProportionalShare `gets` for `client` (before the lease cap)."""
    count = len(wants)
    equal = capacity / count
    mine = wants[client]
    if sum(wants.values()) <= capacity or mine <= equal:
        return mine
    extra_capacity = 0.0
    extra_need = 0.0
    for w in wants.values():
        if w < equal:
            extra_capacity += equal - w
        else:
            extra_need += w - equal
    return equal + (mine - equal) * (extra_capacity / extra_need)


def fair_share(capacity: float, client: str, wants: Mapping[str, float]) -> float:
    """Doorman's FairShare `gets` for `client` (before the lease cap), two rounds."""
    count = len(wants)
    equal = capacity / count
    mine = wants[client]
    if mine <= equal:
        return mine
    extra = 0.0
    want_extra = 1  # this client
    contenders: list[float] = []
    for cid, w in wants.items():
        if cid == client:
            continue
        if w < equal:
            extra += equal - w
        elif w > equal:
            want_extra += 1
            contenders.append(w)
    deserved_extra = extra / want_extra
    level = equal + deserved_extra
    if mine < level:
        return mine
    extra_extra = 0.0
    want_extra_extra = 1
    for w in contenders:
        if w < level:
            extra_extra += level - w
        elif w > level:
            want_extra_extra += 1
    return level + extra_extra / want_extra_extra


def _lease(limit: float, capacity: float) -> float:
    """A reported limit as a Doorman lease; unlimited means no lease was granted yet."""
    if limit == INF:
        return 0.0
    return min(capacity, max(0.0, limit))


def _with_leases(algorithm: Algorithm) -> Strategy:
    def allocate(
        quota: float, entries: Mapping[str, DimensionInput], members: Collection[str], params: QuotaParams
    ) -> dict[str, float]:
        ids = all_ids(entries, members)
        if not ids:
            return {}
        if quota == INF:
            return {i: INF for i in ids}
        if quota <= 0:
            return {i: 0.0 for i in ids}
        wants = {i: max(0.0, entries[i].demand) if i in entries else 0.0 for i in ids}
        has = {i: _lease(entries[i].limit, quota) if i in entries else 0.0 for i in ids}
        out: dict[str, float] = {}
        for i in ids:
            gets = algorithm(quota, i, wants)
            available = quota - sum(has.values()) + has[i]
            out[i] = has[i] = max(0.0, min(gets, available))
        return out

    allocate.__doc__ = f"{algorithm.__name__} on demand, each grant capped by the unleased capacity."
    return allocate


allocate_proportional = _with_leases(proportional_share)
allocate_fair = _with_leases(fair_share)
