"""Operator routes in Pulsar's admin v2 shapes, so `pulsar-admin` users feel at home.

Writes become versioned `ConfigChange`s: applied here at once and published on
the config topic so every daemon applies them (cluster-wide config).
Auth: with tokens configured, writes need `Authorization: Bearer <token>`
(401 without, 403 wrong); without tokens, writes are accepted from loopback
only. Reads are open, like the broker routes.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from rgd.api.broker import DAEMON
from rgd.api.errors import ApiError, bad_request, json_errors, json_response
from rgd.api.requests import parse_json
from rgd.config_store import ConfigChange
from rgd.groups import InvalidGroup, ResourceGroup, check_name, check_namespace

if TYPE_CHECKING:
    from rgd.daemon import Daemon

PREFIX = "/admin/v2"


def _authorize_write(request: web.Request) -> None:
    daemon = request.app[DAEMON]
    tokens = daemon.admin_tokens
    if not tokens:
        try:
            loopback = ipaddress.ip_address(request.remote or "").is_loopback
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


def _group_name(request: web.Request) -> str:
    try:
        return check_name("resource group", request.match_info["name"])
    except InvalidGroup as exc:
        raise bad_request(str(exc)) from None


async def _submit(daemon: "Daemon", key: str, value: Any) -> web.Response:
    """204 when the change is in force here and on its way to every daemon; 202 when
    Pulsar is unreachable: in force here, queued for the others."""
    change = ConfigChange(key, value, int(time.time() * 1000), daemon.settings.id)
    if await daemon.submit_change(change):
        return web.Response(status=204)
    return json_response(
        {"status": "applied on this daemon; queued for the cluster until Pulsar is reachable"}, 202
    )


@json_errors
async def list_groups(request: web.Request) -> web.Response:
    return json_response(sorted(request.app[DAEMON].config.effective.groups))


@json_errors
async def get_group(request: web.Request) -> web.Response:
    name = _group_name(request)
    group = request.app[DAEMON].config.effective.groups.get(name)
    if group is None:
        raise ApiError(404, f"resource group {name!r} does not exist")
    return json_response(group.to_admin())


@json_errors
async def put_group(request: web.Request) -> web.Response:
    _authorize_write(request)
    daemon = request.app[DAEMON]
    name = _group_name(request)
    body = parse_json(await request.read())
    base = daemon.config.effective.groups.get(name)
    try:
        group = ResourceGroup.from_admin(name, body, base=base)
    except InvalidGroup as exc:
        raise bad_request(str(exc)) from None
    return await _submit(daemon, f"group/{name}", group.to_admin())


@json_errors
async def delete_group(request: web.Request) -> web.Response:
    _authorize_write(request)
    daemon = request.app[DAEMON]
    name = _group_name(request)
    reg = daemon.config.effective
    if name not in reg.groups:
        raise ApiError(404, f"resource group {name!r} does not exist")
    users = reg.namespaces_of(name)
    if users:
        raise ApiError(409, f"resource group {name!r} is still attached to {', '.join(users[:5])}")
    return await _submit(daemon, f"group/{name}", None)


@json_errors
async def group_stats(request: web.Request) -> web.Response:
    daemon = request.app[DAEMON]
    name = _group_name(request)
    group = daemon.config.effective.groups.get(name)
    if group is None:
        raise ApiError(404, f"resource group {name!r} does not exist")
    return json_response(daemon.group_stats(group))


def _attachment(request: web.Request) -> tuple[str, str, dict[str, str]]:
    """(config key, subject, table) for a namespace or tenant route."""
    info = request.match_info
    try:
        if "namespace" in info:
            subject = check_namespace(f"{info['tenant']}/{info['namespace']}")
            return f"namespace/{subject}", subject, request.app[DAEMON].config.effective.namespaces
        subject = check_name("tenant", info["tenant"])
        return f"tenant/{subject}", subject, request.app[DAEMON].config.effective.tenants
    except InvalidGroup as exc:
        raise bad_request(str(exc)) from None


@json_errors
async def get_attachment(request: web.Request) -> web.Response:
    _, subject, table = _attachment(request)
    group = table.get(subject)
    if group is None:
        raise ApiError(404, f"{subject} has no resource group")
    return json_response(group)


@json_errors
async def set_attachment(request: web.Request) -> web.Response:
    _authorize_write(request)
    daemon = request.app[DAEMON]
    key, _, _ = _attachment(request)
    name = _group_name(request)
    if name not in daemon.config.effective.groups:
        raise ApiError(404, f"resource group {name!r} does not exist")
    return await _submit(daemon, key, name)


@json_errors
async def delete_attachment(request: web.Request) -> web.Response:
    _authorize_write(request)
    key, subject, table = _attachment(request)
    if subject not in table:
        raise ApiError(404, f"{subject} has no resource group")
    return await _submit(request.app[DAEMON], key, None)


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(f"{PREFIX}/resourcegroups", list_groups)
    r.add_get(f"{PREFIX}/resourcegroups/{{name}}", get_group)
    r.add_put(f"{PREFIX}/resourcegroups/{{name}}", put_group)
    r.add_delete(f"{PREFIX}/resourcegroups/{{name}}", delete_group)
    r.add_get(f"{PREFIX}/resourcegroups/{{name}}/stats", group_stats)
    for base in (f"{PREFIX}/namespaces/{{tenant}}/{{namespace}}/resourcegroup", f"{PREFIX}/tenants/{{tenant}}/resourcegroup"):
        r.add_get(base, get_attachment)
        r.add_delete(base, delete_attachment)
        r.add_post(f"{base}/{{name}}", set_attachment)
        r.add_put(f"{base}/{{name}}", set_attachment)
