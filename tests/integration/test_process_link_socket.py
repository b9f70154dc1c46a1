"""The two carriers of the cluster link behave alike: order kept, the end read after what
was sent, and `drain()` waiting while the other side has not taken what it was sent.

Here the socket link, over a real socketpair; the thread link is in tests/unit/test_process_link.py.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from rgd.daemon.process_link import LinkClosed, SocketLink


def _other_loop(coroutine_fn):
    """Run `coroutine_fn()` on an event loop of its own in another thread; its result or error."""
    out: dict = {}

    def body() -> None:
        try:
            out["result"] = asyncio.run(coroutine_fn())
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, out


async def test_a_socket_link_carries_copies_and_ends_the_same_way() -> None:
    a, b = socket.socketpair()
    ours, theirs = await SocketLink.open(a), await SocketLink.open(b)
    message = ("config", {"groups": ["gold"]})
    ours.send(message)
    await ours.drain()
    got = await theirs.receive()
    assert got == message and got is not message
    ours.close()
    with pytest.raises(LinkClosed):
        await theirs.receive()
    theirs.close()
