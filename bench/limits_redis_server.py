"""Baseline (c): what a Python team would build today instead of rgd.

The `limits` library's async API (`limits.aio.strategies`, fixed window by
default: its default strategy and the one whose Redis cost does not grow with
the limit) over `limits.aio.storage.RedisStorage` (coredis, the client the
`limits[async-redis]` extra installs), behind the same aiohttp setup as rgd.
One `hit` per ask, cost = the ask's messages; a batch fires its hits
concurrently (asyncio.gather), the idiomatic way to overlap Redis round trips.
A denied single ask answers 429 with Retry-After from `get_window_stats`.

    python bench/limits_redis_server.py --listen 127.0.0.1:8082 \
        --redis 127.0.0.1:6390 --rate bench=1000000000 --rate tight=100
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from pathlib import Path

import orjson
from aiohttp import web
from limits import RateLimitItemPerSecond
from limits.aio.storage import RedisStorage
from limits.aio.strategies import FixedWindowRateLimiter, RateLimiter, SlidingWindowCounterRateLimiter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trivial_server import base_parser, readyz, run, serve

STRATEGIES = {"fixed": FixedWindowRateLimiter, "sliding": SlidingWindowCounterRateLimiter}
LIMITER = web.AppKey("limiter", RateLimiter)
ITEMS = web.AppKey("items", dict)


def _error(status: int, message: str) -> web.Response:
    return web.Response(body=orjson.dumps({"error": message}), status=status, content_type="application/json")


async def _decide(limiter: RateLimiter, items: dict, ask: dict) -> dict:
    ns = ask["namespace"]
    tenant = ns.partition("/")[0]
    item = items.get(tenant)
    if item is None:
        return {"allowed": True, "group": None, "unlimited": True}
    kind = ask.get("kind", "publish")
    if await limiter.hit(item, ns, kind, cost=ask.get("messages", 1)):
        return {"allowed": True, "group": tenant}
    stats = await limiter.get_window_stats(item, ns, kind)
    retry_ms = max(1, math.ceil((stats.reset_time - time.time()) * 1000))
    return {"allowed": False, "group": tenant, "retry_after_ms": retry_ms, "reason": "message_rate"}


async def acquire(request: web.Request) -> web.Response:
    limiter, items = request.app[LIMITER], request.app[ITEMS]
    try:
        doc = orjson.loads(await request.read())
        if type(doc) is dict and "requests" in doc:
            results = await asyncio.gather(*(_decide(limiter, items, a) for a in doc["requests"]))
            return web.Response(body=orjson.dumps({"results": results}), content_type="application/json")
        result = await _decide(limiter, items, doc)
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        return _error(400, f"bad request: {exc!r}")
    if result["allowed"]:
        return web.Response(body=orjson.dumps(result), content_type="application/json")
    retry_s = str(max(1, math.ceil(result["retry_after_ms"] / 1000)))
    return web.Response(body=orjson.dumps(result), status=429, content_type="application/json",
                        headers={"Retry-After": retry_s})


def _rate(text: str) -> tuple[str, int]:
    tenant, sep, value = text.partition("=")
    if not sep or not tenant:
        raise SystemExit(f"--rate: expected TENANT=MESSAGES_PER_SECOND, got {text!r}")
    return tenant, int(float(value))


async def _main(listen: str, redis: str, strategy: str, rates: dict[str, int]) -> None:
    storage = RedisStorage(f"async+redis://{redis}")
    if not await storage.check():
        raise SystemExit(f"redis at {redis} does not answer")
    app = web.Application(client_max_size=1024 * 1024)
    app[LIMITER] = STRATEGIES[strategy](storage)
    app[ITEMS] = {tenant: RateLimitItemPerSecond(n) for tenant, n in rates.items()}
    app.router.add_post("/v1/acquire", acquire)
    app.router.add_get("/readyz", readyz)
    await serve(app, listen)


def main(argv: list[str] | None = None) -> None:
    p = base_parser("Baseline (c): limits + Redis behind aiohttp for POST /v1/acquire")
    p.add_argument("--redis", required=True, help="HOST:PORT of the Redis server (loopback)")
    p.add_argument("--strategy", choices=sorted(STRATEGIES), default="fixed")
    p.add_argument("--rate", action="append", default=[], metavar="TENANT=N",
                   help="messages per second per namespace of TENANT (repeatable); other tenants are unlimited")
    args = p.parse_args(argv)
    run(_main(args.listen, args.redis, args.strategy, dict(map(_rate, args.rate))), args.uvloop)


if __name__ == "__main__":
    main()
