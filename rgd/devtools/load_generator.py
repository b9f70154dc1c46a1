"""Synthetic broker load: offered messages per second to one daemon's /v1/acquire.

Used by `rgd up`, the integration tests and the soak script. Each stream asks
every `step` seconds, one `rgd.client` call per message as a broker would make
them (the client coalesces each step's calls into batch requests, so the
limiter still decides per message), and counts what was admitted per
wall-clock second, which is what "cluster admission per tick" is measured on.
Bounded by construction: every loop stops at its deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from rgd.client import SOURCE_DAEMON, Client

__all__ = ["RateFn", "Stream", "StreamStats", "constant", "drive", "run_streams"]

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
    client: Client, stream: Stream, stats: StreamStats, t0: float, deadline: float, step: float = 0.05,
) -> None:
    """Offer `stream.rate(t)` messages/s until `deadline` (monotonic). Answers the
    client made up because the daemon was unreachable count as errors, not admissions."""
    owed = 0.0
    next_at = time.monotonic()
    ask = client.acquire
    while True:
        now = time.monotonic()
        if now >= deadline:
            return
        owed += max(0.0, stream.rate(now - t0)) * step
        n = min(int(owed), 1000)
        owed -= n
        if n:
            second = int(now - t0)
            stats.offered[second] += n
            answers = await asyncio.gather(
                *(ask(stream.namespace, stream.kind, 1, stream.bytes_per_message) for _ in range(n)))
            stats.admitted[second] += sum(1 for a in answers if a.allowed and a.source == SOURCE_DAEMON)
            stats.errors += sum(1 for a in answers if a.source != SOURCE_DAEMON)
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
    # One client per daemon. max_hold=0: every ask reaches the daemon, which counts the
    # denied ones as demand; a broker may prefer the client's Retry-After holds.
    clients = {url: Client(url, timeout=10.0, max_hold=0.0) for url in {s.url for s in streams}}
    try:
        await asyncio.gather(*(drive(clients[s.url], s, st, t0, deadline) for s, st in zip(streams, stats)))
    finally:
        for client in clients.values():
            await client.close()
    return stats


def constant(rate: float) -> RateFn:
    return lambda _t: rate

