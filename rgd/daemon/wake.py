"""Sleeping until a wake-up or a deadline, whichever comes first, in loops that must stop when cancelled.

Why not `asyncio.wait_for(event.wait(), seconds)`: on Python 3.11 a cancellation that arrives
just after the event was set is lost (wait_for returns the inner result instead of raising),
so a loop built on it runs on after its task was cancelled and a graceful stop that awaits
the task waits for ever (seen: a test's teardown hung for the pytest timeout).
`asyncio.timeout` tells its own cancellation from the caller's and re-raises the caller's.
"""

from __future__ import annotations

import asyncio

__all__ = ["sleep_until_woken"]


async def sleep_until_woken(event: asyncio.Event, seconds: float) -> None:
    """Return when `event` is set or after `seconds`; the caller clears the event."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        pass
