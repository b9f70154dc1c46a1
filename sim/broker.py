"""A simulated broker's asks for one (daemon, group, kind) within a sub-step.

Why spread in time: a sub-step's demand used to reach the limiter as one burst of asks
at the sub-step's first instant. A bucket then only ever sees refills of a whole
sub-step (0.1 s) and whatever it holds at that instant; with a 0.1 s bucket that is
all of it, so asks lined up at one instant measured the bucket's size, not the rate
it admits. Real brokers ask as messages arrive: here the sub-step's messages arrive
evenly over it, each batch asked at its own instant.

Why denied asks are dropped: a broker using rgd asks for every batch it is offered and
the daemon counts the denied ones as its demand (the load generator runs its client
with `max_hold=0` for the same reason). A broker that held a denied batch and asked
again at Retry-After would hide its demand from the daemon, and the share it asks for
would grow only as fast as those retries reveal it.

Pure apart from the limiter it asks: time is passed in (the simulator's clock).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ArrivingDemand", "Ask"]

# ask(n, at) -> whether n messages were admitted at time `at`
Ask = Callable[[int, float], bool]


@dataclass
class ArrivingDemand:
    """One (daemon, group, kind)'s demand: whole messages arrive at `rate`; the part of
    a message not arrived yet is carried to the next sub-step."""

    carried: float = 0.0
    arrived: int = 0  # whole messages that arrived in the last sub-step (the judge's offered load)

    def step(self, rate: float, start: float, end: float, batch: int, ask: Ask) -> int:
        """The sub-step [start, end) at `rate` messages/s: its whole messages, in asks of
        `batch` spaced evenly from `start`. Returns the messages admitted."""
        self.carried += rate * (end - start)
        n = int(self.carried + 1e-9)
        self.carried -= n
        self.arrived = max(0, n)
        if n <= 0:
            return 0
        sizes = [batch] * (n // batch) + ([n % batch] if n % batch else [])
        spacing = (end - start) / len(sizes)
        return sum(size for i, size in enumerate(sizes) if ask(size, start + i * spacing))
