"""A batch of asks means the same as the same asks made one by one, in order.

What the properties hold and why: the docstring of tests/unit/test_batch_semantics.py.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_batch_semantics.py.
"""

from __future__ import annotations

import math

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.api.broker import _batch, _encode
from tests.support.fake_clock import FakeClock
from tests.unit.test_batch_semantics import (
    NAMESPACES,
    TOPICS,
    _check_one_group_batch,
    _daemon,
    _group,
    _one_by_one,
    _rate,
    _registry,
    _round,
    _state,
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_group, min_size=1, max_size=3), st.lists(st.one_of(st.none(), st.integers(0, 2)), min_size=4,
       max_size=4), st.dictionaries(st.sampled_from(NAMESPACES), st.integers(0, 2), max_size=3),
       st.one_of(st.just({}), st.dictionaries(st.sampled_from([*TOPICS, "persistent://t2/n0/c"]), st.integers(0, 2),
                                              max_size=2)),
       st.sampled_from([0.5, 1.0, 10.0]), st.lists(_round, min_size=1, max_size=4),
       st.sampled_from([math.inf, 0.0, 0.05, 1.0]))
def test_batch_answers_and_state_equal_one_by_one(groups, tenant_groups, ns_override, topic_override, burst, rounds,
                                                  lease_left):
    reg = _registry(groups, tenant_groups, ns_override, topic_override)
    clock = FakeClock(1000.0)
    batched, single = _daemon(reg, clock, burst), _daemon(reg, clock, burst)
    batched.limiter.lease_until = single.limiter.lease_until = clock() + lease_left  # refusing from then on
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
