"""The simulator's binding targets, per built-in scenario (runs the simulator)."""

from __future__ import annotations

import functools

import pytest

from sim.engine import RunResult, run
from sim.metrics import Metrics, evaluate, ideal
from sim.scenario import builtin_names, load

BUILTINS = builtin_names()


@functools.cache
def result(name: str, strategy: str) -> tuple[RunResult, Metrics]:
    r = run(load(name), strategy)
    return r, evaluate(r)


def test_every_required_scenario_is_built_in() -> None:
    required = {"skew", "starved", "join", "leave", "crash", "step", "quota-change", "new-group",
                "idle-wake", "loss", "churn", "surge"}
    assert required <= set(BUILTINS)


# `loss` has its own targets below; `issue12-coupled` binds in bytes, which the messages
# metric does not judge (its targets are checked by hand below).
# `partition`: a daemon cut off the topic while its brokers keep asking it admits nothing from
# its lease's end; the judge splits the quota over the connected daemons meanwhile.


@pytest.mark.parametrize("name", [n for n in BUILTINS if n not in ("loss", "issue12-coupled")])
def test_rgd_meets_its_targets(name: str) -> None:
    _, m = result(name, "rgd")
    assert m.ticks_to_converge is not None and m.ticks_to_converge <= 3, m.windows
    assert m.overshoot_pct <= 10.0
    assert m.utilization is not None and m.utilization >= 0.95
    assert m.jain is not None and m.jain >= 0.99


def test_rgd_under_20_percent_report_loss() -> None:
    r, m = result("loss", "rgd")
    assert load("loss").loss == 0.2 and r.reports_lost > 0
    assert m.ticks_to_converge is not None and m.ticks_to_converge <= 5
    assert m.overshoot_pct <= 15.0


def test_join_binding_targets() -> None:
    # 3 daemons, quota 300, demands 240/90/30: within 5 ticks the cluster admits 300 +- 10 % and
    # each daemon is within 10 % of 180/90/30; the 4th daemon never pushes a tick over 110 %.
    r, _ = result("join", "rgd")
    series = r.dims["g/publish"]
    for k in range(5, 10):
        t = series[k]
        assert t is not None and 270 <= sum(t.admitted.values()) <= 330
        for daemon, fair in {"a": 180, "b": 90, "c": 30}.items():
            assert abs(t.admitted[daemon] - fair) <= 0.1 * fair + 1.5  # 1.5 = 0.5 % of the quota
    assert max(sum(t.admitted.values()) for t in series if t is not None) <= 330


def test_crash_share_is_redistributed_after_the_ttl() -> None:
    r, m = result("crash", "rgd")
    ttl = load("crash").ttl_ticks
    series = r.dims["g/publish"]
    during = series[10 + ttl - 1]
    after = series[10 + ttl + 3]
    assert during is not None and after is not None
    assert sum(during.admitted.values()) < 0.75 * 900  # the dead daemon's share is held back ...
    assert sum(after.admitted.values()) == pytest.approx(900, rel=0.05)  # ... until the TTL evicts it
    assert m.ticks_to_converge is not None and m.ticks_to_converge <= 3


def test_pulsar_freezes_near_727_272_on_skew() -> None:
    r, m = result("skew", "pulsar")
    limits = [tick["g/publish"] for tick in r.limits[3:]]
    for lim in limits:
        # It wanders with the admitted counts each report carries (a tick's rates: 708..750 for a)
        # but never reaches the max-min fair 700/300.
        assert 705 <= lim["a"] <= 750 and 250 <= lim["b"] <= 295
    # Pulsar's proportional split of the reported demand 800/300: 1000 x 8/11 and 1000 x 3/11.
    first = r.limits[1:4]
    assert any(lim["g/publish"]["a"] == 727.0 for lim in first)
    assert any(lim["g/publish"]["b"] == 272.0 for lim in first)
    # Whether the judge calls that converged is a matter of its 10 % tolerance (272 is 9.3 %
    # under 300): the frozen split above is the claim, not the metric.
    del m


@pytest.mark.parametrize("name", ["skew", "starved", "join", "crash", "idle-wake", "new-group", "loss"])
def test_rgd_ahead_of_pulsar_where_pulsar_falls_short(name: str) -> None:
    _, rgd = result(name, "rgd")
    _, pulsar = result(name, "pulsar")
    assert pulsar.ticks_to_converge is None or pulsar.overshoot_pct > 10
    assert rgd.ticks_to_converge is not None
    assert rgd.overshoot_pct < pulsar.overshoot_pct
    assert rgd.jain >= pulsar.jain  # type: ignore[operator]


def test_starved_small_daemon_gets_its_demand() -> None:
    r, _ = result("starved", "rgd")
    last = r.dims["g/publish"][-1]
    assert last is not None and last.admitted["c"] >= 95
    pr, _ = result("starved", "pulsar")
    plast = pr.dims["g/publish"][-1]
    assert plast is not None and plast.admitted["c"] < 60  # Pulsar freezes the small daemon low


def test_new_group_never_gets_the_full_quota_everywhere() -> None:
    r, _ = result("new-group", "rgd")
    h = r.dims["h/publish"]
    assert max(sum(t.admitted.values()) / t.quota for t in h if t is not None) <= 1.05
    pr, _ = result("new-group", "pulsar")
    ph = pr.dims["h/publish"]
    assert max(sum(t.admitted.values()) / t.quota for t in ph if t is not None) > 1.3


def test_static_wastes_unused_shares() -> None:
    _, m = result("skew", "static")
    assert m.utilization is not None and m.utilization < 0.85


def test_ideal_is_max_min_fair_over_offered_load() -> None:
    r, _ = result("starved", "rgd")
    t = r.dims["g/publish"][5]
    assert t is not None and ideal(t) == pytest.approx({"a": 450, "b": 450, "c": 100})


def test_previous_is_what_keeps_a_surge_under_the_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    # c's own report shows its jump before its peers have folded it. With `previous` (the
    # smallest of its states a peer may hold, rgd.cluster.own_reports), c waits for their
    # acknowledgement, so for them to make room; counting its newest report, the cluster overshoots.
    from rgd.cluster.node import ClusterNode

    _, with_previous = result("surge", "rgd")
    assert with_previous.overshoot_pct <= 2.0
    call = ClusterNode._call

    def without_previous(self, group, ctx=None):  # a daemon that counts its newest report as what peers hold
        c = call(self, group, ctx)
        return c._replace(previous=c.usage.get(self.node_id))

    monkeypatch.setattr(ClusterNode, "_call", without_previous)
    # Without delay its peers fold the report of the rise (published at the next react) at
    # once, so counting the newest report costs little; with a delivery delay of a tick they
    # hold its old demand for that long, and waiting for their acknowledgement is what keeps
    # the cluster under the quota.
    from dataclasses import replace

    delayed = replace(load("surge"), delay=1.0)
    assert evaluate(run(delayed, "rgd")).overshoot_pct > 15.0  # measured 18.4 %
    monkeypatch.undo()
    # 6.9 % since brokers' asks arrive across each sub-step rather than at its first instant.
    assert evaluate(run(delayed, "rgd")).overshoot_pct <= 10.0


def test_coupled_limits_are_allocated_in_the_binding_dimension() -> None:
    # 8000-byte messages, 1000 msg/s and 4 MB/s: bytes bind at 500 msg/s. Demands 400/200/50
    # -> max-min fair on 500: 250/200/50 (by hand). After the combined change (300 msg/s,
    # 3.2 MB/s = 400 msg/s: messages bind; demands 100/300/300) -> 100/100/100.
    r, m = result("issue12-coupled", "rgd")
    series = r.dims["g/publish"]
    for k, fair in [(k, {"a": 250, "b": 200, "c": 50}) for k in range(3, 15)] + \
                   [(k, {"a": 100, "b": 100, "c": 100}) for k in range(17, 30)]:
        t = series[k]
        assert t is not None
        for daemon, share in fair.items():
            assert abs(t.admitted[daemon] - share) <= 0.05 * share + 2, (k, daemon, t.admitted)
    assert m.overshoot_pct <= 2.0


@pytest.mark.parametrize("name", [n for n in BUILTINS if n.startswith("issue12-")])
def test_workloads_rgd_was_not_tuned_for_stay_under_ten_percent(name: str) -> None:
    _, m = result(name, "rgd")
    assert m.overshoot_pct <= 10.0
