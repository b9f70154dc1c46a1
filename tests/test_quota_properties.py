"""Property tests: no view hands out more than the quota, and rgd's shares are monotone."""

from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from rgd.groups import ResourceGroup
from rgd.quota.calculator import allocate_group, compute_limits
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


def _check_sums(group: ResourceGroup, shares: dict) -> None:
    for kind in ("publish", "dispatch"):
        for dim, q in enumerate(group.rates(kind)):
            values = [limits[kind][dim] for limits in shares.values()]
            assert all(v >= 0 for v in values)
            if q >= 0:
                assert sum(values) <= q * (1 + EPS) + EPS, (kind, dim, q, values)
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
