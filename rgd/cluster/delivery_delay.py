"""How long a report takes from its publisher to a peer's limits: measured, not assumed.

A daemon may grant itself an increase of its own demand only once every peer has
folded the report announcing it (see rgd/quota/calculator.py); otherwise peers
still compute their shares from its older, smaller demand and the cluster admits
more than the quota. How long that takes is the topic's delivery delay, which
differs between clusters (a loaded broker, a geo-replicated topic, a slow
consumer), so it is measured from every report received: its receipt time minus
the publish time it carries.

Robustness: one-way delay needs the two clocks to agree. A peer whose clock is
behind ours looks slower (we wait longer: safe); one ahead of ours looks faster,
down to a negative delay, which is clamped to zero (the residual risk is that
peer's clock offset, which NTP keeps to milliseconds). Per peer the median of its
recent samples ignores single outliers (a GC pause); across peers the slowest
counts, since every peer must have folded the report. Before any sample, one
tick is assumed (the topic is expected to deliver within a tick); the estimate
is capped so that one absurd clock cannot freeze increases for minutes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from statistics import median

SAMPLES_PER_PEER = 16


@dataclass
class DeliveryDelay:
    default_seconds: float  # assumed before any sample
    cap_seconds: float  # the estimate never exceeds this
    samples: dict[str, deque[float]] = field(default_factory=dict)
    # seconds() until the next sample: it is read once per group recomputed (5 000 a pass at
    # PIP-82's scale), and a median per peer each time was most of a recompute's cost.
    _seconds: float | None = field(default=None, repr=False, compare=False)
    # Each peer's median, updated with its own samples: every folded report adds a sample and
    # is then read (a peer's list of members heard is dated by it), and the median of every
    # peer's samples again was ~90 us a report at 100 peers.
    _medians: dict[str, float] = field(default_factory=dict, repr=False, compare=False)

    def observe(self, peer: str, publish_ms: int, received_ms: int) -> float:
        """Record one report's delay; returns it in seconds (>= 0)."""
        delay = max(0.0, (received_ms - publish_ms) / 1000.0)
        q = self.samples.get(peer)
        if q is None:
            q = self.samples[peer] = deque(maxlen=SAMPLES_PER_PEER)
        q.append(delay)
        self._medians[peer] = median(q)
        self._seconds = None
        return delay

    def forget(self, peer: str) -> None:
        self.samples.pop(peer, None)
        self._medians.pop(peer, None)
        self._seconds = None

    def seconds(self) -> float:
        """The delay after which every live peer has the report: the slowest peer's median."""
        if self._seconds is None:
            if not self._medians:
                self._seconds = min(self.default_seconds, self.cap_seconds)
            else:
                self._seconds = min(self.cap_seconds, max(self._medians.values()))
        return self._seconds


__all__ = ["SAMPLES_PER_PEER", "DeliveryDelay"]
