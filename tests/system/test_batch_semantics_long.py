"""A batch of asks means the same as the same asks made one by one, in order.

The batch path decides each (group, kind)'s asks in one step (prefix sums) and
falls back to one-by-one from the first ask that does not fit; these properties
hold it to the single-ask path (`Limiter.acquire` + the single answer's JSON
shape) on a twin daemon state fed the same asks one at a time, and to a model
spelled with TokenBucket's own methods (refill, shortfall, take): answers,
remaining counts, and every bucket and counter afterwards.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_batch_semantics.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.api.broker import _UNLIMITED, _batch, _decision_doc, _encode
from rgd.api.requests import Ask
from rgd.config.groups import KINDS, RATE_FIELDS, GroupRegistry, ResourceGroup
from rgd.limiting.limiter import Limiter
from rgd.limiting.token_bucket import TokenBucket
from tests.support.fake_clock import FakeClock
from tests.unit.test_batch_semantics import _check_one_group_batch

_rate = st.sampled_from([-1, -1, 0, 1, 3.5, 10, 50, 1000, 1e15])  # -1: unlimited; 1e15 x burst 10 > 2**53 tokens
_group = st.fixed_dictionaries({f: _rate for f in RATE_FIELDS})
TENANTS = ["t0", "t1", "t2", "t3"]
NAMESPACES = [f"{t}/n{i}" for t in TENANTS for i in range(3)]
TOPICS = ["persistent://t0/n0/a", "persistent://t1/n1/b", "persistent://t2/n0/c-partition-1"]

_ask = st.builds(
    Ask,
    st.sampled_from(NAMESPACES),
    st.sampled_from(KINDS),
    st.one_of(st.integers(0, 30), st.integers(0, 3000)),  # some beyond a small bucket: the full-bucket rule
    st.one_of(st.integers(0, 2000), st.just(0)),
    st.one_of(st.none(), st.sampled_from(TOPICS)),
)
# Before each batch: time passes, and usage charged after the fact may put a bucket in debt.
_charge = st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(KINDS), st.integers(0, 500), st.integers(0, 50_000))
_round = st.tuples(st.sampled_from([0.0, 0.0, 0.001, 0.05, 0.37, 1.0, 5.0]), st.lists(_charge, max_size=2),
                   st.lists(_ask, min_size=1, max_size=60))


def _registry(groups: list[dict[str, float]], tenant_groups: list[int | None],
              ns_override: dict[str, int], topic_override: dict[str, int] | None = None) -> GroupRegistry:
    reg = GroupRegistry()
    for i, rates in enumerate(groups):
        reg.groups[f"g{i}"] = ResourceGroup.from_admin(f"g{i}", rates)
    for tenant, gi in zip(TENANTS, tenant_groups):
        if gi is not None:
            reg.tenants[tenant] = f"g{gi % len(groups)}"
    for ns, gi in ns_override.items():
        reg.namespaces[ns] = f"g{gi % len(groups)}"
    for topic, gi in (topic_override or {}).items():  # a topic's own group beats its namespace's
        reg.topics[topic] = f"g{gi % len(groups)}"
    return reg


def _daemon(reg: GroupRegistry, clock: FakeClock, burst: float) -> SimpleNamespace:
    """What `_batch` reads of a daemon: the effective config and the limiter."""
    return SimpleNamespace(config=SimpleNamespace(effective=reg), limiter=Limiter(clock, burst_seconds=burst))


def _one_by_one(d: SimpleNamespace, asks: list[Ask]) -> list[dict]:
    """The single-ask path, ask after ask, at the batch's one clock reading."""
    now = d.limiter.clock()
    out = []
    for a in asks:
        group = d.config.effective.resolve(a.namespace, a.topic)
        if group is None:
            out.append(_UNLIMITED)
        else:
            out.append(_decision_doc(group.name, d.limiter.acquire(group, a.kind, a.messages, a.nbytes,
                                                                   a.namespace, a.topic, now)))
    return out


def _state(lim: Limiter) -> dict:
    return {key: (st.messages.tokens, st.messages.updated, st.messages.rate, st.bytes.tokens, st.bytes.updated,
                  st.bytes.rate, st.tick.admitted_messages, st.tick.admitted_bytes, st.tick.throttled_messages,
                  st.tick.throttled_bytes, st.total_admitted_messages, st.total_admitted_bytes,
                  st.total_throttled_messages, st.total_throttled_bytes, dict(st.throttled_events or {}),
                  set(st.namespaces), set(st.topics or ()),
                  _window_total(st.messages), _window_total(st.bytes))
            for key, st in lim.states.items()}


def _window_total(bucket: TokenBucket) -> float | None:
    """What a small share's 1-second window holds (a batch logs its run as one entry)."""
    return None if bucket.window is None else bucket.window.total


@settings(max_examples=400, deadline=None)
@given(st.lists(_group, min_size=1, max_size=3), st.lists(st.one_of(st.none(), st.integers(0, 2)), min_size=4,
       max_size=4), st.dictionaries(st.sampled_from(NAMESPACES), st.integers(0, 2), max_size=3),
       st.one_of(st.just({}), st.dictionaries(st.sampled_from([*TOPICS, "persistent://t2/n0/c"]), st.integers(0, 2),
                                              max_size=2)),
       st.sampled_from([0.5, 1.0, 10.0]), st.lists(_round, min_size=1, max_size=4))
def test_batch_answers_and_state_equal_one_by_one(groups, tenant_groups, ns_override, topic_override, burst, rounds):
    reg = _registry(groups, tenant_groups, ns_override, topic_override)
    clock = FakeClock(1000.0)
    batched, single = _daemon(reg, clock, burst), _daemon(reg, clock, burst)
    for dt, charges, asks in rounds:
        clock.t += dt
        for ns, kind, messages, nbytes in charges:
            group = reg.resolve(ns)
            if group is not None:
                batched.limiter.record_usage(group, kind, messages, nbytes, ns)
                single.limiter.record_usage(group, kind, messages, nbytes, ns)
        got = orjson.loads(_encode({"results": _batch(batched, asks)}))["results"]
        want = orjson.loads(orjson.dumps(_one_by_one(single, asks)))
        assert got == want
        assert _state(batched.limiter) == _state(single.limiter)


@settings(max_examples=300, deadline=None)
@given(_rate, _rate, st.sampled_from([0.5, 1.0, 2.0]),
       st.lists(st.tuples(st.integers(0, 40), st.integers(0, 4000)), min_size=1, max_size=80),
       st.tuples(st.integers(0, 60), st.integers(0, 6000)))
def test_one_group_batch_matches_token_bucket_model(msg_rate, byte_rate, burst, asks, debt):
    """A denied ask takes nothing, so a later smaller one may still pass."""
    _check_one_group_batch(msg_rate, byte_rate, burst, asks, debt)
