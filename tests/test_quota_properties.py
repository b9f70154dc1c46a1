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


# -- any delivery delay: our own increase waits for the report to be out that long ----------

from rgd.own_history import OwnHistory  # noqa: E402

NOW = 10.0


@settings(max_examples=300, deadline=None)
@given(groups, st.lists(ids, min_size=1, max_size=6, unique=True), st.data())
def test_shares_in_force_stay_under_the_quota_for_any_delivery_delay(group, everyone, data) -> None:
    # Every daemon published a few entries at random times. A report takes at most D to
    # arrive (in order, none lost), so a peer holds, of each daemon, the newest entry
    # published at least its own delay d <= D ago: anything from the newest entry older than
    # D to the newest one. Each daemon counts its own demand as OwnHistory says, with a fold
    # window W >= D, and the shares they all compute at that moment sum to at most the quota.
    delay = data.draw(st.floats(0.0, 3.0), label="D")
    window = delay + data.draw(st.floats(0.0, 0.5), label="W - D")
    histories: dict[str, list[tuple[float, PeerUsage]]] = {}
    for m in everyone:
        times = sorted(data.draw(st.lists(st.floats(0.0, NOW), max_size=4), label=f"times {m}"))
        histories[m] = [(t, data.draw(peer_usage(), label=f"entry {m}@{t}")) for t in times]

    def held(m: str, by: str) -> PeerUsage | None:
        d = data.draw(st.floats(0.0, delay), label=f"delay {m}->{by}")
        out = [u for t, u in histories[m] if t <= NOW - d]
        return out[-1] if out else None

    shares = {}
    for p in everyone:
        usage = {m: u for m in everyone if m != p and (u := held(m, p)) is not None}
        own = OwnHistory()
        for t, u in histories[p]:
            own.add(group.name, t, u)
        if histories[p]:
            usage[p] = histories[p][-1][1]
        previous = own.as_seen(group.name, NOW, window)
        shares[p] = compute_limits(group, usage, p, everyone, previous=previous)
    _check_sums(group, shares)
