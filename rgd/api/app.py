"""The aiohttp application: one app, three route modules, JSON errors everywhere.

No middleware on purpose: errors become JSON through the `json_errors` route
decorator and the catch-all `no_route` (see rgd/api/errors.py), which keeps the
single-acquire path free of per-request middleware frames.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from rgd.api import admin, broker, ops
from rgd.api.errors import add_fallback_route

if TYPE_CHECKING:
    from rgd.daemon import Daemon

MAX_BODY = 1024 * 1024  # 1000 asks of ~200 bytes fit with room to spare


def build_app(daemon: "Daemon") -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app[broker.DAEMON] = daemon
    broker.add_routes(app)
    admin.add_routes(app)
    ops.add_routes(app)
    add_fallback_route(app)  # last: JSON 404/405 for everything the routes above do not take
    return app
