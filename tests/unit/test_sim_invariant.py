"""The simulator's invariant checker (sim/invariant.py) on hand-built limit series.

Real limiters, limits set by hand: the sums and verdicts below are literals worked out
beside each series, not recomputed with the checker's code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rgd.config.groups import ResourceGroup
from rgd.limiting.limiter import Limiter
from sim.invariant import InvariantChecker, Situation

INF = math.inf


@dataclass
class Daemon:
    limiter: Limiter


def _group(name: str = "g", **body: float) -> ResourceGroup:
    return ResourceGroup.from_admin(name, body)


def _daemons(*ids: str) -> dict[str, Daemon]:
    return {i: Daemon(Limiter(clock=lambda: 0.0)) for i in ids}


def _set(d: dict[str, Daemon], group: ResourceGroup, **limits: tuple[float, float]) -> None:
    for daemon, (msgs, nbytes) in limits.items():
        d[daemon].limiter.set_limit(group, "publish", msgs, nbytes)


def _quiet() -> Situation:
    return Situation(partitioned=("c",), loss=0.1, delay=1.0)


def test_a_literal_violation_is_found_once_per_episode_with_its_worst_instant() -> None:
    g = _group(publishRateInMsgs=100)
    groups = {"g": g}
    d = _daemons("a", "b", "c")
    chk = InvariantChecker()
    # t=0: 30 + 30 + 30 = 90 <= 110
    _set(d, g, a=(30, INF), b=(30, INF), c=(30, INF))
    chk.check(0.0, d, groups, _quiet)
    # t=1: 40 + 40 + 30 = 110: exactly quota + 10 %, not over
    _set(d, g, a=(40, INF), b=(40, INF))
    chk.check(1.0, d, groups, _quiet)
    # t=2: 40 + 40 + 31 = 111 > 110: over
    _set(d, g, c=(31, INF))
    chk.check(2.0, d, groups, _quiet)
    # t=3: nothing moved: still over, the same episode
    chk.check(3.0, d, groups, _quiet)
    # t=4: 40 + 45 + 31 = 116: the episode's worst
    _set(d, g, b=(45, INF))
    chk.check(4.0, d, groups, _quiet)
    # t=5: 33 + 33 + 33 = 99: back within
    _set(d, g, a=(33, INF), b=(33, INF), c=(33, INF))
    chk.check(5.0, d, groups, _quiet)
    found = chk.finish()
    assert len(found) == 1
    v = found[0]
    assert (v.dimension, v.unit, v.start, v.end, v.checks, v.at) == ("g/publish", "messages", 2.0, 4.0, 3, 4.0)
    assert (v.total, v.quota) == (116.0, 100.0)
    assert v.limits == (("a", 40.0), ("b", 45.0), ("c", 31.0))
    assert math.isclose(v.excess_pct, 16.0)
    assert v.situation == Situation(partitioned=("c",), loss=0.1, delay=1.0)
    assert "partitioned c" in v.describe() and "+16.0 %" in v.describe()
    assert chk.checks == 6


def test_a_literal_non_violation_is_not_reported() -> None:
    g = _group(publishRateInMsgs=100, publishRateInBytes=10_000)
    groups = {"g": g}
    d = _daemons("a", "b")
    chk = InvariantChecker()
    for t, (ma, mb, ba, bb) in enumerate([(50, 50, 5000, 5000), (60, 50, 4000, 7000), (100, 10, 10_000, 1000)]):
        # sums: 100 / 10 000, 110 / 11 000, 110 / 11 000: never above 110 / 11 000
        _set(d, g, a=(ma, ba), b=(mb, bb))
        chk.check(float(t), d, groups, _quiet)
    assert chk.finish() == []


def test_bytes_are_a_dimension_of_their_own() -> None:
    g = _group(publishRateInMsgs=100, publishRateInBytes=10_000)
    d = _daemons("a", "b")
    chk = InvariantChecker()
    _set(d, g, a=(50, 6000), b=(50, 6000))  # messages 100 (fine), bytes 12 000 > 11 000
    chk.check(0.0, d, {"g": g}, _quiet)
    [v] = chk.finish()
    assert (v.unit, v.total, v.quota) == ("bytes", 12_000.0, 10_000.0)


def test_unlimited_quotas_and_inf_limits_are_outside_the_check() -> None:
    g = _group(publishRateInMsgs=100)  # bytes unlimited
    d = _daemons("a", "b")
    chk = InvariantChecker()
    _set(d, g, a=(INF, INF), b=(50, INF))  # an INF limit is no grant: 50 <= 110
    chk.check(0.0, d, {"g": g}, _quiet)
    free = _group("g2", publishRateInMsgs=-1)
    _set(d, free, a=(500, INF), b=(500, INF))  # a group without a quota: nothing to exceed
    chk.check(1.0, d, {"g": g, "g2": free}, _quiet)
    assert chk.finish() == []


def test_a_crashed_daemon_grants_nothing_and_a_quota_cut_is_judged_at_once() -> None:
    g = _group(publishRateInMsgs=200)
    d = _daemons("a", "b", "c")
    chk = InvariantChecker()
    _set(d, g, a=(60, INF), b=(60, INF), c=(60, INF))
    chk.check(0.0, d, {"g": g}, _quiet)  # 180 <= 220
    cut = _group(publishRateInMsgs=100)
    chk.config_changed()
    chk.check(1.0, d, {"g": cut}, _quiet)  # no limit moved, the quota did: 180 > 110
    del d["c"]
    chk.check(2.0, d, {"g": cut}, _quiet)  # c crashed: 120 > 110, the same episode
    _set(d, cut, a=(50, INF), b=(50, INF))
    chk.check(3.0, d, {"g": cut}, _quiet)  # 100 <= 110
    [v] = chk.finish()
    assert (v.start, v.end, v.checks, v.total, v.quota) == (1.0, 2.0, 2, 180.0, 100.0)


def test_a_daemon_past_its_lease_grants_nothing_whatever_limit_it_still_holds() -> None:
    """Its limiter refuses every limited ask from `lease_until` on, before its node recomputes."""
    g = _group(publishRateInMsgs=100)
    groups = {"g": g}
    d = _daemons("a", "b", "c")
    chk = InvariantChecker()
    _set(d, g, a=(33, INF), b=(33, INF), c=(33, INF))
    d["c"].limiter.lease_until = 2.0
    chk.check(0.0, d, groups, _quiet)
    _set(d, g, a=(50, INF), b=(50, INF))  # its peers took its share: 133 while its lease lasts
    chk.check(1.0, d, groups, _quiet)
    chk.check(2.0, d, groups, _quiet)  # nothing moved but the clock: c's lease is over, 100
    chk.check(3.0, d, groups, _quiet)
    assert [(v.start, v.end, v.total) for v in chk.finish()] == [(1.0, 1.0, 133.0)]
