"""A token bucket with debt: the single rate-limiting algorithm rgd uses.

Why debt: Pulsar charges dispatch after the fact (the bytes are already sent),
so `charge` may take the bucket below zero and later `take`s pay it back. Debt
is capped at `max_debt_seconds` of rate so one absurd usage record cannot block
a group for hours.

Why the full-bucket rule: a request larger than the burst capacity (a 5 MB
batch on a 1 MB/s bucket) would otherwise never pass. A full bucket admits it
and goes into debt, so the long-run rate still holds.

Pure: time is passed in, so the simulator drives the same object on its own clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rgd.config.settings import DEFAULT_BURST_SECONDS  # a setting's default: why 0.1, see there
from rgd.limiting.second_window import SecondWindow
from rgd.limiting.window_turns import Turns

INF = math.inf

__all__ = ["DEFAULT_BURST_SECONDS", "INF", "TokenBucket"]


@dataclass(slots=True)
class TokenBucket:
    rate: float  # tokens per second; INF = unlimited
    burst_seconds: float  # capacity = rate * burst_seconds
    tokens: float  # may be negative (debt)
    updated: float  # clock reading of the last refill, seconds
    max_debt_seconds: float = 10.0
    # What it admitted in the last second, for a bucket whose 1-second windows are capped
    # (a small share's: rgd.limiting.second_window); None for the rest.
    window: SecondWindow | None = None

    @classmethod
    def new(
        cls, rate: float, now: float, burst_seconds: float = DEFAULT_BURST_SECONDS, max_debt_seconds: float = 10.0,
        start_full: bool = True,
    ) -> TokenBucket:
        cap = rate * burst_seconds if rate != INF else INF
        return cls(rate, burst_seconds, cap if start_full else 0.0, now, max_debt_seconds)

    @property
    def capacity(self) -> float:
        return self.rate * self.burst_seconds if self.rate != INF else INF

    def refill(self, now: float) -> None:
        # On the acquire hot path (twice per single ask): `capacity` and min() are
        # spelled out, one attribute read and a compare instead of two calls.
        rate = self.rate
        if rate == INF:
            return
        elapsed = now - self.updated
        if elapsed > 0:
            tokens = self.tokens + elapsed * rate
            cap = rate * self.burst_seconds
            self.tokens = tokens if tokens < cap else cap
            self.updated = now

    def shortfall(self, n: float) -> float:
        """Tokens missing for taking n now (0 when allowed). Call refill first."""
        if self.rate == INF or (n <= self.tokens and self.rate > 0):
            return 0.0
        if self.rate <= 0:  # a zero rate blocks everything, even n == 0 asks
            return max(n, 1.0)
        cap = self.capacity
        if self.tokens >= cap:  # full-bucket rule: oversize requests pass into debt
            return 0.0
        # An oversize request waits for a full bucket, not for n tokens.
        return min(n, cap) - self.tokens

    def wait_seconds(self, shortfall: float) -> float:
        if shortfall <= 0 or self.rate == INF:
            return 0.0
        if self.rate <= 0:
            return INF
        return shortfall / self.rate

    def take(self, n: float) -> None:
        """Remove n tokens (after shortfall said 0)."""
        if self.rate != INF:
            self.tokens -= n

    def charge(self, n: float, now: float) -> None:
        """Record usage that already happened; never refuses, may go into (capped) debt."""
        if self.rate == INF:
            return
        self.refill(now)
        self.tokens = max(self.tokens - n, -self.rate * self.max_debt_seconds)
        if self.window is not None:
            self.window.add(n, now)

    def cap_window(self, cap: float, turns: Turns | None = None, now: float = 0.0) -> None:
        """Cap what the bucket admits in any 1-second window at `cap` (INF: no cap), and in
        each wall-clock second by `turns` where given (rgd.limiting.window_turns). What it admitted in
        the last second is kept across a change of the cap, so a cut applies to the window
        it lands in."""
        if cap == INF:
            self.window = None
        elif self.window is None:
            self.window = SecondWindow(cap, turns, now)
        else:
            self.window.take_turns(turns, cap, now)

    def set_rate(self, rate: float, now: float) -> None:
        """Change the rate keeping the bucket's state; debt is kept.

        A cut scales saved tokens by new/old: they are seconds of the old limit, and
        spent at once on top of the new rate they would let the old limit's burst
        through after the limit was cut (a quota cut 10x while every daemon holds
        part of a bucket would admit the old burst cluster-wide). Kept in seconds,
        a saturated daemon's near-empty bucket stays near empty. A raise keeps the
        tokens (clamped to the capacity): the new rate refills them."""
        if rate == self.rate:
            return
        self.refill(now)
        old = self.rate
        self.rate = rate
        self.updated = now
        if rate == INF:
            self.tokens = INF
        elif old == INF:
            self.tokens = self.capacity
        else:
            if self.tokens > 0 and rate < old:
                self.tokens = self.tokens * (rate / old) if old > 0 else 0.0
            self.tokens = min(self.tokens, self.capacity)
