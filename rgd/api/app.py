"""The aiohttp application: one app, three route modules, JSON errors everywhere.

No middleware on purpose: errors become JSON through the `json_errors` route
decorator and the catch-all `no_route` (see rgd/api/errors.py), which keeps the
single-acquire path free of per-request middleware frames.
"""

from __future__ import annotations

from aiohttp import web

from rgd.api import admin, broker, ops
from rgd.api.body import MAX_BODY
from rgd.api.daemon_view import ASKS, DAEMON, RoutesView
from rgd.api.errors import add_fallback_route


def build_app(daemon: RoutesView, forwarded: bool = False) -> web.Application:
    """`forwarded`: requests reach this app only through the serving process of
    `--cluster-process`, which names each one's client (rgd.api.admin.client_address)."""
    app = web.Application(client_max_size=MAX_BODY)
    app[ASKS] = daemon
    app[DAEMON] = daemon
    app[admin.FORWARDED] = forwarded
    broker.add_routes(app)
    admin.add_routes(app)
    ops.add_routes(app)
    add_fallback_route(app)  # last: JSON 404/405 for everything the routes above do not take
    return app
