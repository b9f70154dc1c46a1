"""The link between the two halves of `rgd run --cluster-process` / `--cluster-thread`.

Messages are tuples of this package's own objects (settings, the group registry,
limiter counts and operations). Two carriers, one interface (`Link`):

- `SocketLink`, between two processes over a socketpair: a message is a 4-byte
  big-endian length and a pickle. Pickle, because both ends are this package in the
  same interpreter version; nothing from the network is ever unpickled: the socketpair
  is made by the serving process and inherited only by the cluster process it starts.
- `thread_link()`, between two threads (two event loops) of one process: a message is
  the object itself, handed to the other loop. Nothing is pickled, so nothing is copied:
  at PIP-82's scale the pickles cost the loop answering brokers ~17 ms a tick (the
  counts it hands over) and the unpickled copies of the group registry ~2.5 MB each
  (bench/scale_probe.py --daemon-arg=--cluster-thread). What is sent is never changed
  afterwards by its sender: counts and operations are taken out of the limiters, and
  a group registry in force is replaced whole, never edited (rgd.config.store).

Either way, `drain()` is the back-pressure: it waits while the other side has not
taken what was sent (a socket's buffer, or HIGH_WATER messages), so a slow receiver
makes the sender keep its counts merged rather than pile messages up.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
import threading
from collections import deque
from typing import Any, Protocol

_LENGTH = struct.Struct(">I")
MAX_MESSAGE = 1 << 30  # a 100 000-group registry pickles to tens of MB; past this, the peer is broken
HIGH_WATER = 4  # messages a thread link's sender may have out before `drain()` waits


class LinkClosed(Exception):
    """The other side closed the link (it stopped or died)."""


class Link(Protocol):
    def send(self, message: Any) -> None:
        """Queue one message (await `drain()` to wait until the other side has room)."""

    async def drain(self) -> None: ...

    async def receive(self) -> Any:
        """The next message; LinkClosed once the other side has closed and all is read."""

    def close(self) -> None:
        """The other side reads LinkClosed after what was sent; safe from any thread, and twice."""


# -- between processes ----------------------------------------------------------------------


class SocketLink:
    """One end of a socketpair, pickles on it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, sock: socket.socket) -> SocketLink:
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(reader, writer)

    def send(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self.writer.write(_LENGTH.pack(len(data)) + data)

    async def drain(self) -> None:
        await self.writer.drain()

    async def receive(self) -> Any:
        try:
            (n,) = _LENGTH.unpack(await self.reader.readexactly(_LENGTH.size))
            if n > MAX_MESSAGE:
                raise LinkClosed(f"a message of {n} bytes: the link is corrupt")
            return pickle.loads(await self.reader.readexactly(n))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise LinkClosed(str(exc) or "end of stream") from None

    def close(self) -> None:
        self.writer.close()


# -- between threads ------------------------------------------------------------------------


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Mailbox:
    """Messages to one side, put by the other side's thread, taken on this side's loop."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: deque[Any] = deque()
        self.closed = False
        self.receiver: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
        self.drainer: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    @staticmethod
    def _notify(waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None) -> None:
        if waiter is None:
            return
        loop, future = waiter
        try:
            loop.call_soon_threadsafe(_wake, future)
        except RuntimeError:  # that loop is closed: nobody waits any more
            pass

    def put(self, message: Any) -> None:
        with self.lock:
            if self.closed:
                return  # as a write to a closed socket: the other side is gone
            self.items.append(message)
            receiver, self.receiver = self.receiver, None
        self._notify(receiver)

    async def take(self) -> Any:
        loop = asyncio.get_running_loop()
        while True:
            with self.lock:
                if self.items:
                    message = self.items.popleft()
                    drainer = None
                    if len(self.items) < HIGH_WATER:
                        drainer, self.drainer = self.drainer, None
                    break
                if self.closed:
                    raise LinkClosed("the other side closed the link")
                waiter = loop.create_future()
                self.receiver = (loop, waiter)
            await waiter
        self._notify(drainer)
        return message

    async def room(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with self.lock:
                if len(self.items) < HIGH_WATER or self.closed:
                    return
                waiter = loop.create_future()
                self.drainer = (loop, waiter)
            await waiter

    def close(self) -> None:
        with self.lock:
            self.closed = True
            receiver, self.receiver = self.receiver, None
            drainer, self.drainer = self.drainer, None
        self._notify(receiver)
        self._notify(drainer)


class ThreadLink:
    """One end of a link between two threads of this process (see `thread_link`)."""

    def __init__(self, inbox: _Mailbox, outbox: _Mailbox) -> None:
        self._inbox = inbox
        self._outbox = outbox

    def send(self, message: Any) -> None:
        self._outbox.put(message)

    async def drain(self) -> None:
        await self._outbox.room()

    async def receive(self) -> Any:
        return await self._inbox.take()

    def close(self) -> None:
        self._outbox.close()
        self._inbox.close()


def thread_link() -> tuple[ThreadLink, ThreadLink]:
    """Two ends of one link: what one sends, the other receives, as the same object."""
    a, b = _Mailbox(), _Mailbox()
    return ThreadLink(a, b), ThreadLink(b, a)


__all__ = ["HIGH_WATER", "Link", "LinkClosed", "SocketLink", "ThreadLink", "thread_link"]
