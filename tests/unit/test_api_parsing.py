"""The two body parsers agree: msgspec's one-pass decoder (the hot path) accepts
only what the hand-written parser accepts, with the same asks; and it does take
the well-formed bodies brokers send, or the hot path would silently be the slow one."""

from __future__ import annotations

import json

import pytest
from hypothesis import strategies as st

from rgd.api.errors import ApiError
from rgd.api.requests import MAX_BATCH, MAX_BYTES, MAX_MESSAGES, Ask, decode_well_formed, parse_asks, parse_json

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


@pytest.mark.parametrize("body", [
    b'{"namespace": "a/b", "messages": 2.0}',  # lenient: the full parser takes 2.0 as 2
    b'{"namespace": "a/b", "messages": true}',
    b'{"namespace": "/b"}', b'{"namespace": "a/b/c"}', b'{"namespace": ""}',
    b'{"requests": [], "x": 1}',
    b'{"requests": [' + b'{"namespace": "a/b"},' * MAX_BATCH + b'{"namespace": "a/b"}]}',
    b"", b"[1]", b'{"namespace": "a/b"} trailing',
])
def test_the_rest_goes_to_the_full_parser(body: bytes) -> None:
    assert decode_well_formed(body) is None


def test_duplicate_keys_last_wins_in_both() -> None:
    body = b'{"namespace": "a/b", "messages": 1, "messages": 7}'
    assert decode_well_formed(body) == slow(body) and slow(body)[0][0].messages == 7


@pytest.mark.parametrize("field,values", [
    ("namespace", ["t/" + "x" * 254, "t/" + "x" * 255, "t/" + "é" * 254, "t/" + "😀" * 255]),
    ("topic", ["t" * 1024, "t" * 1025, "é" * 1024, "😀" * 1025]),
    ("messages", [0, -1, MAX_MESSAGES, MAX_MESSAGES + 1]),
    ("bytes", [0, -1, MAX_BYTES, MAX_BYTES + 1]),
])
def test_bounds_agree(field: str, values: list) -> None:
    for value in values:
        body = json.dumps({"namespace": "a/b", field: value}).encode()
        expected = slow(body)
        assert decode_well_formed(body) == (None if isinstance(expected, str) else expected), (field, value)
        assert isinstance(expected, str) == (decode_well_formed(body) is None), (field, value)
