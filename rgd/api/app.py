"""The aiohttp application: one app, three route modules, JSON errors everywhere."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from rgd.api import admin, broker, ops
from rgd.api.errors import json_errors

if TYPE_CHECKING:
    from rgd.daemon import Daemon

MAX_BODY = 1024 * 1024  # 1000 asks of ~200 bytes fit with room to spare


def build_app(daemon: "Daemon") -> web.Application:
    app = web.Application(middlewares=[json_errors], client_max_size=MAX_BODY)
    app[broker.DAEMON] = daemon
    broker.add_routes(app)
    admin.add_routes(app)
    ops.add_routes(app)
    return app
