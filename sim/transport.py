"""The simulated usage topic: per-receiver loss, delay and duplicates, seeded.

Like a non-persistent Pulsar topic, every report goes to every other live daemon
independently: one receiver may miss a report another one gets. A delay of 0
means "before the receiver's next tick" (the real topic delivers in milliseconds
and a daemon folds what arrived at its next tick); a delay of d ticks holds the
report back d ticks more. Delivery order among reports due at the same time is
publish order, so a run is a pure function of the scenario and the seed.

The sender gets its own report back too, as a daemon's own subscription does on
the real topic (it measures the topic's delivery delay from it, even alone). The
echo is lost with the same probability, drawn from a separate generator so that
what peers receive does not depend on it.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Iterable


@dataclass(frozen=True, slots=True)
class TransportSpec:
    loss: float = 0.0  # probability that one receiver misses one report
    delay: float = 0.0  # extra ticks before delivery
    duplicate: float = 0.0  # probability that one receiver gets a report twice


@dataclass(order=True, slots=True)
class _InFlight:
    due: float
    order: int
    receiver: str = field(compare=False)
    data: bytes = field(compare=False)


class Transport:
    def __init__(self, spec: TransportSpec, seed: int | str, tick_seconds: float = 1.0) -> None:
        self.spec = spec
        self.rng = random.Random(f"transport:{seed}")
        self.echo_rng = random.Random(f"transport-echo:{seed}")
        self.tick_seconds = tick_seconds
        self._queue: list[_InFlight] = []
        self._order = 0
        self.sent = 0
        self.lost = 0
        self.duplicated = 0

    def publish(self, sender: str, data: bytes, now: float, receivers: Iterable[str]) -> None:
        """Queue `data` for every receiver, the sender's echo included."""
        self.sent += 1
        due = now + self.spec.delay * self.tick_seconds
        for r in sorted(receivers):
            if r == sender:
                if not (self.spec.loss and self.echo_rng.random() < self.spec.loss):
                    self._order += 1
                    heapq.heappush(self._queue, _InFlight(due, self._order, r, data))
                continue
            if self.spec.loss and self.rng.random() < self.spec.loss:
                self.lost += 1
                continue
            copies = 2 if self.spec.duplicate and self.rng.random() < self.spec.duplicate else 1
            self.duplicated += copies - 1
            for _ in range(copies):
                self._order += 1
                heapq.heappush(self._queue, _InFlight(due, self._order, r, data))

    def due(self, now: float) -> list[tuple[str, bytes]]:
        """Reports whose time has come, as (receiver, data), in delivery order."""
        out: list[tuple[str, bytes]] = []
        while self._queue and self._queue[0].due <= now + 1e-9:
            item = heapq.heappop(self._queue)
            out.append((item.receiver, item.data))
        return out
