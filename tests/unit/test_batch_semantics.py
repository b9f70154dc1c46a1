"""A batch of asks means the same as the same asks made one by one, in order.

The batch path decides each (group, kind)'s asks in one step (prefix sums) and
falls back to one-by-one from the first ask that does not fit; these properties
hold it to the single-ask path (`Limiter.acquire` + the single answer's JSON
shape) on a twin daemon state fed the same asks one at a time, and to a model
spelled with TokenBucket's own methods (refill, shortfall, take): answers,
remaining counts, and every bucket and counter afterwards.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import msgspec
from hypothesis import strategies as st

from rgd.api.broker import _UNLIMITED, _batch, _decision_doc, _encode
from rgd.api.requests import Ask
from rgd.config.groups import KINDS, RATE_FIELDS, GroupRegistry, ResourceGroup
from rgd.limiting.limiter import Limiter
from rgd.limiting.token_bucket import TokenBucket
from tests.support.fake_clock import FakeClock

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


def _model_allowed(rates: tuple[float, float], burst: float, asks: list[tuple[int, int]], debt: tuple[int, int]):
    """All-or-nothing over both buckets, spelled with TokenBucket's plain methods.

    The message bucket holds at least ten messages but never more than a second of its
    rate (the limiter's documented floor, written out here, not read from
    rgd.limiting.limiter.bucket_seconds); the byte bucket has no mean message yet, so no floor."""
    msg_rate, byte_rate = (math.inf if r < 0 else r for r in rates)
    msg_seconds = burst if not 0 < msg_rate < math.inf else max(burst, min(1.0, 10.0 / msg_rate))
    mb = TokenBucket.new(msg_rate, 0.0, msg_seconds)
    bb = TokenBucket.new(byte_rate, 0.0, burst)
    mb.charge(debt[0], 0.0)
    bb.charge(debt[1], 0.0)
    out = []
    for m, b in asks:
        ok = mb.shortfall(m) == 0 and bb.shortfall(b) == 0
        if ok:
            mb.take(m)
            bb.take(b)
        out.append(ok)
    return out


def _check_one_group_batch(msg_rate, byte_rate, burst, asks, debt):
    reg = GroupRegistry({"g": ResourceGroup.from_admin("g", {"publishRateInMsgs": msg_rate,
                                                             "publishRateInBytes": byte_rate})}, {}, {"t": "g"})
    clock = FakeClock(1000.0)
    clock.t = 0.0
    d = _daemon(reg, clock, burst)
    d.limiter.record_usage(reg.resolve("t/ns"), "publish", *debt, "t/ns")
    got = [r["allowed"] for r in msgspec.json.decode(_encode({"results": _batch(
        d, [Ask("t/ns", "publish", m, b) for m, b in asks])}))["results"]]
    assert got == _model_allowed((msg_rate, byte_rate), burst, asks, debt)


def test_the_model_knows_the_ten_message_floor():
    """CI found these: at 3.5 and 10 msg/s with a 0.5 s burst the bucket holds a
    second of its rate (3.5 and 10 messages), not 1.75 and 5, so the second ask fits."""
    _check_one_group_batch(3.5, -1, 0.5, [(0, 0)], (2, 0))
    _check_one_group_batch(10, -1, 0.5, [(5, 0), (3, 0)], (0, 0))
    _check_one_group_batch(1, -1, 0.5, [(1, 0), (0, 0)], (0, 0))


def test_a_denied_ask_takes_nothing_and_a_smaller_later_one_passes():
    """A literal case: 10 msg/s, asks 6, 6, 3 -> the second is denied, the third fits the 4 left."""
    reg = GroupRegistry({"g": ResourceGroup("g", 10, -1, -1, -1)}, {}, {"t": "g"})
    d = _daemon(reg, FakeClock(1000.0), 1.0)
    out = _batch(d, [Ask("t/a", "publish", 6), Ask("t/b", "publish", 6), Ask("t/a", "publish", 3)])
    docs = msgspec.json.decode(_encode(out))
    assert [r["allowed"] for r in docs] == [True, False, True]
    assert docs[0]["remaining_messages"] == 4 and docs[2]["remaining_messages"] == 1
    assert docs[1]["reason"] == "message_rate"


def test_an_empty_ask_is_denied_in_fractional_debt_as_alone():
    """Half a token of debt: an ask of 0 messages is denied one by one (tokens < 0), so in a batch too."""
    clock = FakeClock(1000.0)
    reg = GroupRegistry({"g": ResourceGroup("g", 10, -1, -1, -1)}, {}, {"t": "g"})
    d = _daemon(reg, clock, 1.0)
    d.limiter.record_usage(reg.resolve("t/a"), "publish", 11, 0, "t/a")  # 10 - 11 = -1
    clock.t += 0.05  # + 0.5
    docs = msgspec.json.decode(_encode(_batch(d, [Ask("t/a", "publish", 0), Ask("t/a", "publish", 0)])))
    assert [r["allowed"] for r in docs] == [False, False]
    assert docs[0]["reason"] == "debt"
