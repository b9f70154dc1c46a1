"""A lean HTTP/1.1 load generator for bench/bench_batch.py: TCP or unix socket, closed or open loop.

Why not wrk: wrk speaks TCP only and runs closed loop only; the unix-socket vs
TCP comparison needs one generator for both, and latency "at 50 % of the
maximum load" needs a fixed offered rate. Why not aiohttp's client: at ~100 us
of client CPU per request it saturates before rgd does. This one writes a
prebuilt request on kept-alive connections and parses only the status line and
Content-Length (asyncio Protocols on uvloop), ~15 us of client CPU a request.

    python bench/raw_load.py --target tcp:127.0.0.1:8080 --body-file b.json --duration 5 [--rate 3000]

Prints one line `BENCH_JSON {...}`: requests, seconds, non_2xx, errors, latency
percentiles (us) measured from the moment a request was written to the moment
its whole answer was read, and, open loop, the rate actually offered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

__all__ = ["run"]

MAX_REQUESTS = 50_000_000  # a bound on any run


class _Conn(asyncio.Protocol):
    """One kept-alive connection with at most one request in flight."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.need = -1
        self.status = 0
        self.waiter: asyncio.Future[int] | None = None
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection lost"))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if self.need < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).lower()
            self.status = int(head[9:12])
            length = 0
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                eol = head.find(b"\r\n", at + 2)
                length = int(head[at + 17:eol if eol >= 0 else len(head)])
            self.need = end + 4 + length
        if len(buf) >= self.need:
            del buf[:self.need]
            self.need = -1
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(self.status)

    async def send(self, request: bytes) -> int:
        self.waiter = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(request)
        return await self.waiter


async def _connect(target: str) -> _Conn:
    loop = asyncio.get_running_loop()
    if target.startswith("unix:"):
        _, conn = await loop.create_unix_connection(_Conn, target[5:])
    else:
        host, _, port = target.removeprefix("tcp:").rpartition(":")
        _, conn = await loop.create_connection(_Conn, host, int(port))
    return conn


def request_bytes(body: bytes, path: str = "/v1/acquire") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def run(target: str, body: bytes, duration: float, connections: int, rate: float = 0.0) -> dict:
    """Closed loop (rate 0: each connection sends again as soon as answered) or open
    loop (`rate` requests/s spread over the connections, each on its own schedule)."""
    request = request_bytes(body)
    conns = [await _connect(target) for _ in range(connections)]
    latencies: list[float] = []
    counts = {"non_2xx": 0, "errors": 0}
    started = time.perf_counter()
    deadline = started + duration
    perf = time.perf_counter

    async def worker(i: int, conn: _Conn) -> None:
        record = latencies.append
        interval = connections / rate if rate > 0 else 0.0
        due = started + (i / connections) * interval
        while len(latencies) < MAX_REQUESTS:
            if interval:
                due += interval
                wait = due - perf()
                if wait > 0:
                    await asyncio.sleep(wait)
            t0 = perf()
            if t0 >= deadline:
                return
            try:
                status = await conn.send(request)
            except ConnectionError:
                counts["errors"] += 1
                return
            record(perf() - t0)
            if status >= 300:
                counts["non_2xx"] += 1

    await asyncio.gather(*(worker(i, c) for i, c in enumerate(conns)))
    elapsed = perf() - started
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    latencies.sort()

    def pct(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1e6, 1) if latencies else 0.0

    return {"requests": len(latencies), "seconds": round(elapsed, 3), "req_per_s": round(len(latencies) / elapsed, 1),
            "offered_per_s": rate or None, "non_2xx": counts["non_2xx"], "errors": counts["errors"],
            "p50_us": pct(50), "p90_us": pct(90), "p99_us": pct(99), "p999_us": pct(99.9),
            "max_us": round(latencies[-1] * 1e6, 1) if latencies else 0.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="tcp:127.0.0.1:PORT or unix:/path.sock")
    p.add_argument("--body-file", required=True)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--rate", type=float, default=0.0,
                   help="requests/s, open loop (0: closed loop, as fast as answered)")
    a = p.parse_args(argv)
    if not (a.target.startswith("unix:") or a.target.startswith("tcp:127.0.0.1:")):
        p.error("--target: loopback TCP or a unix socket only")
    if not 0 < a.duration <= 600 or not 1 <= a.connections <= 1000:
        p.error("--duration must be 0..600 s and --connections 1..1000")
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    summary = runner(run(a.target, Path(a.body_file).read_bytes(), a.duration, a.connections, a.rate))
    print("BENCH_JSON " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
