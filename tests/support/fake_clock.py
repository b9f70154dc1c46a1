"""A clock the test moves by hand, for the pure logic that takes a clock.

The limiter and the usage log read time through a callable (`clock()`); ClusterNode reads
it through the node's Clock interface (`clock.now()`, `clock.wall_ms(at)`). One FakeClock
serves both: a test sets `clock.t` and the code under test sees exactly that instant: no
sleeps, no flakiness, and ticks that are exactly a tick apart.
"""

from __future__ import annotations

__all__ = ["FakeClock", "wall_ms"]


class FakeClock:
    """`epoch_ms`: the wall clock (Unix ms) at monotonic 0, so reports stamped by a node on
    this clock pass a receiver's clock check against a fixed wall time."""

    def __init__(self, t: float = 100.0, epoch_ms: int = 0) -> None:
        self.t = t
        self.epoch_ms = epoch_ms

    def __call__(self) -> float:
        return self.t

    def now(self) -> float:
        return self.t

    def wall_ms(self, at: float) -> int:
        return self.epoch_ms + wall_ms(at)


def wall_ms(now: float) -> int:
    """The wall clock (Unix ms) that goes with monotonic `now` in these tests: the same number."""
    return int(round(now * 1000))
