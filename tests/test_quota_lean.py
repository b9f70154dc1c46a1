"""The calculator's lean path (`compute_limits_lean`) against the reference
(`compute_limits`): the same limits, float for float, on generated maps, and the lean path
applies to the daemon's common case (else the comparison would prove nothing)."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, assume, given, settings, strategies as st

from rgd.groups import ResourceGroup
from rgd.quota.calculator import UNSET, calculate, compute_limits, compute_limits_lean
from rgd.quota.inputs import QuotaParams
from rgd.quota.model import IDLE, KindRates, PeerUsage

ids = st.sampled_from([f"d{i}" for i in range(8)])
# Figures as reports make them (counts over a tick, some small, some not round) and as the
# calculator's own arithmetic may meet them: zeros, tiny and huge values, repeats.
# Counts over a tick of 0.7 s or 0.3 s make rates whose sums round (a + (b - a) != b).
rate = st.one_of(st.just(0.0), st.just(1.0), st.integers(0, 10_000).map(lambda n: n / 0.7),
                 st.integers(0, 10_000).map(lambda n: n / 0.3),
                 st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False))
limit = st.one_of(st.just(math.inf), rate)


@st.composite
def kind_rates(draw) -> KindRates:
    if draw(st.booleans()) and draw(st.booleans()):
        return IDLE
    return KindRates(draw(rate), draw(rate), draw(rate), draw(rate), draw(limit), draw(limit))


@st.composite
def peer_usage(draw) -> PeerUsage:
    return PeerUsage(draw(kind_rates()), draw(kind_rates()), draw(st.integers(1, 50)), draw(kind_rates()))


quota = st.one_of(st.just(-1.0), st.just(0.0), st.floats(min_value=0.001, max_value=1e9, allow_nan=False))


@st.composite
def groups(draw) -> ResourceGroup:
    """Mostly groups without a jointly limited kind (the lean path's case), some with."""
    fields = {}
    for kind in ("publish", "dispatch", "replication"):
        msgs, nbytes = draw(quota), draw(quota)
        if draw(st.integers(0, 9)) and msgs > 0 and nbytes > 0:
            nbytes = -1.0
        fields[f"{kind}_msgs"], fields[f"{kind}_bytes"] = msgs, nbytes
    return ResourceGroup("g", **fields)


params = st.builds(
    QuotaParams,
    newcomer_fraction=st.floats(0, 1), idle_reserve_fraction=st.floats(0, 1), headroom_fraction=st.floats(0, 1),
    burst_seconds=st.floats(0, 10), cut_margin=st.floats(0, 1),
    counting_window=st.floats(min_value=0.01, max_value=10),
)


def same(a: dict, b: dict) -> bool:
    """Equal floats, kind by kind (repr: 0.0 and -0.0 told apart, inf equal)."""
    return a.keys() == b.keys() and all(repr(a[k]) == repr(b[k]) for k in a)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(), usage=st.dictionaries(ids, peer_usage(), max_size=6), members=st.sets(ids, max_size=8),
       me=ids, previous=st.one_of(st.none(), peer_usage()), latest=st.one_of(st.none(), peer_usage()),
       p=params)
def test_the_lean_path_gives_the_reference_limits(group, usage, members, me, previous, latest, p) -> None:
    if latest is not None:
        usage = {**usage, me: latest}  # our own newest entry, beside what peers hold of us
    lean = compute_limits_lean(group, usage, me, members, "rgd", p, previous=previous, settled=True)
    ref = compute_limits(group, usage, me, members, "rgd", p, previous=previous, settled=True)
    joint = any(m > 0 and b > 0 for m, b in (group.rates(k) for k in ("publish", "dispatch", "replication")))
    assert (lean is None) == joint
    if lean is not None:
        assert same(lean, ref), (lean, ref)
    assert same(calculate(group, usage, me, members, "rgd", p, previous=previous, settled=True), ref)


@settings(max_examples=200, deadline=None)
@given(usage=st.dictionaries(ids, peer_usage(), min_size=1, max_size=6), members=st.sets(ids, max_size=8),
       me=ids, previous=st.one_of(st.none(), peer_usage()))
def test_outside_its_case_the_reference_decides(usage, members, me, previous) -> None:
    group = ResourceGroup("g", publish_msgs=100.0, publish_bytes=1e6)  # joint
    for kw in ({"previous": previous, "settled": False}, {"previous": UNSET, "settled": True}):
        ref = compute_limits(group, usage, me, members, "rgd", **kw)
        assert compute_limits_lean(ResourceGroup("h", publish_msgs=100.0), usage, me, members, "rgd", **kw) is None
        assert same(calculate(group, usage, me, members, "rgd", **kw), ref)
    for strategy in ("pulsar", "doorman-fair", "static"):
        assert compute_limits_lean(ResourceGroup("h", publish_msgs=100.0), usage, me, members, strategy,
                                   previous=previous) is None
        assert same(calculate(group, usage, me, members, strategy, previous=previous),
                    compute_limits(group, usage, me, members, strategy, previous=previous))


def test_our_entry_as_peers_see_it_is_rounded_as_the_reference_rounds_it() -> None:
    """min_kind's throttled = min(demands) - admitted, and demand = admitted + throttled:
    not always min(demands) in floats, and here it shows in our share; a lean path that took
    the shortcut would hand out other floats than the reference."""
    latest = PeerUsage(KindRates(1075.7142857142858, 0.0, 9173.333333333334, 0.0, math.inf, math.inf), reports=2)
    seen = PeerUsage(KindRates(5445.714285714286, 0.0, 1356.6666666666667, 0.0, math.inf, math.inf))
    adm = latest.publish.admitted_messages
    assert adm + (seen.publish.demand_messages - adm) != seen.publish.demand_messages
    group = ResourceGroup("g", publish_msgs=1e5)
    usage = {"me": latest, "a": PeerUsage(KindRates(2825.714285714286, 0.0, 0.0, 0.0, 50.0, math.inf))}
    lean = compute_limits_lean(group, usage, "me", {"a", "me"}, previous=seen)
    ref = compute_limits(group, usage, "me", {"a", "me"}, previous=seen)
    assert lean is not None and same(lean, ref)
    assert ref["publish"][0] == 8503.976190476193  # the reference's float, written down


def test_the_daemons_common_case_takes_the_lean_path() -> None:
    group = ResourceGroup("g", publish_msgs=10_000.0)
    peer = PeerUsage(KindRates(900.0, 9e5, 100.0, 1e5, 900.0, math.inf))
    mine = PeerUsage(KindRates(450.0, 4.5e5, 0.0, 0.0, 1200.0, math.inf), reports=3)
    seen = PeerUsage(KindRates(400.0, 4e5, 10.0, 1e4, 1100.0, math.inf))
    usage = {"a": peer, "b": peer, "me": mine}
    lean = compute_limits_lean(group, usage, "me", {"a", "b", "me", "c"}, previous=seen)
    assert lean is not None
    assert same(lean, compute_limits(group, usage, "me", {"a", "b", "me", "c"}, previous=seen))
    assert lean["dispatch"] == (math.inf, math.inf) and 0 < lean["publish"][0] < 10_000.0
