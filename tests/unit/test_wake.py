"""sleep_until_woken: a loop built on it stops when its task is cancelled, whenever that comes."""

from __future__ import annotations

import asyncio

from rgd.daemon.wake import sleep_until_woken


async def _loop(event: asyncio.Event, rounds: list[int]) -> None:
    while True:
        await sleep_until_woken(event, 10.0)
        event.clear()
        rounds.append(1)


def test_a_cancellation_right_after_the_wake_stops_the_loop() -> None:
    """The event set, the sleeper resumed, then the cancel: with asyncio.wait_for on Python
    3.11 the cancel is lost and the loop goes on sleeping (tried: still running after 0.5 s)."""

    async def trial() -> bool:
        event, rounds = asyncio.Event(), []
        task = asyncio.create_task(_loop(event, rounds))
        await asyncio.sleep(0.01)
        event.set()
        await asyncio.sleep(0)
        task.cancel()
        _, pending = await asyncio.wait([task], timeout=0.5)
        for t in pending:
            t.cancel()
        return not pending

    assert asyncio.run(trial())


def test_it_returns_on_the_wake_or_at_the_deadline() -> None:
    async def trial() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        started = loop.time()
        await sleep_until_woken(event, 0.05)
        timed_out = loop.time() - started
        loop.call_later(0.01, event.set)
        started = loop.time()
        await sleep_until_woken(event, 10.0)
        return timed_out, loop.time() - started

    timed_out, woken = asyncio.run(trial())
    assert 0.04 <= timed_out < 1.0
    assert woken < 1.0
