"""The two carriers of the cluster link behave alike: order kept, the end read after what
was sent, and `drain()` waiting while the other side has not taken what it was sent.

Here the thread link; the socket link (a real socketpair) is in tests/integration/test_process_link_socket.py.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from rgd.daemon.process_link import HIGH_WATER, LinkClosed, thread_link


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


async def test_a_thread_link_hands_over_the_objects_themselves_in_order() -> None:
    ours, theirs = thread_link()
    sent = [("counts", [("g", "publish", i)]) for i in range(50)]

    async def echo() -> int:
        n = 0
        while True:
            try:
                message = await theirs.receive()
            except LinkClosed:
                return n
            theirs.send(message)
            await theirs.drain()
            n += 1

    t, out = _other_loop(echo)
    for m in sent:
        ours.send(m)
    back = [await asyncio.wait_for(ours.receive(), 5) for _ in sent]
    assert back == sent and all(a is b for a, b in zip(back, sent))  # not copies
    ours.close()
    await asyncio.to_thread(t.join, 5)
    assert out == {"result": len(sent)}


async def test_what_was_sent_before_the_close_is_read_then_the_end() -> None:
    ours, theirs = thread_link()
    theirs.send(("ready",))
    theirs.send(("ops", []))
    theirs.close()
    assert await ours.receive() == ("ready",)
    assert await ours.receive() == ("ops", [])
    with pytest.raises(LinkClosed):
        await ours.receive()
    ours.send(("stop",))  # to a closed link: dropped, as a write to a closed socket
    await ours.drain()  # and never waits


async def test_a_receive_waiting_in_another_thread_wakes_at_the_close() -> None:
    ours, theirs = thread_link()
    t, out = _other_loop(theirs.receive)
    await asyncio.sleep(0.1)  # deliberate: time for the other thread to block in receive() (nothing to poll)
    ours.close()
    await asyncio.to_thread(t.join, 5)
    assert isinstance(out.get("error"), LinkClosed)


async def test_drain_waits_until_the_other_side_takes_its_messages() -> None:
    ours, theirs = thread_link()
    for i in range(HIGH_WATER + 3):
        ours.send(i)
    drained = asyncio.ensure_future(ours.drain())
    await asyncio.sleep(0.1)  # deliberate: time passes, and nothing may happen
    assert not drained.done()  # nobody has taken any

    async def take_some() -> list:
        return [await theirs.receive() for _ in range(4)]

    t, out = _other_loop(take_some)
    await asyncio.wait_for(drained, 5)
    await asyncio.to_thread(t.join, 5)
    assert out["result"] == [0, 1, 2, 3]
    ours.close()


