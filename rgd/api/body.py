"""Reading a request body within a deadline, so a body that trickles in cannot hold a
connection for ever.

aiohttp closes a connection that is idle, or still sending its headers, after the
keep-alive timeout (`--http-idle-timeout`); but once the headers are in, the
handler's `request.read()` waits for the body as long as the client takes, and
aiohttp has no body-read timeout. A client sending a byte every few seconds
(slowloris) would hold the connection, its descriptor and a handler task
indefinitely. Here the whole body must arrive within that same timeout of the
headers; otherwise the answer is 408 and the connection is closed (aiohttp still
reads and discards what arrives for its lingering time, 10 s, then closes).

A body that came with its headers, as every acquire from a broker does (a few
hundred bytes, one segment), is read at once without a timer: /v1/acquire
inlines the `is_eof()` check and calls `read_slow_body` only when the body is
not all there yet.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from rgd.api.errors import ApiError

__all__ = ["MAX_BODY", "BodyTimeout", "read_body", "read_slow_body"]

MAX_BODY = 1024 * 1024  # the largest request body: 1000 asks of ~200 bytes fit with room to spare


class BodyTimeout(ApiError):
    """The body did not arrive in time: 408, and the connection closes."""

    close_connection = True

    def __init__(self, seconds: float, received: int) -> None:
        super().__init__(408, f"request body not received within {seconds:g} s of the headers "
                              f"({received} bytes arrived); closing the connection")


async def read_slow_body(request: web.Request, seconds: float) -> bytes:
    """The body of a request whose body is not all there yet, within `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            return await request.read()
    except TimeoutError:
        raise BodyTimeout(seconds, request.content.total_bytes) from None


async def read_body(request: web.Request, seconds: float) -> bytes:
    """The request body, within `seconds` (`--http-idle-timeout`) of the headers."""
    if request.content.is_eof():
        return await request.read()
    return await read_slow_body(request, seconds)
