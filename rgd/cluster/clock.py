"""The clock the cluster node reads, in the daemon: monotonic seconds, and wall time of them.

The simulator hands the node its own clock through the same interface (sim/node.py), so what
converges there reads time exactly as the daemon does. Wall time of an instant is computed from
one offset taken at start, never by reading the wall clock again: a report stamped "now" for
a past instant would look fresher than it is to every peer.
"""

from __future__ import annotations

import time

__all__ = ["WallClock"]


class WallClock:
    """time.monotonic() for durations; wall-clock milliseconds of any monotonic instant."""

    def __init__(self) -> None:
        self.offset = time.time() - time.monotonic()

    def now(self) -> float:
        return time.monotonic()

    def wall_ms(self, at: float) -> int:
        return int(round((self.offset + at) * 1000))
