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

from rgd.api.errors import ApiError
from rgd.api.requests import MAX_BYTES, MAX_MESSAGES, Ask, decode_well_formed, parse_asks, parse_json

names = st.text(st.characters(codec="utf-8"), max_size=6)
namespaces = st.one_of(
    st.builds(lambda a, b: f"{a}/{b}", names, names),
    st.text(alphabet="ab/é😀", max_size=5),
    st.builds(lambda n: "t/" + "x" * n, st.integers(250, 260)),  # around the 256 bound
)
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | names
counts = st.one_of(st.integers(-2, MAX_BYTES + 2), st.sampled_from([MAX_MESSAGES, MAX_MESSAGES + 1, 2.0, 2.5]),
                   scalars)
asks = st.fixed_dictionaries(
    {},
    optional={
        "namespace": st.one_of(namespaces, scalars),
        "kind": st.one_of(st.sampled_from(["publish", "dispatch", "Publish"]), scalars),
        "messages": counts,
        "bytes": counts,
        "topic": st.one_of(names, st.builds(lambda n: "t" * n, st.integers(1020, 1030)), scalars),
        "extra": scalars,
    },
)
bodies = st.one_of(
    asks.map(json.dumps),
    st.lists(asks, max_size=4).map(lambda v: json.dumps({"requests": v})),
    st.fixed_dictionaries({"requests": st.lists(asks, max_size=2)}, optional={"extra": scalars}).map(json.dumps),
    st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(names, c, max_size=3)).map(json.dumps),
)


def slow(body: bytes) -> tuple[list[Ask], bool] | str:
    try:
        return parse_asks(parse_json(body))
    except ApiError as exc:
        return exc.message


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
