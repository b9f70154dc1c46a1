"""Report entries leave out the kinds that say nothing, and every reader reads them alike."""

from __future__ import annotations

import itertools
import math

from rgd.cluster.report_builder import (
    _silent,
    counter_figures,
    drop_silent_kinds,
    figures,
    group_entries,
    is_silent,
    kind_usage,
)
from rgd.config.groups import KINDS, ResourceGroup
from rgd.limiting.limiter import Collected, Limiter, TickCounters
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage


def _state(limiter: Limiter, group: ResourceGroup, kind: str, rates: tuple[float, float] | None):
    if rates is None:
        return None
    st = limiter.state(group, kind, 0.0)
    st.messages.rate, st.bytes.rate = rates
    return st


def test_the_prediction_is_what_kind_usage_builds() -> None:
    """group_entries decides before building; the decision must be is_silent of the built kind,
    for every mix of traffic, limits and quota (a finite limit of 0 and a quota of 0 included:
    both block, and neither is silent)."""
    counters = [None, TickCounters(), TickCounters(admitted_messages=1), TickCounters(throttled_bytes=5)]
    limits = [None, (math.inf, math.inf), (0.0, math.inf), (math.inf, 250.0), (10.0, 20.0)]
    quotas = [None, {}, {"publish_msgs": 0.0}, {"publish_msgs": 100.0}, {"publish_bytes": 1e6},
              {"dispatch_msgs": 7.0}, {"replication_bytes": 9.0}]
    cases = 0
    for c_counts, rates, quota, kind in itertools.product(counters, limits, quotas, KINDS):
        limiter = Limiter(lambda: 0.0)
        group = None if quota is None else ResourceGroup("g", **quota)
        c = None if c_counts is None else Collected(c_counts, frozenset({"t/n"}), 1)
        st = _state(limiter, group or ResourceGroup("g"), kind, rates)
        built = kind_usage(c, st, group, kind)
        assert _silent(c, st, group, kind) == is_silent(built), (c_counts, rates, quota, kind, built)
        cases += 1
    assert cases == 4 * 5 * 7 * 3


def test_entries_carry_only_the_kinds_with_something_to_say() -> None:
    limiter = Limiter(lambda: 0.0)
    publish_only = ResourceGroup("p", publish_msgs=100.0)
    dispatch_quota = ResourceGroup("d", publish_msgs=100.0, dispatch_bytes=5e5)
    unlimited = ResourceGroup("u")
    groups = {g.name: g for g in (publish_only, dispatch_quota, unlimited)}
    limiter.acquire(publish_only, "publish", 3, 300, "t/a", now=0.0)
    limiter.acquire(dispatch_quota, "publish", 1, 10, "t/b", now=0.0)
    limiter.acquire(unlimited, "dispatch", 2, 20, "t/c", now=0.0)  # traffic on an unlimited kind
    entries = group_entries(limiter.collect(), limiter.states, groups)
    present = {name: [k for k in KINDS if gu.HasField(k)] for name, gu in entries.items()}
    assert present == {"p": ["publish"], "d": ["publish", "dispatch"], "u": ["dispatch"]}
    assert entries["d"].dispatch.quota_bytes == 5e5 and entries["d"].dispatch.admitted_messages == 0
    assert entries["u"].dispatch.admitted_messages == 2 and entries["u"].dispatch.limit_messages == -1.0
    assert list(entries["p"].namespaces) == ["t/a"]


def _full_entry() -> GroupUsage:
    gu = GroupUsage(group="g", namespaces=["t/n"], topics=2)
    gu.publish.CopyFrom(KindUsage(admitted_messages=9, admitted_bytes=900, throttled_messages=1, throttled_bytes=100,
                                  limit_messages=10.0, limit_bytes=-1.0, quota_messages=30.0, quota_bytes=-1.0))
    for kind in ("dispatch", "replication"):
        getattr(gu, kind).CopyFrom(KindUsage(limit_messages=-1.0, limit_bytes=-1.0, quota_messages=-1.0,
                                             quota_bytes=-1.0))
    return gu


def test_a_kind_with_anything_to_say_is_kept() -> None:
    for field, value in [("admitted_messages", 1), ("throttled_bytes", 1), ("limit_messages", 0.0),
                         ("limit_bytes", 5.0), ("quota_messages", 0.0), ("quota_bytes", 1.0)]:
        gu = _full_entry()
        setattr(gu.dispatch, field, value)
        drop_silent_kinds(gu)
        assert gu.HasField("dispatch") and not gu.HasField("replication"), field


def test_figures_are_usage_demand_and_shadow_counts_of_every_kind() -> None:
    gu = GroupUsage(group="g", publish=KindUsage(admitted_messages=30, admitted_bytes=3000, throttled_messages=20,
                                                 throttled_bytes=2000, shadow_throttled_messages=4),
                    dispatch=KindUsage(admitted_messages=5, throttled_bytes=7))
    # publish, dispatch, replication: admitted, throttled, shadow-throttled (messages, bytes)
    assert figures(gu) == (30, 3000, 20, 2000, 4, 0, 5, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0)


def test_the_figures_read_from_counters_are_those_of_the_entry_built_from_them() -> None:
    """The tick report compares counter_figures and builds entries for the groups it sends
    alone; what it compared must be what the built entry says (figures of it), for every mix
    of counters (shadow counts on an idle kind included), limits and quota, on each kind."""
    counters = [None, TickCounters(), TickCounters(admitted_messages=3, admitted_bytes=300, throttled_messages=2,
                                                   throttled_bytes=200, shadow_throttled_messages=1,
                                                   shadow_throttled_bytes=100),
                TickCounters(shadow_throttled_messages=2, shadow_throttled_bytes=9), TickCounters(throttled_bytes=5)]
    limits = [None, (math.inf, math.inf), (0.0, math.inf), (10.0, 20.0)]
    quotas = [{}, {"publish_msgs": 0.0}, {"publish_msgs": 100.0}, {"dispatch_bytes": 1e6}]
    cases = 0
    for c_counts, rates, quota, kind in itertools.product(counters, limits, quotas, KINDS):
        limiter = Limiter(lambda: 0.0)
        group = ResourceGroup("g", **quota)
        _state(limiter, group, kind, rates)
        collected = {} if c_counts is None else {("g", kind): Collected(c_counts, frozenset({"t/n"}), 1)}
        built = group_entries(collected, limiter.states, {"g": group}, ["g"])["g"]
        assert counter_figures(collected, limiter.states, {"g": group}, "g") == figures(built), \
            (c_counts, rates, quota, kind)
        cases += 1
    assert cases == 5 * 4 * 4 * 3
    # A group the config no longer names (its buckets outlive it until forgotten) reads the same.
    collected = {("gone", "publish"): Collected(counters[2], frozenset(), 0)}
    built = group_entries(collected, {}, {}, ["gone"])["gone"]
    assert counter_figures(collected, {}, {}, "gone") == figures(built) != (0,) * 18
