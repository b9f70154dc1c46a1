"""Broker routes: /v1/acquire, /v1/usage, /v1/quota.

Brokers on the node call these on every publish/dispatch decision, so they do
only parsing, one dict lookup per namespace and bucket math: no awaits besides
reading the body, no Prometheus objects touched (the limiter's plain counters
are exported at scrape time instead).
"""

from __future__ import annotations

import math
from itertools import repeat
from operator import attrgetter
from typing import Any

import msgspec
import orjson
from aiohttp import web

from rgd.api.body import read_body, read_slow_body
from rgd.api.daemon_view import ASKS, AskView
from rgd.api.errors import ApiError, as_json_error, bad_request, json_errors, json_response
from rgd.api.requests import Ask, namespace_ok, parse_body
from rgd.config.groups import KINDS, GroupRegistry, ResourceGroup, is_name
from rgd.limiting.limiter import BatchOutcome, Decision, full_quota
from rgd.limiting.token_bucket import INF

_UNLIMITED = {"allowed": True, "group": None, "unlimited": True}


def _decision_doc(group: str, d: Decision) -> dict[str, Any]:
    if d.allowed:
        rm, rb = d.remaining_messages, d.remaining_bytes
        return {
            "allowed": True,
            "group": group,
            "remaining_messages": None if rm == INF else int(rm),  # None: unlimited
            "remaining_bytes": None if rb == INF else int(rb),
        }
    return {
        "allowed": False,
        "group": group,
        "retry_after_ms": _retry_ms(d.retry_after_s),
        "reason": d.reason,
    }


def _shadow_doc(group: str, d: Decision) -> dict[str, Any]:
    """Shadow mode's answer to a denial: go ahead, with the decision enforcing would have made."""
    rm, rb = d.remaining_messages, d.remaining_bytes
    return {
        "allowed": True,
        "group": group,
        "remaining_messages": None if rm == INF else max(0, int(rm)),
        "remaining_bytes": None if rb == INF else max(0, int(rb)),
        "shadow": {"allowed": False, "reason": d.reason, "retry_after_ms": _retry_ms(d.retry_after_s)},
    }


def _retry_ms(seconds: float) -> int:
    if seconds == INF:
        return 2**31 - 1  # a zero rate: ask again after a config change, not soon
    return max(1, math.ceil(seconds * 1000))


def _denied(group: str, d: Decision) -> web.Response:
    doc = _decision_doc(group, d)
    retry_s = max(1, math.ceil(doc["retry_after_ms"] / 1000))
    return json_response(doc, 429, {"Retry-After": str(retry_s)})


class Allowed(msgspec.Struct, gc=False):
    """An allowed answer in a batch: the same JSON object as `_decision_doc`'s,
    built and encoded by msgspec in C, which is most of what answering 1000 asks
    costs once deciding them is cheap."""

    allowed: bool
    group: str
    remaining_messages: int | None
    remaining_bytes: int | None


_encode = msgspec.json.Encoder().encode
_namespace_of = attrgetter("namespace")
_topic_of = attrgetter("topic")
_kind_of = attrgetter("kind")
_remote_of = attrgetter("remote_cluster")


def _group_answers(group: str, outcome: BatchOutcome, shadow: bool = False) -> list[Any]:
    """One (group, kind)'s answers in its asks' order (`shadow`: the group is in shadow mode)."""
    n = outcome.admitted
    answers: list[Any] = list(map(
        Allowed, repeat(True, n), repeat(group, n),
        outcome.remaining_messages or repeat(None, n), outcome.remaining_bytes or repeat(None, n)))
    if outcome.rest:
        doc = _shadow_or_decision_doc if shadow else _decision_doc
        answers.extend(doc(group, d) for d in outcome.rest)
    return answers


def _shadow_or_decision_doc(group: str, d: Decision) -> dict[str, Any]:
    return _decision_doc(group, d) if d.allowed else _shadow_doc(group, d)


def _budget(registry: GroupRegistry, group: ResourceGroup, ask: Ask) -> ResourceGroup:
    """What limits an ask of `group`: a replication ask naming its remote cluster goes to that
    cluster's replicatorDispatchRate budget (or, without one, the group's replication rates)."""
    if ask.remote_cluster is None:
        return group
    return registry.replication_budget(group, ask.remote_cluster)


def _batch(daemon: AskView, asks: list[Ask]) -> list[Any]:
    """One answer per ask, in order, all at one clock reading. Asks of one
    (group, kind) share its two buckets and nothing else, so each (group, kind)'s
    asks are decided together in their order (Limiter.acquire_batch) and the
    answers put back where the asks were."""
    registry = daemon.config.effective
    resolve = registry.resolve
    limiter = daemon.limiter
    now = limiter.clock()
    # A topic's own attachment beats its namespace's: with any topic attached, the
    # group is per (namespace, topic); otherwise per namespace, resolved once each.
    by_topic = bool(registry.topics)
    group_of: dict[Any, ResourceGroup | None]  # by (namespace, topic) or by namespace
    if by_topic:
        group_of = {key: resolve(*key) for key in set(zip(map(_namespace_of, asks), map(_topic_of, asks)))}
    else:
        group_of = {ns: resolve(ns) for ns in set(map(_namespace_of, asks))}
    kinds = set(map(_kind_of, asks))
    remotes = set(map(_remote_of, asks))
    if len(kinds) == 1 and len(remotes) == 1 and len(set(group_of.values())) == 1:
        # the usual broker batch: one group, one kind (and one remote cluster)
        group = next(iter(group_of.values()))
        if group is None:
            return [_UNLIMITED] * len(asks)
        budget = _budget(registry, group, asks[0])
        namespaces = None if by_topic else group_of.keys()
        return _group_answers(group.name, limiter.acquire_batch(budget, kinds.pop(), asks, now, namespaces),
                              limiter.shadows(budget))
    by_key: dict[tuple[str, str], tuple[list[int], list[Ask], ResourceGroup, str]] = {}
    results: list[Any] = [_UNLIMITED] * len(asks)
    for i, ask in enumerate(asks):
        group = group_of[(ask.namespace, ask.topic) if by_topic else ask.namespace]
        if group is not None:
            budget = _budget(registry, group, ask)
            key = (budget.name, ask.kind)
            entry = by_key.get(key)
            if entry is None:
                entry = by_key[key] = ([], [], budget, group.name)
            entry[0].append(i)
            entry[1].append(ask)
    for (_, kind), (positions, group_asks, budget, name) in by_key.items():
        answers = _group_answers(name, limiter.acquire_batch(budget, kind, group_asks, now), limiter.shadows(budget))
        for i, answer in zip(positions, answers):
            results[i] = answer
    return results


async def acquire(request: web.Request) -> web.Response:
    # The hot path, written flat: every Python frame is a measurable share of a
    # single ask's cost (bench/bench_acquire.py), so no `json_errors` decorator (the
    # `except` does its work) and the allowed answer is built here.
    try:
        daemon = request.app[ASKS]
        asks, is_batch = parse_body(await request.read() if request.content.is_eof()
                                    else await read_slow_body(request, daemon.settings.http_idle_timeout))
        if is_batch:
            return web.Response(body=_encode({"results": _batch(daemon, asks)}), content_type="application/json")
        ask = asks[0]
        namespace = ask.namespace
        group = daemon.config.effective.resolve(namespace, ask.topic)
        if group is None:
            return json_response(_UNLIMITED)
        limiter = daemon.limiter
        budget = group if ask.remote_cluster is None else daemon.config.effective.replication_budget(
            group, ask.remote_cluster)
        d = limiter.acquire(budget, ask.kind, ask.messages, ask.nbytes, namespace, ask.topic, limiter.clock())
        if d.allowed:
            return web.Response(body=orjson.dumps(_decision_doc(group.name, d)), content_type="application/json")
        if limiter.shadows(budget):
            return json_response(_shadow_doc(group.name, d))
        return _denied(group.name, d)
    except (ApiError, web.HTTPException) as exc:
        return as_json_error(request, exc)


@json_errors
async def usage(request: web.Request) -> web.Response:
    daemon = request.app[ASKS]
    asks, _ = parse_body(await read_body(request, daemon.settings.http_idle_timeout))
    registry = daemon.config.effective
    resolve = registry.resolve
    recorded = 0
    for ask in asks:
        group = resolve(ask.namespace, ask.topic)
        if group is not None:
            daemon.limiter.record_usage(_budget(registry, group, ask), ask.kind, ask.messages, ask.nbytes,
                                        ask.namespace, ask.topic)
            recorded += 1
    # "ungrouped", not "unlimited": that name is /v1/acquire's and /v1/quota's boolean.
    return json_response({"recorded": recorded, "ungrouped": len(asks) - recorded})


def _rate_doc(msgs: float, nbytes: float) -> dict[str, float | None]:
    return {
        "messages_per_second": None if msgs == math.inf else msgs,
        "bytes_per_second": None if nbytes == math.inf else nbytes,
    }


@json_errors
async def quota(request: web.Request) -> web.Response:
    daemon = request.app[ASKS]
    ns = request.query.get("namespace")
    if not ns or not namespace_ok(ns):  # the same shape rule as /v1/acquire's bodies
        raise bad_request(f"namespace: query parameter must be 'tenant/namespace', got {ns!r}")
    remote = request.query.get("remote_cluster")
    if remote is not None and not is_name(remote):
        raise bad_request(f"remote_cluster: query parameter must be a cluster name, got {remote!r}"[:300])
    registry = daemon.config.effective
    group = registry.resolve(ns, request.query.get("topic"))
    if group is None:
        return json_response({"namespace": ns, "group": None, "unlimited": True})
    doc: dict[str, Any] = {"namespace": ns, "group": group.name, "unlimited": False}
    if remote is not None:
        doc["remote_cluster"] = remote
    for kind in KINDS:
        budget = registry.replication_budget(group, remote) if kind == "replication" and remote else group
        local = daemon.limiter.limit_in_force(budget, kind)
        doc[kind] = {"local": _rate_doc(*local), "cluster": _rate_doc(*full_quota(budget, kind))}
    return json_response(doc)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/acquire", acquire)
    app.router.add_post("/v1/usage", usage)
    app.router.add_get("/v1/quota", quota)
