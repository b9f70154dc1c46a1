"""The scalar strategies against the published examples they reproduce."""

from __future__ import annotations

import math

import pytest

from rgd.quota.doorman import allocate_fair, allocate_proportional, fair_share, proportional_share
from rgd.quota.inputs import DimensionInput, QuotaParams
from rgd.quota.max_min_fair import allocate as rgd_allocate
from rgd.quota.max_min_fair import floor_share, water_fill
from rgd.quota.pulsar import allocate as pulsar_allocate
from rgd.quota.pulsar import compute_local_quota, f32
from rgd.quota.static import allocate as static_allocate

P = QuotaParams()
INF = math.inf


def demand(**d: float) -> dict[str, DimensionInput]:
    """Demand of daemons that were throttled last tick (admitted half of it)."""
    return {k: DimensionInput(demand=v, admitted=v / 2, limit=INF) for k, v in d.items()}


def usage(**u: float) -> dict[str, DimensionInput]:
    return {k: DimensionInput(demand=v, admitted=v, limit=INF) for k, v in u.items()}


# -- Doorman (youtube/doorman docs: capacity 120, wants 1000/50/10) ---------------------------


def test_doorman_proportional_share_docs_example() -> None:
    wants = {"a": 1000.0, "b": 50.0, "c": 10.0}
    got = {c: proportional_share(120, c, wants) for c in wants}
    assert got["a"] == pytest.approx(69.69, abs=0.01)
    assert got["b"] == pytest.approx(40.31, abs=0.01)
    assert got["c"] == 10
    assert allocate_proportional(120, demand(a=1000, b=50, c=10), [], P) == pytest.approx(got)


def test_doorman_fair_share_docs_example() -> None:
    wants = {"a": 1000.0, "b": 50.0, "c": 10.0}
    assert {c: fair_share(120, c, wants) for c in wants} == {"a": 60, "b": 50, "c": 10}
    assert allocate_fair(120, demand(a=1000, b=50, c=10), [], P) == pytest.approx({"a": 60, "b": 50, "c": 10})


def test_doorman_everyone_gets_wants_under_capacity() -> None:
    assert allocate_proportional(120, demand(a=30, b=20), ["c"], P) == {"a": 30, "b": 20, "c": 0.0}


def test_doorman_lease_cap_never_overleases() -> None:
    # Stale leases (reported limits) of 100 each leave little room: grants are capped.
    entries = {k: DimensionInput(demand=1000, admitted=100, limit=100) for k in "abc"}
    got = allocate_proportional(120, entries, [], P)
    assert sum(got.values()) <= 120 + 1e-9
    assert got["a"] == 0.0  # 120 - 100 - 100 leased to the others: nothing free for "a" yet


# -- Pulsar (ResourceQuotaCalculatorImpl) and PIP-82's worked example -------------------------


def test_pip82_worked_example_quota_100_usage_10_50_30() -> None:
    # PIP-82: "split the remaining 10 units proportionally ... 11.11, 55.56, 33.33"; Pulsar's
    # implementation truncates to a long.
    assert [compute_local_quota(100, m, 90) for m in (10, 50, 30)] == [11, 55, 33]
    assert pulsar_allocate(100, usage(a=10, b=50, c=30), [], P) == {"a": 11.0, "b": 55.0, "c": 33.0}


def test_rgd_on_pip82_example_gives_everyone_its_usage_and_shares_the_rest() -> None:
    got = rgd_allocate(100, demand(a=10, b=50, c=30), [], P)
    assert sum(got.values()) == pytest.approx(100)
    for k, d in (("a", 10), ("b", 50), ("c", 30)):
        assert got[k] >= d
        assert got[k] <= d * (1 + P.headroom_fraction) + floor_share(100, 3, P) + 1e-9


def test_pulsar_freezes_at_727_272_on_skew() -> None:
    # Quota 1000, demand 800/300; each period a daemon admits min(demand, its quota).
    limits = {"a": 1000.0, "b": 1000.0}
    wants = {"a": 800.0, "b": 300.0}
    for _ in range(10):
        admitted = {k: min(wants[k], limits[k]) for k in wants}
        limits = pulsar_allocate(1000, usage(**admitted), [], P)
    assert limits == {"a": 727.0, "b": 272.0}  # max-min fair would be 700/300


def test_pulsar_special_cases() -> None:
    assert compute_local_quota(-1, 5, 10) == -1
    assert pulsar_allocate(INF, usage(a=5), [], P) == {"a": INF}
    # Nobody reported usage: every broker gets the whole quota (a new group, an idle cluster).
    assert pulsar_allocate(1000, {}, ["a", "b", "c"], P) == {"a": 1000.0, "b": 1000.0, "c": 1000.0}
    # A broker with no usage while others have some: max(0, 1) = 1.
    assert compute_local_quota(1000, 0, 500) == 1
    with pytest.raises(ValueError):
        compute_local_quota(100, -1, 10)


def test_pulsar_uses_java_float_arithmetic() -> None:
    np = pytest.importorskip("numpy")
    conf, mine, total = 10**9, 333_333_333, 999_999_999
    f = np.float32
    residual = f(conf - total)
    fraction = f(mine) / f(total)
    expected = int(max(f(mine) + residual * fraction, f(1)))
    assert compute_local_quota(conf, mine, total) == expected
    assert expected != int(mine + (conf - total) * mine / total)  # double precision would differ
    assert f32(0.1) == float(f(0.1))


# -- static and the water-filling primitive ---------------------------------------------------


def test_static_splits_evenly_among_members() -> None:
    assert static_allocate(900, demand(a=900), ["a", "b", "c"], P) == {"a": 300, "b": 300, "c": 300}
    assert static_allocate(INF, {}, ["a"], P) == {"a": INF}


def test_water_fill_is_max_min_fair() -> None:
    assert water_fill(300, [240, 90, 30]) == [180, 90, 30]
    assert water_fill(1000, [2000, 2000, 100]) == [450, 450, 100]
    assert water_fill(100, [10, 20]) == [10, 20]
    assert water_fill(0, [5, 5]) == [0, 0]


def test_rgd_binding_example_3_daemons_quota_300() -> None:
    got = rgd_allocate(300, demand(a=240, b=90, c=30), [], P)
    assert got["a"] == pytest.approx(180, rel=0.02)
    assert got["b"] == pytest.approx(90, rel=0.02)
    assert got["c"] == pytest.approx(30, rel=0.02)
    assert sum(got.values()) == pytest.approx(300)


def test_rgd_idle_members_get_a_small_floor() -> None:
    got = rgd_allocate(1000, demand(a=2000, b=2000), ["a", "b", "c"], P)
    phi = floor_share(1000, 3, P)
    assert got["c"] == pytest.approx(phi)
    assert 0 < phi <= P.newcomer_fraction * 1000
    assert got["a"] == pytest.approx(got["b"]) == pytest.approx((1000 - phi) / 2)


def test_rgd_splits_equally_while_nobody_has_demand() -> None:
    # A new group: every member computes the same split, so quota / members is safe. (A
    # daemon that has not heard the topic for a tick is held to the floor by the calculator.)
    assert rgd_allocate(1000, {}, ["me"], P) == {"me": pytest.approx(1000)}
    got = rgd_allocate(1000, demand(a=0, b=0), ["a", "b", "c", "d"], P)
    assert got == {d: pytest.approx(250) for d in "abcd"}
    some = rgd_allocate(1000, demand(a=10), ["a", "b", "c", "d"], P)
    assert some["b"] == pytest.approx(floor_share(1000, 4, P))


def test_rgd_headroom_is_bounded() -> None:
    got = rgd_allocate(1000, demand(a=100, b=100), [], P)
    for share in got.values():
        assert share <= 100 * (1 + P.headroom_fraction) + floor_share(1000, 2, P) + 1e-9


def test_rgd_drain_aware_cut() -> None:
    # "a" was not throttled (admitted == demand), so its bucket may be full; its share
    # drops from ~1000 to ~500: it gets half for one tick.
    entries = {
        "a": DimensionInput(demand=900, admitted=900, limit=1000),
        "b": DimensionInput(demand=900, admitted=100, limit=100),  # throttled
    }
    got = rgd_allocate(1000, entries, [], P)
    assert got["a"] == pytest.approx(500 / (1 + P.burst_seconds))
    assert got["b"] == pytest.approx(500)
    # A small cut (demand within cut_margin of the share) is not halved.
    entries["a"] = DimensionInput(demand=510, admitted=510, limit=1000)
    assert rgd_allocate(1000, entries, [], P)["a"] == pytest.approx(500)


def test_quota_params_validate() -> None:
    with pytest.raises(ValueError, match="headroom_fraction"):
        QuotaParams(headroom_fraction=2)
    with pytest.raises(ValueError, match="burst_seconds"):
        QuotaParams(burst_seconds=-1)
