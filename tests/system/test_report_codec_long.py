"""Hostile reports are rejected with a reason and never applied.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_report_codec.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.cluster.report_codec import (
    Rejected,
    decode_report,
)
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport

NOW = 1_800_000_000_000


def report(**kw) -> UsageReport:
    r = UsageReport(daemon_id=kw.pop("daemon_id", "peer"), sequence=kw.pop("sequence", 1),
                    publish_time_ms=kw.pop("publish_time_ms", NOW), tick_ms=kw.pop("tick_ms", 1000),
                    incarnation=kw.pop("incarnation", 7), leaving=kw.pop("leaving", False))
    for g in kw.pop("groups", []):
        r.groups.append(g)
    assert not kw
    return r


def group(name="gold", **kind) -> GroupUsage:
    g = GroupUsage(group=name)
    for k, v in kind.items():
        setattr(g.publish, k, v)
    return g


def decode(r: UsageReport | bytes, **kw):
    data = r if isinstance(r, bytes) else r.SerializeToString()
    return decode_report(data, NOW, "me", 99, **kw)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=512))
def test_fuzz_decoder_only_ever_rejects(data):
    """Fuzz target: arbitrary bytes either decode to a vetted report or raise Rejected."""
    try:
        r = decode(data)
    except Rejected:
        return
    assert r.daemon_id and r.sequence >= 1 and r.tick_ms >= 1
