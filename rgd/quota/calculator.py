"""The quota calculator: the one entry point the daemon and the simulator share.

`compute_limits` turns one group's usage map into this daemon's local limits;
`allocate_group` gives every member's share from one map (what each daemon would
compute if it saw exactly that map). Both are pure: no I/O, no clock, no state;
ids are iterated sorted so the same inputs always give the same floats.

Each kind's (publish/dispatch/replication) messages and bytes are allocated by a
scalar strategy from STRATEGIES: jointly in dominant shares for `rgd` when both
are limited (`_joint`), each on its own otherwise. A group rate of -1 is unlimited
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
any moment sum to at most the quota, even though no two daemons see the same map
(a kind split jointly: at most JOINT_MAX_BUDGET times it, see `_joint`).
A daemon with no report of its own that peers have folded gets the floor every
peer reserves for it (QuotaParams.newcomer_fraction), never the full quota.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from rgd.config.groups import KINDS, ResourceGroup
from rgd.config.settings import STRATEGY_NAMES
from rgd.quota import doorman, max_min_fair, pulsar, static
from rgd.quota.inputs import DimensionInput, QuotaParams, Strategy
from rgd.quota.model import GroupLimits, KindRates, PeerUsage, min_usage

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
if tuple(STRATEGIES) != STRATEGY_NAMES:  # settings validate --strategy against those names
    raise ImportError(f"rgd.quota.calculator.STRATEGIES {tuple(STRATEGIES)} != "
                      f"rgd.config.settings.STRATEGY_NAMES {STRATEGY_NAMES}")
# Strategies that count a daemon's own demand as its peers see it (see module doc).
# The baselines reproduce other systems, which do not.
PEER_VIEW_STRATEGIES = frozenset({"rgd"})
# Strategies that allocate a kind's messages and bytes jointly (see `_joint`).
JOINT_STRATEGIES = frozenset({"rgd"})


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


def _granule(k: KindRates, dim: str, params: QuotaParams) -> float:
    """One message per counting window in the messages dimension (QuotaParams.counting_window).
    None in bytes: one message's bytes is demand_bytes / demand_messages, which grows when
    the messages demand alone shrinks, and the safety argument needs every figure a daemon
    claims to be monotone in its reported demand (see module doc)."""
    if dim != "messages" or k.demand_messages <= 0:
        return 0.0
    return 1.0 / params.counting_window


def dimension_inputs(usage: Mapping[str, PeerUsage], kind: str, dim: str,
                     params: QuotaParams = DEFAULT_PARAMS) -> dict[str, DimensionInput]:
    """One dimension of the usage map, in the shape strategies take."""
    out: dict[str, DimensionInput] = {}
    for daemon, pu in usage.items():
        k = pu.kind(kind)
        demand, admitted, limit = _dimension(k, dim)
        out[daemon] = DimensionInput(demand, admitted, limit, _granule(k, dim, params))
    return out


Shares = dict[str, "tuple[dict[str, float] | None, dict[str, float] | None]"]  # kind -> (msgs, bytes)


def _ratio(x: float, q: float) -> float:
    return INF if x == INF else x / q


def dominant_inputs(
    usage: Mapping[str, PeerUsage], kind: str, msgs_quota: float, bytes_quota: float,
    params: QuotaParams = DEFAULT_PARAMS,
) -> dict[str, DimensionInput]:
    """One kind of the map in dominant-share units: each daemon's demand, usage and limit
    as the larger of its fractions of the messages quota and of the bytes quota."""
    out: dict[str, DimensionInput] = {}
    for daemon, pu in usage.items():
        k = pu.kind(kind)
        out[daemon] = DimensionInput(
            max(k.demand_messages / msgs_quota, k.demand_bytes / bytes_quota),
            max(k.admitted_messages / msgs_quota, k.admitted_bytes / bytes_quota),
            max(_ratio(k.limit_messages, msgs_quota), _ratio(k.limit_bytes, bytes_quota)),
            _dominant_granule(k, msgs_quota, bytes_quota, params),
        )
    return out


def _dominant_granule(k: KindRates, msgs_quota: float, bytes_quota: float, params: QuotaParams) -> float:
    """One message per counting window in dominant shares: the larger of its share of the
    messages quota and, at the entry's mean size, of the bytes quota.

    Why the bytes side too: a daemon whose bytes bind counts its demand in messages all the
    same, one message per window off, and one message is far more of the bytes quota than of
    the messages quota. Counted in messages only, a 955-byte message of a 15.7 kB/s, 189 msg/s
    group got 0.09 of a message as headroom, so a daemon offered 1.8 msg/s that counted 1 in a
    tick was held to 1.34 msg/s and denied its second message (fuzz seed 1, case 398).
    The mean size is not monotone in the figures (fewer messages of the same bytes make it
    larger), which `_granule` avoids in the bytes dimension; here it only sizes headroom
    water-filled over spare, within the joint budget's bound across views
    (tests/system/test_quota_properties.py checks both bounds with it)."""
    messages = _granule(k, "messages", params)  # one message per window, in messages/s (0: no demand)
    if not messages:
        return 0.0
    return messages * max(1.0 / msgs_quota, k.mean_message / bytes_quota)


# The joint allocation's budget of dominant shares (see `_joint`): at most JOINT_MAX_BUDGET.
# Any budget C holds every dimension to C times its quota whatever the message sizes, so
# daemons whose views differ (reports in flight) are held to no more than that between
# them, while each view alone is held to the quota. That bound is reached only by sizes no
# broker sends: hypothesis, steered to the largest excess (hypothesis.target), reached
# 1.1000 at C = 1.1 with messages of 1e-295 and 1e70 bytes; with sizes of 1 B to 5 MiB
# (Pulsar's maxMessageSize) changing arbitrarily between reports, at most 0.48 % at
# C = 1.5 and 0.47 % at C = 2 in 4 000 examples each (tests/system/test_quota_properties.py
# holds such sizes to 10 % over). Why 1.5 and not 1.1: a group whose fair split needs more
# than the budget leaves part of a quota unused for good, and at 1.1 that was the largest
# class of what the fuzz failed (coupled groups needing 1.15-1.4 dominant shares; see
# sim/README.md for the figures); the worst-case bound stays finite, as no cap would not.
JOINT_MAX_BUDGET = 1.5
JOINT_SEARCH_STEPS = 8  # at most this many budgets tried between 1 and the demand
JOINT_CLOSE_ENOUGH = 1e-3  # a budget that uses its quota to within 0.1 % ends the search


def _translate(shares: Mapping[str, float], usage: Mapping[str, PeerUsage], kind: str, msgs_quota: float,
               bytes_quota: float) -> tuple[dict[str, float], dict[str, float]]:
    """Dominant shares to (messages/s, bytes/s): a daemon with share a and message size s
    gets (x, x * s) with x = a / max(1/M, s/B), so both its buckets drain together; a daemon
    without demand (its size unknown) gets (a * M, a * B)."""
    msgs: dict[str, float] = {}
    nbytes: dict[str, float] = {}
    for daemon, a in shares.items():
        pu = usage.get(daemon)
        k = pu.kind(kind) if pu is not None else None
        if k is None or k.demand_messages <= 0 or k.demand_bytes <= 0:
            msgs[daemon], nbytes[daemon] = a * msgs_quota, a * bytes_quota
            continue
        size = k.mean_message
        if size / bytes_quota >= 1.0 / msgs_quota:  # bytes dominate: served in bytes
            nbytes[daemon] = a * bytes_quota
            msgs[daemon] = min(a * msgs_quota, nbytes[daemon] / size)
        else:
            msgs[daemon] = a * msgs_quota
            nbytes[daemon] = min(a * bytes_quota, msgs[daemon] * size)
    return msgs, nbytes


def _joint(
    usage: Mapping[str, PeerUsage], kind: str, ids: Collection[str], msgs_quota: float, bytes_quota: float,
    params: QuotaParams,
) -> tuple[dict[str, float], dict[str, float]]:
    """Messages and bytes of one kind allocated together (dominant resource fairness), for
    strategy `rgd` (JOINT_STRATEGIES): its scalar strategy (max_min_fair, whose steps the
    budget search evaluates too) splits the group in dominant shares, so a daemon whose bytes bind
    is served in bytes and one whose messages bind in messages (`_translate`): both its
    buckets drain together, so the dimension that does not bind saves no burst it could
    spend after a change, and no message share is held where bytes bind.

    The budget: dominant shares summing to 1 fit both quotas for any message sizes
    (sum(x) <= sum(a) * M and sum(x * s) <= sum(a) * B). But where some daemons are bound
    by messages and others by bytes, each dimension is then only partly used: three
    daemons of small messages holding 56 % of the message quota use 51 % of the bytes,
    and the large-message daemons, held to the remaining 44 % in dominant shares, leave 5 %
    of the bytes quota unused for good (the simulator's coupled scenarios converged at
    92 % utilization, never within 10 % of the fair shares). So when the group's demand
    exceeds the quota, the budget grows past 1 for as long as the translated shares still
    fit both quotas (`_joint_budget`): progressive filling in dominant shares until a quota
    is used up, what dominant resource fairness with demand caps gives.

    Safety: in one map every budget tried is checked against both quotas. Across daemons,
    which see different maps, the budget is what breaks the "safe for any sizes" argument
    above: a daemon whose messages grew larger uses fewer messages at the same share, so a
    view holding its newer report finds room the others do not. Two bounds keep that small:
    our own size differs most often (our newest report, peers' older one), so we take no
    more than we would get in the view peers hold (compute_limits); and the budget is at
    most JOINT_MAX_BUDGET, so whatever the sizes in any view, shares in force sum to at most
    that many times each quota (the scalar argument in dominant shares, budget C for 1).
    The property tests (tests/system/test_quota_properties.py) hold one map to the quota, our
    newer own report against peers' older one to the quota, and any delivery delay to the
    bound; the excesses hypothesis found with budgets up to 2 were 0.08-0.13 %, and the
    fuzz showed none it could tell from counting noise."""
    inputs = dominant_inputs(usage, kind, msgs_quota, bytes_quota, params)
    budget = _joint_budget(inputs, usage, kind, ids, msgs_quota, bytes_quota, params)
    return _translate(max_min_fair.allocate(budget, inputs, ids, params), usage, kind, msgs_quota, bytes_quota)


def _joint_budget(
    inputs: Mapping[str, DimensionInput], usage: Mapping[str, PeerUsage], kind: str, ids: Collection[str],
    msgs_quota: float, bytes_quota: float, params: QuotaParams,
) -> float:
    """The largest budget of dominant shares whose translation fits both quotas (see `_joint`).

    Judged on the shares before the strategy's drain-aware cut (every entry counted as
    throttled, so no cut applies): a cut daemon's share is held back for the tokens it saved,
    not spare, and a budget grown into it would differ between daemons that see that daemon
    cut and those that do not (it itself, seeing its newer report) and sum past the quota.
    The cut then only lowers shares, so the result still fits."""
    # Only members with demand are translated one by one; the others all get the same base
    # share in both dimensions (max_min_fair.active_shares), counted once times their number.
    uncut = {d: DimensionInput(e.demand, 0.0, e.limit, e.granule) for d, e in inputs.items() if e.demand > 0}
    n = len(set(ids) | set(inputs))

    def fits(budget: float) -> tuple[bool, float]:
        base, shares = max_min_fair.active_shares(budget, uncut, n, params)
        msgs, nbytes = _translate(shares, usage, kind, msgs_quota, bytes_quota)
        idle = n - len(shares)
        used = max((sum(msgs.values()) + idle * base * msgs_quota) / msgs_quota,
                   (sum(nbytes.values()) + idle * base * bytes_quota) / bytes_quota)
        return used <= 1.0 + 1e-12, used

    hi = min(JOINT_MAX_BUDGET, sum(e.demand for e in inputs.values()))
    if hi <= 1.0:
        return 1.0  # demand fits the quota: nothing to gain
    _, used_lo = fits(1.0)
    if used_lo >= 1.0 - JOINT_CLOSE_ENOUGH:
        return 1.0  # one quota is already used up
    ok, used_hi = fits(hi)
    if ok:
        return hi  # the demand itself fits (often)
    # The largest budget that fits: regula falsi (Illinois) on used(budget) - 1, which is
    # piecewise linear and increasing, so a few evaluations land on it; only budgets that
    # were checked to fit are ever returned.
    lo, g_lo, g_hi, side = 1.0, used_lo - 1.0, used_hi - 1.0, 0
    for _ in range(JOINT_SEARCH_STEPS):
        budget = (lo * g_hi - hi * g_lo) / (g_hi - g_lo)
        if not lo < budget < hi:
            budget = (lo + hi) / 2.0
        ok, used = fits(budget)
        if ok:
            lo, g_lo = budget, used - 1.0
            if g_lo >= -JOINT_CLOSE_ENOUGH:
                break
            if side < 0:
                g_hi /= 2.0
            side = -1
        else:
            hi, g_hi = budget, used - 1.0
            if side > 0:
                g_lo /= 2.0
            side = 1
    return lo


def _shares(
    group: ResourceGroup, usage: Mapping[str, PeerUsage], ids: Collection[str], strategy: str,
    params: QuotaParams,
) -> Shares:
    """Per kind, the strategy's split of each dimension; None for an unlimited dimension
    (no work: every daemon is unlimited there). `rgd` splits a kind whose messages and
    bytes are both limited jointly (`_joint`); the baselines split each on its own, as
    the systems they reproduce do."""
    allocate = strategy_named(strategy)
    out: Shares = {}
    for kind in KINDS:
        msgs_quota, bytes_quota = group.rates(kind)
        if strategy in JOINT_STRATEGIES and msgs_quota > 0 and bytes_quota > 0:
            out[kind] = _joint(usage, kind, ids, float(msgs_quota), float(bytes_quota), params)
            continue
        pair: list[dict[str, float] | None] = []
        for dim, rate in zip(("messages", "bytes"), group.rates(kind)):
            if rate < 0:
                pair.append(None)
            else:
                pair.append(allocate(float(rate), dimension_inputs(usage, kind, dim, params), ids, params))
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



def as_peers_see_me(
    usage: Mapping[str, PeerUsage], self_id: str, previous: PeerUsage | _Unset | None = UNSET
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
        view[self_id] = replace(min_usage(latest, previous), reports=latest.reports)
    return view


def compute_limits(
    group: ResourceGroup,
    usage: Mapping[str, PeerUsage],
    self_id: str,
    members: Collection[str],
    strategy: str = DEFAULT_STRATEGY,
    params: QuotaParams | None = None,
    *,
    previous: PeerUsage | _Unset | None = UNSET,
    held: Sequence[PeerUsage] = (),
    settled: bool = True,
) -> GroupLimits:
    """This daemon's limits for `group`: {kind -> (messages/s, bytes/s)}, inf = unlimited.

    usage: {daemon -> PeerUsage} for this group, our own newest entry included.
    members: live daemons we know (ourselves included; idle ones too).
    previous: the smallest of our own entries a peer may hold now (rgd.cluster.own_reports.OwnReports.as_held);
      None if a peer may hold nothing of ours for this group. Pass it: without it an
      increase of our own demand is granted before peers made room, which can
      overshoot the quota until they fold it (see module doc).
    held: each state of ours a peer may hold now (OwnReports.held_states), for kinds split
      jointly (their budgets are not monotone in message sizes).
    settled: False while we have not heard the topic for a full tick (we may not know
      every member yet): we take only the floor.
    """
    params = params or DEFAULT_PARAMS
    view = as_peers_see_me(usage, self_id, previous) if strategy in PEER_VIEW_STRATEGIES else usage
    ids = set(members) | set(view) | {self_id}  # strategies sort what they iterate
    if not settled and strategy in PEER_VIEW_STRATEGIES:
        # We have not heard the topic for a tick: members we do not know yet may hold
        # the whole quota between them, so we take no more than the floor peers reserve.
        n = len(ids)
        return {k: tuple(INF if r < 0 else max_min_fair.floor_share(float(r), n, params)  # type: ignore[misc]
                         for r in group.rates(k)) for k in KINDS}
    limits = _limits_of(_shares(group, view, ids, strategy, params), self_id)
    if strategy in JOINT_STRATEGIES and isinstance(previous, PeerUsage) and self_id in view:
        ours = view[self_id]
        # A jointly split kind's budget depends on every member's message size, so it is not
        # monotone: a peer holding figures of ours with larger messages grants itself more
        # messages than in our view, and one holding smaller messages more bytes. So we take
        # no more than our share in the map with any state of ours a peer may hold (`held`,
        # and `previous`), kind by kind: each of us then takes at most its share of a map
        # every peer that holds that state agrees on.
        seen: list[PeerUsage] = []
        for state in (previous, *held):
            if state not in seen:
                seen.append(state)
        kinds = [k for k in KINDS if all(r > 0 for r in group.rates(k))]
        for state in seen:
            joint = [k for k in kinds if ours.kind(k) != state.kind(k)]
            if not joint:
                continue
            as_held = dict(usage)
            as_held[self_id] = state
            theirs = _limits_of(_shares(group, as_held, ids, strategy, params), self_id)
            for k in joint:
                limits[k] = (min(limits[k][0], theirs[k][0]), min(limits[k][1], theirs[k][1]))
    return limits


class CalculatorCall(NamedTuple):
    """One call of the quota calculator (`compute_limits`' arguments), copied out of a
    node's state: nothing in it changes afterwards, so it can be evaluated anywhere. (A
    named tuple: a recompute builds one per group, a third the cost of a frozen dataclass.)"""

    group: ResourceGroup
    usage: Mapping[str, PeerUsage]
    self_id: str
    members: frozenset[str]
    strategy: str = DEFAULT_STRATEGY
    params: QuotaParams = DEFAULT_PARAMS
    previous: PeerUsage | _Unset | None = UNSET
    settled: bool = True
    held: tuple[PeerUsage, ...] = ()  # see compute_limits


def in_batch(call: CalculatorCall) -> bool:
    """Strategy `rgd`, settled, `previous` given, and no kind whose messages and bytes are
    both limited (those are split jointly, in `compute_limits`)."""
    if call.strategy != DEFAULT_STRATEGY or not call.settled or isinstance(call.previous, _Unset):
        return False
    return not splits_jointly(call.group)


def splits_jointly(group: ResourceGroup) -> bool:
    """Whether some kind of the group limits both messages and bytes (strategy `rgd` splits
    it jointly, in dominant shares, and that split is not monotone in message sizes)."""
    # The fields read directly: a recompute asks this of every group it computes.
    return ((group.publish_msgs > 0 and group.publish_bytes > 0)
            or (group.dispatch_msgs > 0 and group.dispatch_bytes > 0)
            or (group.replication_msgs > 0 and group.replication_bytes > 0))


def _entries(call: CalculatorCall, ids: list[str], kind: str) -> list[tuple[float, float, float, float, bool]]:
    """The members of `call`'s map in one kind, in id order, as `dimension_inputs` would
    record them: (demand, admitted) in messages, then in bytes, and whether it is us. Peers'
    entries as held, ours as peers see it (`as_peers_see_me`: the smaller of our newest entry
    and `previous`), each figure by the same operations in the same order, so the floats are
    the same. Members with no entry of ours peers hold are left out (a member without demand)."""
    usage, me, seen = call.usage, call.self_id, call.previous
    out = []
    for d in ids:
        if d != me:
            k: KindRates = getattr(usage[d], kind)
            am, ab = k.admitted_messages, k.admitted_bytes
            out.append((am + k.throttled_messages, am, ab + k.throttled_bytes, ab, False))
        elif isinstance(seen, PeerUsage):
            ours: KindRates = getattr(usage[d], kind)
            held: KindRates = getattr(seen, kind)
            am = min(ours.admitted_messages, held.admitted_messages)
            ab = min(ours.admitted_bytes, held.admitted_bytes)
            out.append((am + (min(ours.demand_messages, held.demand_messages) - am), am,
                        ab + (min(ours.demand_bytes, held.demand_bytes) - ab), ab, True))
    return out


def calculate_many(calls: Sequence[CalculatorCall]) -> list[GroupLimits]:
    """`compute_limits` of every call, the same floats; what the daemon and the simulator
    call (through rgd.cluster.node.evaluate_all).

    The common case (`in_batch`: at PIP-82's scale, nearly every call) goes to
    `max_min_fair_batch`, all calls at once; it needs only the members with demand and
    the number of members, not a record for every daemon. The rest go to
    `compute_limits` one by one. tests/system/test_quota_batch.py compares the two on
    generated maps."""
    # Imported here: numpy (+10 MB) stays out of `rgd run --cluster-process`'s serving
    # process, which imports this module for start_seconds_for and never calculates.
    from rgd.quota import max_min_fair_batch

    out: list[GroupLimits | None] = [None] * len(calls)
    by_params: dict[QuotaParams, list[int]] = {}
    for i, call in enumerate(calls):
        if in_batch(call):
            by_params.setdefault(call.params, []).append(i)
        else:
            out[i] = compute_limits(call.group, call.usage, call.self_id, call.members, call.strategy,
                                    call.params, previous=call.previous, held=call.held, settled=call.settled)
    for params, indices in by_params.items():
        problems = max_min_fair_batch.Segments()
        where: list[tuple[int, str, int, int]] = []  # call, kind, segment of messages, of bytes (-1: unlimited)
        granule = 1.0 / params.counting_window
        for i in indices:
            call = calls[i]
            members, usage, me = call.members, call.usage, call.self_id
            # compute_limits' ids are members, the map's daemons and ourselves: count them
            # without building the set.
            n = len(members) + sum(1 for d in usage if d not in members)
            if me not in members and me not in usage:
                n += 1
            ids = sorted(usage)
            for kind in KINDS:
                rate_m, rate_b = call.group.rates(kind)
                if rate_m < 0 and rate_b < 0:
                    where.append((i, kind, -1, -1))
                    continue
                entries = _entries(call, ids, kind)
                m = -1 if rate_m < 0 else problems.add_segment(
                    float(rate_m), n, [(e[0], e[1], granule, e[4]) for e in entries if e[0] > 0])
                b = -1 if rate_b < 0 else problems.add_segment(
                    float(rate_b), n, [(e[2], e[3], 0.0, e[4]) for e in entries if e[2] > 0])
                where.append((i, kind, m, b))
        shares = max_min_fair_batch.own_shares(problems, params).tolist()
        for i, kind, m, b in where:
            limits = out[i]
            if limits is None:
                limits = out[i] = {}
            limits[kind] = (INF if m < 0 else shares[m], INF if b < 0 else shares[b])
    return out  # type: ignore[return-value]


def calculate(
    group: ResourceGroup,
    usage: Mapping[str, PeerUsage],
    self_id: str,
    members: Collection[str],
    strategy: str = DEFAULT_STRATEGY,
    params: QuotaParams | None = None,
    *,
    previous: PeerUsage | _Unset | None = UNSET,
    settled: bool = True,
) -> GroupLimits:
    """`calculate_many` of one call: `compute_limits`' limits, the same floats."""
    call = CalculatorCall(group, usage, self_id, frozenset(members), strategy, params or DEFAULT_PARAMS,
                          previous, settled)
    return calculate_many([call])[0]


NEW_BUCKET_SECONDS = 0.05  # see start_seconds_for


def start_seconds_for(strategy: str) -> float | None:
    """How much of its limit a new bucket starts with, per strategy. `rgd` splits a group
    nobody has reported equally, so with full buckets every daemon could spend a second of
    its share on top of it and the cluster admit up to twice the quota in the group's first
    second; 0.05 s bounds that to 5 %. The baselines start full, as the systems they
    reproduce do."""
    return NEW_BUCKET_SECONDS if strategy in PEER_VIEW_STRATEGIES else None


__all__ = [
    "DEFAULT_PARAMS",
    "DEFAULT_STRATEGY",
    "JOINT_STRATEGIES",
    "NEW_BUCKET_SECONDS",
    "PEER_VIEW_STRATEGIES",
    "STRATEGIES",
    "UNSET",
    "CalculatorCall",
    "DimensionInput",
    "QuotaParams",
    "allocate_group",
    "as_peers_see_me",
    "calculate",
    "calculate_many",
    "compute_limits",
    "dimension_inputs",
    "dominant_inputs",
    "in_batch",
    "splits_jointly",
    "start_seconds_for",
    "strategy_named",
]
