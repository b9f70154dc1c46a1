"""Operations routes: /metrics, /healthz, /readyz, /openapi.json."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from importlib import resources

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from rgd.api.daemon_view import DAEMON
from rgd.api.errors import json_errors, json_response


def openapi_bytes() -> bytes:
    return resources.files("rgd.api").joinpath("openapi.json").read_bytes()


@json_errors
async def metrics(request: web.Request) -> web.StreamResponse:
    # Rendered in a worker thread: with thousands of groups (and every peer's entry of each in
    # rgd_peer_usage_rate) a scrape is ~10^5 samples, a second of Python that would otherwise
    # hold up every ask. The collectors read the daemon's dicts through list() copies, each
    # taken whole under the GIL, so the loop may go on changing them meanwhile. Streamed a
    # family at a time, so a scrape never holds all of its samples and text at once.
    if request.method == "HEAD":  # headers only: a streamed body would be written to the wire
        return web.Response(headers={"Content-Type": CONTENT_TYPE_LATEST})
    daemon = request.app[DAEMON]
    daemon.refresh_liveness()  # on the loop, before the render thread reads the gauges
    return await stream_chunks(request, daemon.metrics.chunks())


async def stream_chunks(request: web.Request, chunks: Iterator[bytes]) -> web.StreamResponse:
    """Answer with the exposition `chunks`, each made in a worker thread."""
    first = await asyncio.to_thread(next, chunks, None)
    resp = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE_LATEST})
    await resp.prepare(request)  # after the first chunk: a collector that fails at once is still a 500
    chunk = first
    while chunk is not None:
        await resp.write(chunk)
        chunk = await asyncio.to_thread(next, chunks, None)
    await resp.write_eof()
    return resp


@json_errors
async def healthz(request: web.Request) -> web.Response:
    """Alive: the event loop answers. Restarting would not fix a broker outage, so
    liveness does not depend on it (readiness does)."""
    return json_response({"status": "ok"})


@json_errors
async def readyz(request: web.Request) -> web.Response:
    ready, detail = request.app[DAEMON].readiness()
    return json_response({"ready": ready, **detail}, 200 if ready else 503)


@json_errors
async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=openapi_bytes(), content_type="application/json")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/openapi.json", openapi)
