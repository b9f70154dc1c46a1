"""Operator routes in Pulsar's admin v2 shapes: paths, methods, status codes and bodies
as Pulsar's ResourceGroups / Namespaces / topic-policies resources answer them, so
`pulsar-admin`, scripts and the Java admin client work unchanged
(tests/integration/test_admin_conformance.py replays the Java client's requests). rgd's own
additions (tenant attachment, /stats, PUT as an alias of POST) are marked
`x-rgd-extension` in rgd/api/openapi.json.

Writes become versioned `ConfigChange`s: applied here at once and published on
the config topic so every daemon applies them (cluster-wide config).
Auth: with tokens configured, writes need `Authorization: Bearer <token>`
(401 without, 403 wrong); without tokens, writes are accepted from loopback
only. Reads are open, like the broker routes.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import orjson
from aiohttp import web

from rgd.api.body import read_body
from rgd.api.daemon_view import DAEMON, RoutesView
from rgd.api.errors import ApiError, bad_request, json_errors, json_response
from rgd.api.requests import parse_json
from rgd.config.groups import (
    GROUP_FIELDS,
    TOPIC_DOMAINS,
    InvalidGroup,
    ResourceGroup,
    check_name,
    check_namespace,
    check_topic,
    unknown_fields,
)
from rgd.config.store import ATTACHMENT_TABLES, ConfigChange

PREFIX = "/admin/v2"
log = logging.getLogger("rgd.admin")

# Pulsar's own `reason` texts (ResourceGroupsBase, NamespacesBase), what its clients show.
RG_MISSING = "ResourceGroup does not exist"
RG_IN_USE = "ResourceGroup is in use"
# The response header naming PUT fields rgd ignored (also in RFC 9110's Warning form).
IGNORED_HEADER = "X-Rgd-Ignored-Fields"


# With `--cluster-process` the serving process forwards these routes to the cluster
# process's private socket and names the client here; the app trusts it only then (FORWARDED).
CLIENT_ADDRESS_HEADER = "X-Rgd-Client-Address"
FORWARDED: web.AppKey[bool] = web.AppKey("forwarded", bool)


def client_address(request: web.Request) -> str:
    if request.app.get(FORWARDED):
        return request.headers.get(CLIENT_ADDRESS_HEADER, "")
    return request.remote or ""


def _authorize_write(request: web.Request) -> None:
    daemon = request.app[DAEMON]
    tokens = daemon.admin_tokens
    if not tokens:
        try:
            loopback = ipaddress.ip_address(client_address(request)).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ApiError(403, "admin writes from beyond loopback need admin tokens to be configured")
        return
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer ") or not header[7:].strip():
        raise ApiError(401, "Authorization: a bearer token is required for admin writes")
    given = header[7:].strip().encode()
    if not any(hmac.compare_digest(given, t.encode()) for t in tokens):
        raise ApiError(403, "Authorization: the bearer token is not accepted")


def _checked(what: str, check: Callable[..., str], value: str) -> str:
    try:
        return check(what, value)
    except InvalidGroup as exc:
        raise bad_request(str(exc)) from None


def _group_name(request: web.Request, key: str = "name") -> str:
    return _checked("resource group", check_name, request.match_info[key])


async def _submit(daemon: RoutesView, key: str, value: Any, headers: dict[str, str] | None = None) -> web.Response:
    """204 when the change is in force here and on its way to every daemon; 202 when
    Pulsar is unreachable: in force here, queued for the others."""
    change = ConfigChange(key, value, int(time.time() * 1000), daemon.settings.id)
    if await daemon.submit_change(change):
        return web.Response(status=204, headers=headers)
    return json_response(
        {"status": "applied on this daemon; queued for the cluster until Pulsar is reachable"}, 202, headers
    )


MAX_LISTED = 20  # ignored fields named in a header; the log line names them all


def _ignored_headers(ignored: list[str]) -> dict[str, str]:
    """The ignored field names, percent-encoded: they come from the client, and a
    control character or quote in a header value would break the response."""
    listed = [quote(f, safe="-_.~:=") for f in ignored[:MAX_LISTED]]
    if len(ignored) > MAX_LISTED:
        listed.append(f"(+{len(ignored) - MAX_LISTED} more)")
    return {IGNORED_HEADER: ",".join(listed), "Warning": f'299 rgd "unknown fields ignored: {", ".join(listed)}"'}


def _missing_group(name: str) -> ApiError:
    return ApiError(404, f"resource group {name!r} does not exist", RG_MISSING)


# -- resource groups ----------------------------------------------------------------------


@json_errors
async def list_groups(request: web.Request) -> web.Response:
    return json_response(sorted(request.app[DAEMON].config.effective.groups))


@json_errors
async def get_group(request: web.Request) -> web.Response:
    name = _group_name(request)
    group = request.app[DAEMON].config.effective.groups.get(name)
    if group is None:
        raise _missing_group(name)
    return json_response(group.to_admin())


@json_errors
async def put_group(request: web.Request) -> web.Response:
    """Create or update (Pulsar's createOrUpdate): absent or null fields keep their value
    (-1 on create). Unknown fields are ignored as Pulsar ignores them, and named in a
    warning log line and response headers, so a misspelt limit is still visible."""
    _authorize_write(request)
    daemon = request.app[DAEMON]
    name = _group_name(request)
    body = parse_json(await read_body(request, daemon.settings.http_idle_timeout))
    base = daemon.config.effective.groups.get(name)
    try:
        group = ResourceGroup.from_admin(name, body, base=base, strict=False)
    except InvalidGroup as exc:
        raise bad_request(str(exc)) from None
    headers = None
    ignored = unknown_fields(body)
    if ignored:
        log.warning("PUT resource group %r: ignored unknown fields %s (known: %s)",
                    name, ", ".join(map(repr, ignored)), ", ".join(GROUP_FIELDS))
        headers = _ignored_headers(ignored)
    return await _submit(daemon, f"group/{name}", group.to_admin(), headers)


@json_errors
async def delete_group(request: web.Request) -> web.Response:
    _authorize_write(request)
    daemon = request.app[DAEMON]
    name = _group_name(request)
    reg = daemon.config.effective
    if name not in reg.groups:
        raise _missing_group(name)
    users = reg.namespaces_of(name)
    if users:
        raise ApiError(412, f"resource group {name!r} is still attached to {', '.join(users[:5])}", RG_IN_USE)
    return await _submit(daemon, f"group/{name}", None)


@json_errors
async def group_stats(request: web.Request) -> web.Response:
    daemon = request.app[DAEMON]
    name = _group_name(request)
    group = daemon.config.effective.groups.get(name)
    if group is None:
        raise _missing_group(name)
    return json_response(daemon.group_stats(group))


# -- attachments --------------------------------------------------------------------------


def _attachment(request: web.Request) -> tuple[str, str]:
    """(config key, subject) for a topic, namespace or tenant route."""
    info = request.match_info
    if "topic" in info:
        domain = request.path.removeprefix(PREFIX + "/").partition("/")[0]
        subject = f"{domain}://{info['tenant']}/{info['namespace']}/{info['topic']}"
        return f"topic/{_checked('topic', lambda w, v: check_topic(v, w), subject)}", subject
    if "namespace" in info:
        subject = f"{info['tenant']}/{info['namespace']}"
        return f"namespace/{_checked('namespace', lambda w, v: check_namespace(v, w), subject)}", subject
    subject = _checked("tenant", check_name, info["tenant"])
    return f"tenant/{subject}", subject


def _bare_name(name: str | None) -> web.Response:
    """Pulsar answers a String as the bare text (Jackson leaves String to Jersey's plain
    writer) under Content-Type application/json, and 204 for none."""
    if not name:
        return web.Response(status=204)
    return web.Response(body=name.encode(), content_type="application/json")


@json_errors
async def get_attachment(request: web.Request) -> web.Response:
    key, subject = _attachment(request)
    reg = request.app[DAEMON].config.effective
    kind = key.partition("/")[0]
    if kind == "topic" and request.query.get("applied", "false").lower() == "true":
        return _bare_name(reg.applied_to_topic(subject))
    return _bare_name(getattr(reg, ATTACHMENT_TABLES[kind]).get(subject))


async def _attach(request: web.Request, key: str, name: str) -> web.Response:
    daemon = request.app[DAEMON]
    if name not in daemon.config.effective.groups:
        raise ApiError(412, f"resource group {name!r} does not exist", RG_MISSING)
    return await _submit(daemon, key, name)


@json_errors
async def set_attachment(request: web.Request) -> web.Response:
    _authorize_write(request)
    key, _ = _attachment(request)
    return await _attach(request, key, _group_name(request))


@json_errors
async def delete_attachment(request: web.Request) -> web.Response:
    """204 every time, as Pulsar's remove (it sets the policy to null)."""
    _authorize_write(request)
    key, _ = _attachment(request)
    return await _submit(request.app[DAEMON], key, None)


@json_errors
async def post_topic_attachment(request: web.Request) -> web.Response:
    """Pulsar's topic-policy call: the group name is the body (bare, as the Java client's
    String entity is written; a JSON string is accepted too); an empty or null body
    removes the attachment (the client's removeResourceGroup sends null)."""
    _authorize_write(request)
    key, _ = _attachment(request)
    timeout = request.app[DAEMON].settings.http_idle_timeout
    raw = (await read_body(request, timeout)).decode("utf-8", "replace").strip()
    if raw.startswith('"'):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise bad_request(f"body: malformed JSON string: {exc}") from None
    if raw in ("", "null"):
        return await _submit(request.app[DAEMON], key, None)
    return await _attach(request, key, _checked("resource group", check_name, raw))


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(f"{PREFIX}/resourcegroups", list_groups)
    r.add_get(f"{PREFIX}/resourcegroups/{{name}}", get_group)
    r.add_put(f"{PREFIX}/resourcegroups/{{name}}", put_group)
    r.add_delete(f"{PREFIX}/resourcegroups/{{name}}", delete_group)
    r.add_get(f"{PREFIX}/resourcegroups/{{name}}/stats", group_stats)  # rgd extension
    # Namespaces (Pulsar) and tenants (rgd extension): GET / DELETE the attachment, POST
    # (PUT: rgd's alias) to attach.
    for base in (f"{PREFIX}/namespaces/{{tenant}}/{{namespace}}/resourcegroup",
                 f"{PREFIX}/tenants/{{tenant}}/resourcegroup"):
        r.add_get(base, get_attachment)
        r.add_delete(base, delete_attachment)
        r.add_post(f"{base}/{{name}}", set_attachment)
        r.add_put(f"{base}/{{name}}", set_attachment)
    # Topics (Pulsar's topic policies): GET [?applied=true], POST the name (empty = remove).
    for domain in TOPIC_DOMAINS:
        topic = f"{PREFIX}/{domain}/{{tenant}}/{{namespace}}/{{topic}}/resourceGroup"
        r.add_get(topic, get_attachment)
        r.add_post(topic, post_topic_attachment)


__all__ = ["CLIENT_ADDRESS_HEADER", "FORWARDED", "IGNORED_HEADER", "PREFIX", "RG_IN_USE", "RG_MISSING", "add_routes",
           "client_address"]
