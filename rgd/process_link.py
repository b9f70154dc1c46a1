"""Messages between the two processes of `rgd run --cluster-process`, over a socketpair.

A message is a 4-byte big-endian length and a pickle. Pickle, because both ends are
this package in the same interpreter and the messages are its own objects (settings,
the group registry, limiter counts and operations); nothing from the network is ever
unpickled: the socketpair is made by the serving process and inherited only by the
cluster process it starts.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from typing import Any

_LENGTH = struct.Struct(">I")
MAX_MESSAGE = 1 << 30  # a 100 000-group registry pickles to tens of MB; past this, the peer is broken


class LinkClosed(Exception):
    """The other process closed the link (it stopped or died)."""


def send(writer: asyncio.StreamWriter, message: Any) -> None:
    """Queue one message (await `writer.drain()` to wait until it is out)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_LENGTH.pack(len(data)) + data)


async def receive(reader: asyncio.StreamReader) -> Any:
    try:
        (n,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
        if n > MAX_MESSAGE:
            raise LinkClosed(f"a message of {n} bytes: the link is corrupt")
        return pickle.loads(await reader.readexactly(n))
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise LinkClosed(str(exc) or "end of stream") from None


__all__ = ["LinkClosed", "receive", "send"]
