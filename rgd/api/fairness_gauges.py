"""Live fairness of a group's split, per kind and unit, from the usage map: the gauges
`rgd_group_fairness_jain`, `rgd_group_fair_share_error`, `rgd_group_quota_utilization`.

The offline report (rgd.fairness.measures) judges every tick of the logs after the fact;
these are the same measures on the usage map as it stands, so an operator can alert on a
group treated unfairly now. Per group, kind and limited unit (messages/s or bytes/s), with
quota Q and, per daemon d in the map, its admitted rate a_d and demand w_d (admitted +
throttled), as last reported:

- fair share f = max-min fair split of Q over the demands (water-filling: nobody gets more
  than it asked for, the rest share equally what is left);
- Jain's index over x_d = a_d / f_d for the daemons with f_d > 0: (sum x)^2 / (n sum x^2),
  1 when every daemon has the same fraction of its fair share (1 also when nobody has a
  fair share, or nobody admitted anything: nothing is unequal);
- fair share error = max_d |a_d - f_d| / Q: the worst daemon's distance from its share, as
  a fraction of the quota;
- quota utilization = sum a / Q.

Pure functions of their inputs. The daemon computes `map_fairness` at most once a tick, when
a scrape asks (in the scrape's worker thread, like every collector: it reads the map through
list() copies while the loop goes on changing it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from rgd.config.groups import KINDS, ResourceGroup
from rgd.quota.max_min_fair import water_fill

if TYPE_CHECKING:
    from rgd.cluster.usage_map import UsageMap

UNITS = ("messages", "bytes")


class Fairness(NamedTuple):
    jain: float
    fair_share_error: float
    quota_utilization: float


def fairness(admitted: Sequence[float], demand: Sequence[float], quota: float) -> Fairness:
    """The three measures for one (group, kind, unit): `admitted[d]`, `demand[d]` per daemon,
    `quota` > 0 (a finite cluster-wide rate)."""
    if quota <= 0:
        raise ValueError(f"quota must be > 0, got {quota}")
    fair = water_fill(quota, [max(0.0, w) for w in demand])
    ratios = [a / f for a, f in zip(admitted, fair) if f > 0]
    total, squares = sum(ratios), sum(x * x for x in ratios)
    jain = total * total / (len(ratios) * squares) if squares > 0 else 1.0
    error = max((abs(a - f) for a, f in zip(admitted, fair)), default=0.0) / quota
    return Fairness(jain, error, sum(admitted) / quota)


def map_fairness(usage_map: UsageMap, budgets: Mapping[str, ResourceGroup]) -> dict[tuple[str, str, str], Fairness]:
    """(budget name, kind, unit) -> Fairness for every budget in the map with a limited quota
    in that unit and some demand in that kind (an idle kind, or an unlimited unit, has no
    fair share to be judged by)."""
    out: dict[tuple[str, str, str], Fairness] = {}
    for name, entries in list(usage_map.groups.items()):
        group = budgets.get(name)
        if group is None or not entries:
            continue
        kinds = [entry.usage for entry in list(entries.values())]
        for kind in KINDS:
            per_daemon = [u.kind(kind) for u in kinds]
            for unit, quota in zip(UNITS, group.rates(kind)):
                if quota <= 0:  # -1: unlimited; 0: the kind is blocked, nothing is shared
                    continue
                if unit == "messages":
                    demand = [k.demand_messages for k in per_daemon]
                    admitted = [k.admitted_messages for k in per_daemon]
                else:
                    demand = [k.demand_bytes for k in per_daemon]
                    admitted = [k.admitted_bytes for k in per_daemon]
                if sum(demand) <= 0 and sum(admitted) <= 0:
                    continue
                out[(name, kind, unit)] = fairness(admitted, demand, quota)
    return out


__all__ = ["UNITS", "Fairness", "fairness", "map_fairness"]
