"""The two carriers of the cluster link behave alike: order kept, the end read after what
was sent, and `drain()` waiting while the other side has not taken what it was sent.

Here the socket link, over a real socketpair; the thread link is in tests/unit/test_process_link.py.
"""

from __future__ import annotations

import socket

import pytest

from rgd.daemon.process_link import LinkClosed, SocketLink


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
