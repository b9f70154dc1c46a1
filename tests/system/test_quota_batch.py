"""The calculator's batch (`calculate_many`, `max_min_fair_batch`) against the reference
(`compute_limits`, one call at a time, and `max_min_fair.water_fill`): the same limits,
float for float, on generated maps and batches, and the batch applies to the daemon's
common case (else the comparison would prove nothing)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rgd.config.groups import ResourceGroup
from rgd.quota import max_min_fair, max_min_fair_batch
from rgd.quota.calculator import UNSET, CalculatorCall, calculate, calculate_many, compute_limits, in_batch
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


def reference(call: CalculatorCall) -> dict:
    return compute_limits(call.group, call.usage, call.self_id, call.members, call.strategy, call.params,
                          previous=call.previous, settled=call.settled)


@st.composite
def calls(draw, p=None) -> CalculatorCall:
    me = draw(ids)
    usage = draw(st.dictionaries(ids, peer_usage(), max_size=6))
    latest = draw(st.one_of(st.none(), peer_usage()))
    if latest is not None:
        usage = {**usage, me: latest}  # our own newest entry, beside what peers hold of us
    return CalculatorCall(draw(groups()), usage, me, frozenset(draw(st.sets(ids, max_size=8))), "rgd",
                          p if p is not None else draw(params), draw(st.one_of(st.none(), peer_usage())), True)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call=calls())
def test_one_call_gives_the_reference_limits(call) -> None:
    joint = any(m > 0 and b > 0 for m, b in (call.group.rates(k) for k in ("publish", "dispatch", "replication")))
    assert in_batch(call) == (not joint)
    assert same(calculate_many([call])[0], reference(call))
    assert same(calculate(call.group, call.usage, call.self_id, call.members, "rgd", call.params,
                          previous=call.previous, settled=True), reference(call))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), p=params)
def test_a_batch_gives_each_call_its_reference_limits(data, p) -> None:
    """Many calls at once (segments of different lengths side by side, two sets of params,
    some calls outside the batch's case): each gets what it gets alone."""
    batch = data.draw(st.lists(st.one_of(calls(p), calls()), min_size=2, max_size=12))
    got = calculate_many(batch)
    assert len(got) == len(batch)
    for call, limits in zip(batch, got):
        assert same(limits, reference(call)), (call, limits, reference(call))


wants = st.one_of(st.just(0.0), st.just(-0.0), st.just(1.0), st.integers(0, 50).map(lambda n: n / 0.7),
                  st.floats(min_value=0, max_value=1e9, allow_nan=False))


@settings(max_examples=400, deadline=None)
@given(problems=st.lists(st.tuples(st.one_of(st.just(0.0), st.floats(min_value=0, max_value=1e9)),
                                   st.lists(wants, min_size=1, max_size=9)), min_size=1, max_size=8))
def test_water_fill_over_segments_is_the_scalar_water_fill(problems) -> None:
    """Ties, zeros, a pool of 0, segments of 1 to 9 wants side by side."""
    segment = np.repeat(np.arange(len(problems)), [len(w) for _, w in problems])
    layout = max_min_fair_batch._Layout(segment, len(problems))
    flat = np.array([w for _, ws in problems for w in ws])
    got = max_min_fair_batch.water_fill(np.array([pool for pool, _ in problems]), flat, layout).tolist()
    expected = [x for pool, ws in problems for x in max_min_fair.water_fill(pool, ws)]
    assert [repr(x) for x in got] == [repr(x) for x in expected]


def test_a_segment_counts_the_daemon_asking() -> None:
    import pytest

    with pytest.raises(ValueError, match="at least one member"):
        max_min_fair_batch.Segments().add_segment(100.0, 0, [])


@settings(max_examples=200, deadline=None)
@given(usage=st.dictionaries(ids, peer_usage(), min_size=1, max_size=6), members=st.sets(ids, max_size=8),
       me=ids, previous=st.one_of(st.none(), peer_usage()))
def test_outside_its_case_the_reference_decides(usage, members, me, previous) -> None:
    group = ResourceGroup("g", publish_msgs=100.0, publish_bytes=1e6)  # joint
    single = ResourceGroup("h", publish_msgs=100.0)
    for kw in ({"previous": previous, "settled": False}, {"previous": UNSET, "settled": True}):
        assert not in_batch(CalculatorCall(single, usage, me, frozenset(members), **kw))
        assert same(calculate(group, usage, me, members, "rgd", **kw), compute_limits(group, usage, me, members,
                                                                                      "rgd", **kw))
    for strategy in ("pulsar", "doorman-fair", "static"):
        assert not in_batch(CalculatorCall(single, usage, me, frozenset(members), strategy, previous=previous))
        assert same(calculate(group, usage, me, members, strategy, previous=previous),
                    compute_limits(group, usage, me, members, strategy, previous=previous))


def test_our_entry_as_peers_see_it_is_rounded_as_the_reference_rounds_it() -> None:
    """min_kind's throttled = min(demands) - admitted, and demand = admitted + throttled:
    not always min(demands) in floats, and here it shows in our share; a batch that took
    the shortcut would hand out other floats than the reference."""
    latest = PeerUsage(KindRates(1075.7142857142858, 0.0, 9173.333333333334, 0.0, math.inf, math.inf), reports=2)
    seen = PeerUsage(KindRates(5445.714285714286, 0.0, 1356.6666666666667, 0.0, math.inf, math.inf))
    adm = latest.publish.admitted_messages
    assert adm + (seen.publish.demand_messages - adm) != seen.publish.demand_messages
    group = ResourceGroup("g", publish_msgs=1e5)
    usage = {"me": latest, "a": PeerUsage(KindRates(2825.714285714286, 0.0, 0.0, 0.0, 50.0, math.inf))}
    call = CalculatorCall(group, usage, "me", frozenset({"a", "me"}), previous=seen)
    assert in_batch(call)
    got = calculate_many([call])[0]
    assert same(got, reference(call))
    assert got["publish"][0] == 8503.976190476193  # the reference's float, written down


def test_the_daemons_common_case_is_batched() -> None:
    group = ResourceGroup("g", publish_msgs=10_000.0)
    peer = PeerUsage(KindRates(900.0, 9e5, 100.0, 1e5, 900.0, math.inf))
    mine = PeerUsage(KindRates(450.0, 4.5e5, 0.0, 0.0, 1200.0, math.inf), reports=3)
    seen = PeerUsage(KindRates(400.0, 4e5, 10.0, 1e4, 1100.0, math.inf))
    call = CalculatorCall(group, {"a": peer, "b": peer, "me": mine}, "me", frozenset({"a", "b", "me", "c"}),
                          previous=seen)
    assert in_batch(call)
    got = calculate_many([call])[0]
    assert same(got, reference(call))
    assert got["dispatch"] == (math.inf, math.inf) and 0 < got["publish"][0] < 10_000.0
