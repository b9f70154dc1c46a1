"""The two body parsers agree: msgspec's one-pass decoder (the hot path) accepts
only what the hand-written parser accepts, with the same asks; and it does take
the well-formed bodies brokers send, or the hot path would silently be the slow one.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_api_parsing.py.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.api.requests import MAX_BYTES, MAX_MESSAGES, decode_well_formed
from tests.unit.test_api_parsing import bodies, slow


@settings(max_examples=600, deadline=None)
@given(bodies.map(str.encode))
def test_fast_parser_accepts_only_what_the_full_parser_accepts(body: bytes) -> None:
    fast = decode_well_formed(body)
    if fast is not None:
        assert slow(body) == fast


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries(
    {"namespace": st.builds(lambda a, b: f"{a}/{b}", st.text("abc-é", min_size=1, max_size=8),
                            st.text("xyz_😀", min_size=1, max_size=8))},
    optional={"kind": st.sampled_from(["publish", "dispatch"]), "messages": st.integers(0, MAX_MESSAGES),
              "bytes": st.integers(0, MAX_BYTES), "topic": st.none() | st.text(max_size=30)},
), min_size=1, max_size=5), st.booleans())
def test_well_formed_bodies_take_the_fast_path(items: list[dict], batch: bool) -> None:
    body = json.dumps({"requests": items} if batch else items[0]).encode()
    fast = decode_well_formed(body)
    assert fast is not None and fast == slow(body)
