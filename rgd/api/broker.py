"""Broker routes: /v1/acquire, /v1/usage, /v1/quota.

Brokers on the node call these on every publish/dispatch decision, so they do
only parsing, one dict lookup per namespace and bucket math: no awaits besides
reading the body, no Prometheus objects touched (the limiter's plain counters
are exported at scrape time instead).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from aiohttp import web

from rgd.api.errors import bad_request, json_response
from rgd.api.requests import parse_asks, parse_json
from rgd.groups import KINDS
from rgd.limiter import Decision, full_quota

if TYPE_CHECKING:
    from rgd.daemon import Daemon

DAEMON: web.AppKey["Daemon"] = web.AppKey("daemon")

_UNLIMITED = {"allowed": True, "group": None, "unlimited": True}


def _tokens(x: float) -> int | None:
    return None if x == math.inf else int(x)


def _decision_doc(group: str, d: Decision) -> dict[str, Any]:
    if d.allowed:
        return {
            "allowed": True,
            "group": group,
            "remaining_messages": _tokens(d.remaining_messages),
            "remaining_bytes": _tokens(d.remaining_bytes),
        }
    return {
        "allowed": False,
        "group": group,
        "retry_after_ms": _retry_ms(d.retry_after_s),
        "reason": d.reason,
    }


def _retry_ms(seconds: float) -> int:
    if seconds == math.inf:
        return 2**31 - 1  # a zero rate: ask again after a config change, not soon
    return max(1, math.ceil(seconds * 1000))


async def acquire(request: web.Request) -> web.Response:
    daemon = request.app[DAEMON]
    asks, is_batch = parse_asks(parse_json(await request.read()))
    resolve = daemon.config.effective.resolve
    limiter = daemon.limiter
    now = limiter.clock()
    limiter_acquire = limiter.acquire
    results = []
    append = results.append
    inf = math.inf
    for namespace, kind, messages, nbytes, topic in asks:
        group = resolve(namespace)
        if group is None:
            append(_UNLIMITED)
            continue
        d = limiter_acquire(group, kind, messages, nbytes, namespace, topic, now)
        if d.allowed:  # _decision_doc's allowed branch, inlined for batches
            rm, rb = d.remaining_messages, d.remaining_bytes
            append({
                "allowed": True,
                "group": group.name,
                "remaining_messages": None if rm == inf else int(rm),
                "remaining_bytes": None if rb == inf else int(rb),
            })
        else:
            append(_decision_doc(group.name, d))
    if is_batch:
        return json_response({"results": results})
    doc = results[0]
    if doc["allowed"]:
        return json_response(doc)
    retry_s = max(1, math.ceil(doc["retry_after_ms"] / 1000))
    return json_response(doc, 429, {"Retry-After": str(retry_s)})


async def usage(request: web.Request) -> web.Response:
    daemon = request.app[DAEMON]
    asks, _ = parse_asks(parse_json(await request.read()))
    resolve = daemon.config.effective.resolve
    recorded = 0
    for ask in asks:
        group = resolve(ask.namespace)
        if group is not None:
            daemon.limiter.record_usage(group, ask.kind, ask.messages, ask.nbytes, ask.namespace, ask.topic)
            recorded += 1
    return json_response({"recorded": recorded, "unlimited": len(asks) - recorded})


def _rate_doc(msgs: float, nbytes: float) -> dict[str, float | None]:
    return {
        "messages_per_second": None if msgs == math.inf else msgs,
        "bytes_per_second": None if nbytes == math.inf else nbytes,
    }


async def quota(request: web.Request) -> web.Response:
    daemon = request.app[DAEMON]
    ns = request.query.get("namespace")
    if not ns or ns.count("/") != 1:
        raise bad_request(f"namespace: query parameter must be 'tenant/namespace', got {ns!r}")
    group = daemon.config.effective.resolve(ns)
    if group is None:
        return json_response({"namespace": ns, "group": None, "unlimited": True})
    doc: dict[str, Any] = {"namespace": ns, "group": group.name, "unlimited": False}
    for kind in KINDS:
        st = daemon.limiter.states.get((group.name, kind))
        local = st.limit if st is not None else daemon.limiter.initial_limits(group, kind)
        doc[kind] = {"local": _rate_doc(*local), "cluster": _rate_doc(*full_quota(group, kind))}
    return json_response(doc)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/acquire", acquire)
    app.router.add_post("/v1/usage", usage)
    app.router.add_get("/v1/quota", quota)
