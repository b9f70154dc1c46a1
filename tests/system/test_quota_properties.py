"""Property tests: no view hands out more than the quota, and rgd's shares are monotone."""

from __future__ import annotations

import math

from hypothesis import assume, given, settings, target
from hypothesis import strategies as st

from rgd.config.groups import ResourceGroup
from rgd.quota.calculator import JOINT_MAX_BUDGET, allocate_group, compute_limits
from rgd.quota.inputs import DimensionInput, QuotaParams
from rgd.quota.max_min_fair import allocate as rgd_allocate
from rgd.quota.model import KindRates, PeerUsage

EPS = 1e-9
# Every strategy but `pulsar`, which by design gives the full quota to everyone when nobody
# reported usage (reproduced on purpose, see rgd/quota/pulsar.py).
BOUNDED = ("rgd", "doorman-proportional", "doorman-fair", "static")

ids = st.sampled_from([f"d{i}" for i in range(12)])
rate = st.one_of(st.just(0.0), st.floats(min_value=0, max_value=1e7, allow_nan=False, allow_infinity=False))
limit = st.one_of(st.just(math.inf), rate)


@st.composite
def kind_rates(draw) -> KindRates:
    return KindRates(draw(rate), draw(rate), draw(rate), draw(rate), draw(limit), draw(limit))


@st.composite
def peer_usage(draw) -> PeerUsage:
    return PeerUsage(draw(kind_rates()), draw(kind_rates()), draw(st.integers(0, 50)))


quota = st.one_of(st.just(-1.0), st.just(0.0), st.floats(min_value=0.001, max_value=1e9, allow_nan=False))
groups = st.builds(lambda a, b, c, d: ResourceGroup("g", a, b, c, d), quota, quota, quota, quota)
usage_maps = st.dictionaries(ids, peer_usage(), max_size=8)
member_sets = st.sets(ids, min_size=0, max_size=10)


def _check_sums(group: ResourceGroup, shares: dict, joint_slack: float = 1.0) -> None:
    for kind in ("publish", "dispatch"):
        joint = all(r > 0 for r in group.rates(kind))
        for dim, q in enumerate(group.rates(kind)):
            values = [limits[kind][dim] for limits in shares.values()]
            assert all(v >= 0 for v in values)
            if q >= 0:
                bound = q * (joint_slack if joint else 1.0)
                assert sum(values) <= bound * (1 + EPS) + EPS, (kind, dim, q, values)
            else:
                assert all(math.isinf(v) for v in values)


@settings(max_examples=300, deadline=None)
@given(groups, usage_maps, member_sets, st.sampled_from(BOUNDED))
def test_one_map_never_allocates_more_than_the_quota(group, usage, members, strategy) -> None:
    _check_sums(group, allocate_group(group, usage, members, strategy))


@settings(max_examples=200, deadline=None)
@given(groups, usage_maps, member_sets)
def test_every_daemon_computing_for_itself_stays_under_the_quota(group, usage, members) -> None:
    # Each member computes its own share from the same map (with its entry as peers see it).
    everyone = set(members) | set(usage)
    shares = {m: compute_limits(group, usage, m, everyone, previous=usage.get(m)) for m in everyone}
    _check_sums(group, shares)


@settings(max_examples=200, deadline=None)
@given(groups, usage_maps, member_sets, st.data())
def test_own_view_with_fresher_demand_stays_under_the_quota(group, usage, members, data) -> None:
    # Each daemon sees a newer report of its own than its peers do; with `previous` (the one
    # they hold) the shares in force still sum to at most the quota.
    everyone = sorted(set(members) | set(usage))
    fresh = {m: data.draw(peer_usage()) for m in everyone}
    shares = {}
    for m in everyone:
        view = dict(usage)
        view[m] = fresh[m]
        shares[m] = compute_limits(group, view, m, everyone, previous=usage.get(m))
    _check_sums(group, shares)


dims = st.dictionaries(
    ids,
    st.builds(lambda d, a, lim: DimensionInput(d, min(a, d), lim), rate, rate, limit),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1, max_value=1e9), dims, member_sets, ids, rate)
def test_rgd_share_never_grows_when_another_demand_grows(q, entries, members, other, extra) -> None:
    # The safety argument of calculator.py rests on this monotonicity.
    params = QuotaParams()
    everyone = set(members) | set(entries) | {other}
    before = rgd_allocate(q, entries, everyone, params)
    old = entries.get(other, DimensionInput(0.0, 0.0, math.inf))
    grown = dict(entries)
    grown[other] = DimensionInput(old.demand + extra, old.admitted + extra, old.limit)
    after = rgd_allocate(q, grown, everyone, params)
    for d in everyone - {other}:
        assert after[d] <= before[d] * (1 + 1e-9) + 1e-9


# -- any delivery delay: we count our own demand as the smallest state a peer may hold ------

from rgd.cluster.own_reports import OwnReports  # noqa: E402

# What the shares in force of a jointly split kind may sum to across views, for any figures
# at all: the budget cap's bound (calculator.JOINT_MAX_BUDGET), written as a literal so that a
# larger cap fails here until someone looks. Reached only by sizes no broker sends (below).
JOINT_WORST_CASE = 1.5
# ... and for message sizes a broker can send (1 B to Pulsar's 5 MiB maxMessageSize): the
# overshoot the quota-quality issue tolerates (10 %).
JOINT_OVERSHOOT = 1.10
MAX_MESSAGE_BYTES = 5 * 1024 * 1024


def _views_in_force(group: ResourceGroup, everyone: list[str], data, entry) -> dict:
    """Every daemon published a few reports (sequences 1..k). Reports arrive in order after
    any delay, so a peer holds, of each daemon, any prefix of its reports: the state as of
    some sequence h (0: nothing yet). It acknowledged a sequence at or before h (its
    acknowledgement is on its way back, or it has not sent one since). Each daemon counts its
    own demand as OwnReports says from the oldest acknowledgement of it (docs/design/protocol.md,
    P2): the shares they all compute at that moment."""
    histories: dict[str, list[PeerUsage]] = {
        m: data.draw(st.lists(entry, max_size=4), label=f"reports of {m}") for m in everyone}
    held = {(m, p): data.draw(st.integers(0, len(histories[m])), label=f"{p} holds {m} as of")
            for m in everyone for p in everyone if m != p}
    acked = {(m, p): data.draw(st.integers(0, h), label=f"{p} acknowledged {m}") for (m, p), h in held.items()}

    shares = {}
    for p in everyone:
        usage = {m: histories[m][h - 1] for m in everyone if m != p and (h := held[(m, p)]) > 0}
        own = OwnReports()
        for i, u in enumerate(histories[p]):
            own.record(own.next_sequence(), float(i), 3.0, {group.name: u})
        if histories[p]:
            usage[p] = histories[p][-1]
        oldest = min((a for (m, _), a in acked.items() if m == p), default=len(histories[p]))
        previous = own.as_held(group.name, oldest)
        shares[p] = compute_limits(group, usage, p, everyone, previous=previous)
    return shares


@settings(max_examples=300, deadline=None)
@given(groups, st.lists(ids, min_size=1, max_size=6, unique=True), st.data())
def test_shares_in_force_stay_under_the_quota_whatever_state_each_peer_holds(group, everyone, data) -> None:
    # The shares in force (_views_in_force) sum to at most the quota: exactly for a kind with
    # one limited dimension; for a kind split jointly, at most JOINT_WORST_CASE times it
    # (calculator._joint: views that hold different entries of a daemon see different message
    # sizes and fill the budget differently; steered by hypothesis.target, these figures
    # reached 1.1000 at a cap of 1.1 with messages of 1e-295 and 1e70 bytes).
    shares = _views_in_force(group, everyone, data, peer_usage())
    _check_sums(group, shares, joint_slack=JOINT_WORST_CASE)


@st.composite
def physical_usage(draw, size: float) -> PeerUsage:
    """A report of one daemon sending messages of `size` bytes on publish (coupled groups)."""
    demand = draw(st.one_of(st.just(0.0), st.floats(0.001, 1e6)), label="demand msg/s")
    admitted = demand * draw(st.floats(0.0, 1.0), label="admitted fraction")
    limit = draw(st.one_of(st.just(math.inf), st.floats(0.0, 1e6)), label="limit msg/s")
    return PeerUsage(KindRates(admitted, admitted * size, demand - admitted, (demand - admitted) * size, limit,
                               limit * size), KindRates(), draw(st.integers(0, 50), label="reports"))


@settings(max_examples=300, deadline=None)
@given(st.floats(1.0, 1e9), st.floats(1.0, 1e9), st.lists(ids, min_size=2, max_size=6, unique=True), st.data())
def test_joint_shares_in_force_with_sizes_brokers_send_stay_within_the_tolerated_overshoot(
        msgs_quota, bytes_quota, everyone, data) -> None:
    # As above, for a kind whose messages and bytes are both limited, every entry's messages of
    # 1 B to 5 MiB, each entry its own size (a daemon's size changes arbitrarily between its
    # reports): the shares in force stay within 10 % of each quota. hypothesis.target steers
    # the search to the largest excess: 0.48 % (cap 1.5) and 0.47 % (cap 2) were the largest
    # found in 4 000 examples each.
    group = ResourceGroup("g", msgs_quota, bytes_quota, -1, -1)
    size = st.floats(1.0, float(MAX_MESSAGE_BYTES))
    shares = _views_in_force(group, everyone, data, size.flatmap(physical_usage))
    for dim, q in enumerate(group.rates("publish")):
        total = sum(limits["publish"][dim] for limits in shares.values())
        target(total / q, label=f"sum / quota, dimension {dim}")
        assert total <= q * JOINT_OVERSHOOT * (1 + EPS), (dim, q, total)


# -- coupled limits: the joint allocation fills both quotas (judged by an LP, tests/lexmaxmin_lp.py) --

from tests.support.lexmaxmin_lp import lexicographic_max_min  # noqa: E402


def _steady_usage(demands: list[float], sizes: list[float], shares: list[float]) -> dict[str, PeerUsage]:
    """Every daemon throttled down to its share (or served its demand) with that share as its limit."""
    out = {}
    for i, (d, s, x) in enumerate(zip(demands, sizes, shares)):
        admitted = min(d, x)
        out[f"d{i}"] = PeerUsage(KindRates(admitted, admitted * s, d - admitted, (d - admitted) * s, x, x * s))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0.05, 1.0), st.floats(100.0, 20_000.0)), min_size=2, max_size=8),
       st.floats(100.0, 5000.0), st.floats(2e5, 2e7))
def test_joint_allocation_in_steady_state_is_the_lexicographic_max_min_of_dominant_shares(daemons, msgs_quota,
                                                                                          bytes_quota) -> None:
    # Messages and bytes both limited, daemons of different message sizes (some bound by
    # messages, some by bytes). In the steady state of the fair allocation (computed by an LP
    # that shares nothing with the allocator), the allocator hands out that allocation again,
    # within 1 % of a quota in dominant shares (its budget search stops within 0.1 %). Each
    # demand is at least 5 % of a quota in dominant shares: below the floor every member is
    # guaranteed (2 % of the budget at most), rgd gives the floor, not the demand.
    sizes = [s for _, s in daemons]
    demands = [f / max(1.0 / msgs_quota, s / bytes_quota) for (f, s) in daemons]
    fair = lexicographic_max_min(demands, sizes, msgs_quota, bytes_quota)
    weights = [max(1.0 / msgs_quota, s / bytes_quota) for s in sizes]
    # The allocator's budget of dominant shares stops at JOINT_MAX_BUDGET (its bound across
    # views); the fair allocations that need more are left out here.
    assume(sum(w * x for w, x in zip(weights, fair)) <= JOINT_MAX_BUDGET - 1e-3)
    group = ResourceGroup("g", msgs_quota, bytes_quota, -1, -1)
    usage = _steady_usage(demands, sizes, fair)
    got = allocate_group(group, usage, set(usage))
    _check_sums(group, got)
    for i, (d, s, x) in enumerate(zip(demands, sizes, fair)):
        weight = max(1.0 / msgs_quota, s / bytes_quota)  # dominant share of one message/s
        share = min(got[f"d{i}"]["publish"][0], d)  # headroom above demand is not a share of anything
        assert abs(share - x) * weight <= 0.01, (i, share, x, fair)
