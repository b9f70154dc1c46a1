"""Parsing and validating broker request bodies.

Two parsers with one meaning. `msgspec` decodes the well-formed bodies, which is
nearly all of them, against the `Ask`/`Batch` schema below in one C pass (types,
ranges, unknown fields); that is about 3x cheaper than JSON plus Python checks
and a visible share of a single acquire's cost. Anything it refuses goes to the
hand-written parser, which also accepts 2.0 for 2 and names the bad field in its
error. tests/unit/test_api_parsing.py holds the two to the same answers.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Annotated, Any, Literal

import msgspec
import orjson

from rgd.api.errors import bad_request
from rgd.config.groups import KINDS, is_name
from rgd.config.json_kinds import json_type, shown

MAX_BATCH = 1000
MAX_MESSAGES = 10_000_000  # per request; more is a client bug, not traffic
MAX_BYTES = 1 << 40  # 1 TiB per request
MAX_NAME = 256
MAX_TOPIC = 1024


class Ask(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One ask: the schema of a single request body and of each batch item."""

    namespace: Annotated[str, msgspec.Meta(max_length=MAX_NAME)]  # + one '/' inside: namespace_ok
    kind: Literal[KINDS] = "publish"  # type: ignore[valid-type]
    messages: Annotated[int, msgspec.Meta(ge=0, le=MAX_MESSAGES)] = 1
    nbytes: Annotated[int, msgspec.Meta(ge=0, le=MAX_BYTES)] = msgspec.field(default=0, name="bytes")
    topic: Annotated[str, msgspec.Meta(max_length=MAX_TOPIC)] | None = None
    # kind replication only: the cluster replicated to (its replicatorDispatchRate entry)
    remote_cluster: Annotated[str, msgspec.Meta(max_length=MAX_NAME)] | None = None


ITEM_FIELDS = frozenset(f.encode_name for f in msgspec.structs.fields(Ask))  # JSON names: "bytes"


class Batch(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    requests: Annotated[list[Ask], msgspec.Meta(max_length=MAX_BATCH)]


_decode_ask = msgspec.json.Decoder(Ask).decode
_decode_batch = msgspec.json.Decoder(Batch).decode
_Refused = msgspec.MsgspecError
_namespace_of = attrgetter("namespace")


def namespace_ok(ns: str) -> bool:
    """'tenant/namespace': one '/', not at either end. (Checked in Python: msgspec's
    `pattern` runs Python's regex engine and costs more than these three tests.)"""
    return ns.count("/") == 1 and ns[0] != "/" and ns[-1] != "/"


def remote_cluster_ok(ask: Ask) -> bool:
    """`remote_cluster` is for kind replication, and a cluster name (Pulsar's name rule)."""
    return ask.kind == "replication" and ask.remote_cluster is not None and is_name(ask.remote_cluster)


def decode_well_formed(body: bytes) -> tuple[list[Ask], bool] | None:
    """msgspec's pass: (asks, is_batch) for a well-formed body, else None."""
    try:
        ask = _decode_ask(body)
        if namespace_ok(ask.namespace) and (ask.remote_cluster is None or remote_cluster_ok(ask)):
            return [ask], False
    except _Refused:  # a batch, or a body the full parser must word the error for
        try:
            asks = _decode_batch(body).requests
            if (all(map(namespace_ok, set(map(_namespace_of, asks))))  # each distinct namespace once
                    and all(remote_cluster_ok(a) for a in asks if a.remote_cluster is not None)):
                return asks, True
        except _Refused:
            pass
    return None


def parse_body(body: bytes) -> tuple[list[Ask], bool]:
    """A single ask or `{"requests": [...]}` -> (asks, is_batch); raises ApiError
    naming the problem."""
    return decode_well_formed(body) or parse_asks(parse_json(body))


def parse_json(body: bytes) -> Any:
    if not body:
        raise bad_request("body: empty, expected a JSON object")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"body: malformed JSON: {exc}") from None


def _count(doc: dict[str, Any], key: str, where: str, limit: int, default: int) -> int:
    value = doc.get(key, default)
    expected = f"an integer in 0..{limit}"
    if type(value) is not int:
        if type(value) is float and value.is_integer():
            value = int(value)
        else:
            raise bad_request(f"{where}{key}: expected {expected}, got {json_type(value)}")
    if value < 0 or value > limit:
        raise bad_request(f"{where}{key}: out of range, expected {expected}")
    return value


def parse_ask(doc: Any, where: str = "") -> Ask:
    if type(doc) is not dict:
        raise bad_request(f"{where or 'body'}: expected a JSON object")
    if not doc.keys() <= ITEM_FIELDS:
        unknown = sorted(doc.keys() - ITEM_FIELDS)[0]
        raise bad_request(f"{where}{unknown}: unknown field (expected {', '.join(sorted(ITEM_FIELDS))})"[:300])
    ns = doc.get("namespace")
    if type(ns) is not str or len(ns) > MAX_NAME or not namespace_ok(ns):
        raise bad_request(f"{where}namespace: expected 'tenant/namespace', got {shown(ns)}")
    kind = doc.get("kind", "publish")
    if kind not in KINDS:
        raise bad_request(f"{where}kind: expected one of {', '.join(KINDS)}, got {shown(kind)}")
    topic = doc.get("topic")
    if topic is not None and (type(topic) is not str or len(topic) > MAX_TOPIC):
        raise bad_request(f"{where}topic: expected a topic name of at most {MAX_TOPIC} characters, got {shown(topic)}")
    remote = doc.get("remote_cluster")
    if remote is not None:
        if kind != "replication":
            raise bad_request(f"{where}remote_cluster: only for kind replication (this ask is {kind})")
        if type(remote) is not str or len(remote) > MAX_NAME or not is_name(remote):
            raise bad_request(f"{where}remote_cluster: expected a cluster name (ASCII letters, digits and "
                              f"_ - = : .), got {shown(remote)}")
    return Ask(
        ns,
        kind,
        _count(doc, "messages", where, MAX_MESSAGES, 1),
        _count(doc, "bytes", where, MAX_BYTES, 0),
        topic,
        remote,
    )


def parse_asks(doc: Any) -> tuple[list[Ask], bool]:
    """A single ask or `{"requests": [...]}`; returns (asks, is_batch)."""
    if type(doc) is dict and "requests" in doc:
        if len(doc) != 1:
            extra = sorted(k for k in doc if k != "requests")[0]
            raise bad_request(f"{extra}: unknown field beside 'requests'"[:300])
        items = doc["requests"]
        if type(items) is not list:
            raise bad_request("requests: expected an array of requests")
        if len(items) > MAX_BATCH:
            raise bad_request(f"requests: {len(items)} items, at most {MAX_BATCH} per batch")
        return [parse_ask(item, f"requests[{i}].") for i, item in enumerate(items)], True
    return [parse_ask(doc)], False
