"""A clock the test moves by hand, for the pure logic that takes `clock` as a callable.

ClusterNode, the limiter and the usage log read time only through the callable they are
given, so a test sets `clock.t` and the code under test sees exactly that instant: no
sleeps, no flakiness, and ticks that are exactly a tick apart.
"""

from __future__ import annotations

__all__ = ["FakeClock", "wall_ms"]


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def wall_ms(now: float) -> int:
    """The wall clock (Unix ms) that goes with monotonic `now` in these tests: the same number."""
    return int(round(now * 1000))
