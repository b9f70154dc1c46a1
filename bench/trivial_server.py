"""Baseline (a): the cheapest aiohttp handler that does rgd's I/O.

It reads the body, parses it with orjson (schema-free: rgd decodes with msgspec
against its schema, and orjson on its error path) and answers a
JSON document of the same shape and size as rgd's (per ask: allowed, group,
remaining messages and bytes), with no validation and no rate limiting.
rgd's single-ask throughput is held to >= 80 % of this.

The server plumbing (`serve`, `run`) is shared with limits_redis_server.py and
copies rgd.daemon.wiring's production setup: AppRunner without an access log, TCPSite
with a 1024 backlog, so the only difference measured is the handler.

    python bench/trivial_server.py --listen 127.0.0.1:8081 [--uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Awaitable, Callable, Coroutine

import orjson
from aiohttp import web

_REMAINING = 999_999_999


# -- shared plumbing ---------------------------------------------------------------------

def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (loopback only)")
    p.add_argument("--uvloop", action="store_true", help="run on uvloop instead of asyncio's loop")
    return p


def host_port(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
        raise SystemExit(f"--listen: {listen!r} is not a loopback address")
    return host.strip("[]"), int(port)


async def serve(app: web.Application, listen: str,
                on_stop: Callable[[], Awaitable[None]] | None = None) -> None:
    """Serve until SIGTERM/SIGINT, set up exactly as rgd.daemon.wiring sets up its HTTP server."""
    host, port = host_port(listen)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, backlog=1024)
    await site.start()
    try:
        await stop.wait()
    finally:
        if on_stop is not None:
            await on_stop()
        await runner.cleanup()


def run(main: Coroutine[None, None, None], use_uvloop: bool) -> None:
    if use_uvloop:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(main)


async def readyz(request: web.Request) -> web.Response:
    return web.Response(body=b'{"ready":true}', content_type="application/json")


# -- the trivial handler -----------------------------------------------------------------

def _answer(ask: object) -> dict:
    ns = ask.get("namespace") if type(ask) is dict else None
    return {"allowed": True, "group": ns, "remaining_messages": _REMAINING, "remaining_bytes": _REMAINING}


async def acquire(request: web.Request) -> web.Response:
    doc = orjson.loads(await request.read())
    if type(doc) is dict and "requests" in doc:
        out = {"results": [_answer(a) for a in doc["requests"]]}
    else:
        out = _answer(doc)
    return web.Response(body=orjson.dumps(out), content_type="application/json")


def build_app() -> web.Application:
    app = web.Application(client_max_size=1024 * 1024)
    app.router.add_post("/v1/acquire", acquire)
    app.router.add_get("/readyz", readyz)
    return app


def main(argv: list[str] | None = None) -> None:
    args = base_parser("Baseline (a): trivial orjson handler for POST /v1/acquire").parse_args(argv)
    run(serve(build_app(), args.listen), args.uvloop)


if __name__ == "__main__":
    main()
