"""Synthetic broker load: offered messages per second to one daemon's /v1/acquire.

Used by `rgd up`, the integration tests and the soak script. Each stream asks
in batches every `step` seconds (one ask per message, so the limiter decides
per message as it would for a broker) and counts what was admitted per
wall-clock second, which is what "cluster admission per tick" is measured on.
Bounded by construction: every loop stops at its deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import aiohttp

RateFn = Callable[[float], float]  # seconds since start -> offered messages/s


@dataclass
class Stream:
    url: str  # daemon base URL
    namespace: str
    rate: RateFn
    kind: str = "publish"
    bytes_per_message: int = 100
    label: str = ""


@dataclass
class StreamStats:
    admitted: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # second -> msgs
    offered: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    errors: int = 0

    def admitted_between(self, start: int, end: int) -> int:
        return sum(n for s, n in self.admitted.items() if start <= s < end)


async def drive(
    session: aiohttp.ClientSession, stream: Stream, stats: StreamStats, t0: float, deadline: float,
    step: float = 0.05,
) -> None:
    """Offer `stream.rate(t)` messages/s until `deadline` (monotonic)."""
    owed = 0.0
    next_at = time.monotonic()
    url = stream.url + "/v1/acquire"
    while True:
        now = time.monotonic()
        if now >= deadline:
            return
        owed += max(0.0, stream.rate(now - t0)) * step
        n = min(int(owed), 1000)
        owed -= n
        if n:
            ask = {"namespace": stream.namespace, "kind": stream.kind, "messages": 1,
                   "bytes": stream.bytes_per_message}
            second = int(now - t0)
            stats.offered[second] += n
            try:
                async with session.post(url, json={"requests": [ask] * n}) as resp:
                    if resp.status == 200:
                        results = (await resp.json())["results"]
                        stats.admitted[second] += sum(1 for r in results if r["allowed"])
                    else:
                        stats.errors += 1
            except (aiohttp.ClientError, asyncio.TimeoutError):
                stats.errors += 1
        next_at += step
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def run_streams(
    streams: list[Stream], duration: float, t0: float | None = None, stats: list[StreamStats] | None = None,
) -> list[StreamStats]:
    """Drive all streams concurrently for `duration` seconds; returns their stats (pass
    `stats` to watch them fill while the load runs)."""
    t0 = time.monotonic() if t0 is None else t0
    deadline = time.monotonic() + duration
    stats = stats if stats is not None else [StreamStats() for _ in streams]
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
        await asyncio.gather(*(drive(session, s, st, t0, deadline) for s, st in zip(streams, stats)))
    return stats


def constant(rate: float) -> RateFn:
    return lambda _t: rate

