"""The quota calculator: the one entry point the daemon and the simulator share.

`compute_limits` turns one group's usage map into this daemon's local limits;
`allocate_group` gives every member's share from one map (what each daemon would
compute if it saw exactly that map). Both are pure: no I/O, no clock, no state;
ids are iterated sorted so the same inputs always give the same floats.

Each dimension (publish/dispatch/replication x messages/bytes) is allocated on
its own by a scalar strategy from STRATEGIES. A group rate of -1 is unlimited
(math.inf out).

Why `previous` (strategy `rgd`): a daemon sees its own newest report before its
peers do; they fold it at their next tick. If it granted itself a share computed
from demand they have not seen, and they granted themselves shares computed from
its older demand, the cluster would admit more than the quota until the next
tick (a daemon waking up, a demand step). So for its *own* share a daemon counts
its demand as the smaller of its newest report and `previous`, the report every
peer has already folded: decreases apply at once, increases one tick later, when
peers have made room. The `rgd` strategy is monotone (a share never grows when
someone else's demand grows), so if every daemon does this the shares in force at
any moment sum to at most the quota, even though no two daemons see the same map.
A daemon with no report of its own that peers have folded gets the floor every
peer reserves for it (QuotaParams.newcomer_fraction), never the full quota.
"""

from __future__ import annotations

import math
from typing import Collection, Mapping

from rgd.groups import KINDS, ResourceGroup
from rgd.quota import doorman, max_min_fair, pulsar, static
from rgd.quota.inputs import DimensionInput, QuotaParams, Strategy
from rgd.quota.model import GroupLimits, KindRates, PeerUsage

INF = math.inf
DEFAULT_STRATEGY = "rgd"
DEFAULT_PARAMS = QuotaParams()

STRATEGIES: dict[str, Strategy] = {
    "rgd": max_min_fair.allocate,
    "pulsar": pulsar.allocate,
    "doorman-proportional": doorman.allocate_proportional,
    "doorman-fair": doorman.allocate_fair,
    "static": static.allocate,
}
# Strategies that count a daemon's own demand as its peers see it (see module doc).
# The baselines reproduce other systems, which do not.
PEER_VIEW_STRATEGIES = frozenset({"rgd"})


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


def strategy_named(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"strategy: {name!r} is not one of {', '.join(sorted(STRATEGIES))}") from None


def _dimension(k: KindRates, dim: str) -> tuple[float, float, float]:
    if dim == "messages":
        return k.demand_messages, k.admitted_messages, k.limit_messages
    return k.demand_bytes, k.admitted_bytes, k.limit_bytes


def dimension_inputs(usage: Mapping[str, PeerUsage], kind: str, dim: str) -> dict[str, DimensionInput]:
    """One dimension of the usage map, in the shape strategies take."""
    out: dict[str, DimensionInput] = {}
    for daemon, pu in usage.items():
        demand, admitted, limit = _dimension(pu.kind(kind), dim)
        out[daemon] = DimensionInput(demand, admitted, limit)
    return out


Shares = dict[str, "tuple[dict[str, float] | None, dict[str, float] | None]"]  # kind -> (msgs, bytes)


def _shares(
    group: ResourceGroup, usage: Mapping[str, PeerUsage], ids: Collection[str], strategy: str,
    params: QuotaParams,
) -> Shares:
    """Per kind, the strategy's split of each dimension; None for an unlimited dimension
    (no work: every daemon is unlimited there)."""
    allocate = strategy_named(strategy)
    out: Shares = {}
    for kind in KINDS:
        pair = []
        for dim, rate in zip(("messages", "bytes"), group.rates(kind)):
            if rate < 0:
                pair.append(None)
            else:
                pair.append(allocate(float(rate), dimension_inputs(usage, kind, dim), ids, params))
        out[kind] = (pair[0], pair[1])
    return out


def _limits_of(shares: Shares, daemon: str) -> GroupLimits:
    return {
        kind: (INF if m is None else m[daemon], INF if b is None else b[daemon])
        for kind, (m, b) in shares.items()
    }


def allocate_group(
    group: ResourceGroup,
    usage: Mapping[str, PeerUsage],
    members: Collection[str],
    strategy: str = DEFAULT_STRATEGY,
    params: QuotaParams | None = None,
) -> dict[str, GroupLimits]:
    """Every member's limits computed from one map: {daemon -> {kind -> (msgs/s, bytes/s)}}.

    Members idle in the group (no entry) get a value too; daemons in the map but not
    in `members` are included, so nothing in the map is silently ignored.
    """
    ids = sorted(set(members) | set(usage))
    shares = _shares(group, usage, ids, strategy, params or DEFAULT_PARAMS)
    return {i: _limits_of(shares, i) for i in ids}


def _min_kind(a: KindRates, b: KindRates) -> KindRates:
    adm_m = min(a.admitted_messages, b.admitted_messages)
    adm_b = min(a.admitted_bytes, b.admitted_bytes)
    return KindRates(
        adm_m,
        adm_b,
        min(a.demand_messages, b.demand_messages) - adm_m,
        min(a.demand_bytes, b.demand_bytes) - adm_b,
        a.limit_messages,
        a.limit_bytes,
    )


def as_peers_see_me(
    usage: Mapping[str, PeerUsage], self_id: str, previous: "PeerUsage | None | _Unset" = UNSET
) -> Mapping[str, PeerUsage]:
    """The map with our own entry replaced by what every peer already knows of it.

    previous=None: peers hold nothing of ours for this group, so we are a member
    without demand (the floor). previous=UNSET (caller does not track it): our first
    report for the group counts as unseen, later ones as seen (optimistic on increases).
    """
    latest = usage.get(self_id)
    if latest is None:
        return usage
    if isinstance(previous, _Unset):
        previous = latest if latest.reports > 1 else None
    view = dict(usage)
    if previous is None:
        del view[self_id]
    else:
        view[self_id] = PeerUsage(
            reports=latest.reports, **{k: _min_kind(latest.kind(k), previous.kind(k)) for k in KINDS}
        )
    return view


def compute_limits(
    group: ResourceGroup,
    usage: Mapping[str, PeerUsage],
    self_id: str,
    members: Collection[str],
    strategy: str = DEFAULT_STRATEGY,
    params: QuotaParams | None = None,
    *,
    previous: "PeerUsage | None | _Unset" = UNSET,
) -> GroupLimits:
    """This daemon's limits for `group`: {kind -> (messages/s, bytes/s)}, inf = unlimited.

    usage: {daemon -> PeerUsage} for this group, our own newest entry included.
    members: live daemons we know (ourselves included; idle ones too).
    previous: our own entry as it was before the newest one was put in the map,
      i.e. the one every peer has folded by now; None if we never reported this
      group. Pass it: without it an increase of our own demand is granted a tick
      early, which can overshoot the quota for that tick (see module doc).
    """
    view = as_peers_see_me(usage, self_id, previous) if strategy in PEER_VIEW_STRATEGIES else usage
    ids = set(members) | set(view) | {self_id}  # strategies sort what they iterate
    return _limits_of(_shares(group, view, ids, strategy, params or DEFAULT_PARAMS), self_id)


__all__ = [
    "DEFAULT_PARAMS", "DEFAULT_STRATEGY", "STRATEGIES", "PEER_VIEW_STRATEGIES", "UNSET",
    "DimensionInput", "QuotaParams", "allocate_group", "as_peers_see_me", "compute_limits",
    "dimension_inputs", "strategy_named",
]
