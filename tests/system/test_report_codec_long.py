"""Hostile reports are rejected with a reason and never applied.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_report_codec.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.cluster.report_codec import (
    Rejected,
)
from tests.unit.test_report_codec import decode


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=512))
def test_fuzz_decoder_only_ever_rejects(data):
    """Fuzz target: arbitrary bytes either decode to a vetted report or raise Rejected."""
    try:
        r = decode(data)
    except Rejected:
        return
    assert r.daemon_id and r.sequence >= 1 and r.tick_ms >= 1
