"""What a bucket admitted in the last second: the cap that keeps a small share's bucket
from spending its saved messages on top of its rate.

Why: a bucket of rate r and capacity c admits up to c + r in a 1-second window. rgd's
buckets hold 0.1 s of their rate, so c adds at most 10 % to any window, except at small
shares, where a bucket holds at least ten messages (rgd.limiting.limiter.bucket_seconds: arrivals
are never even, and a bucket of one message denies the second of two close together).
Those ten messages are up to a second of the share, saved while demand sat under it and
spent at once when it steps up: a group of two daemons at ~6 msg/s each admitted 72 % over
its quota in that second (fuzz case 496 of seed 1). The window keeps the bucket's room for
clumps and bounds what it admits in any 1-second window to `cap`: what a bucket of 0.1 s
admits at most at any share (1.1 s of the rate), or the rate plus one message where that
is more, the least a limiter of whole messages can promise at a fractional rate (a daemon
that admits 5.7 msg/s in the long run admits 6 in some 1-second windows). The cap was 1.1 s
of the rate plus one message: at 10-100 msg/s that message went on top of the 10 %
(fuzz case 176: 12.2 % over on a 17.8 msg/s share; failing cases 99 -> 92 of 500). An
ask larger than the cap passes on an empty window, as one larger than the bucket passes
on a full bucket (rgd.limiting.token_bucket).

Why an ask must fit under the cap, rather than be taken whole while the window is under
it: a window of asks taken whole ends up to one ask over its cap, and the fuzz's asks at
ten times a small share were a third of it: overshoot p99 16.9 -> 20.7 % against 17.1 %
this way (`python -m sim fuzz --count 500 --seed 1 --strategy rgd`). The price is asks
that are a large part of the cap: asks of 7 messages at 10 msg/s pass one a second. A
broker asks per producer batch, and at under 100 msg/s (where windows apply) a batch is
a message or a few.

Where the group's members are known, each wall-clock second also has a cap of its own that
takes turns among them (rgd.limiting.window_turns): the members' whole messages then add up to the
quota in each second, where one message over the share for every member added up to one
message per member over it. Per second, not per sliding window: a member that took its
turn's extra message late in one second finds it in its sliding window early in the next,
and a sliding turn cap denied it there too, so 17 members asked 2.7 times a second at a
share of 2.37 admitted 91.5 % of what one limiter of the whole quota would have; counted per
second, 99.8 % (tests/unit/test_window_turns.py). The sliding cap still bounds one member's burst.

Pure: time is passed in. Memory: two floats per admission of the last second, for the
buckets that have a cap at all (small shares); none for the rest.
"""

from __future__ import annotations

import math

from rgd.limiting.window_turns import Turns

__all__ = ["WINDOW_SECONDS", "SecondWindow"]

# The window the quota is judged in: rates are per second, and operators (rgd_used, the
# fairness report) and the simulator look at 1-second windows.
WINDOW_SECONDS = 1.0
_COMPACT_AFTER = 64  # expired entries kept at the list's head before it is compacted
_EXPIRE_AT = 256  # entries (pairs x 2) past which an add expires the old ones itself


class SecondWindow:
    """Admissions within the last WINDOW_SECONDS: a flat list of (time, amount) pairs, the
    oldest at `head`, and their sum; under turns, also what was admitted in the current
    wall-clock second (`in_turn`, against `turn_cap`, which holds until `until`)."""

    __slots__ = ("cap", "head", "in_turn", "log", "total", "turn", "turn_cap", "turns", "until")

    def __init__(self, cap: float, turns: Turns | None = None, now: float = 0.0) -> None:
        self.cap = cap  # the most admitted in any 1-second window (but see the oversize rule)
        self.log: list[float] = []
        self.head = 0
        self.total = 0.0
        self.turns: Turns | None = None
        self.turn_cap = math.inf  # the most admitted in the current wall-clock second
        self.turn = 0.0  # the current second's turn (rgd.limiting.window_turns.Turns.turn_at)
        self.in_turn = 0.0
        self.until = math.inf  # the clock reading the current second ends at
        self.take_turns(turns, cap, now)

    def take_turns(self, turns: Turns | None, cap: float, now: float) -> None:
        """A new sliding cap, and per-second caps by `turns` (None: none). What was admitted
        in the current second still counts against the new turn's cap, and within the second
        the turn stays what it was: a new share or layout changes the rate the cap is built
        on, never whose turn the second is (members read each other's layouts a report late,
        and a turn drawn again on a new layout could hand a member a second extra message in
        a second another member's turn already took)."""
        self.cap = cap
        had = self.turns is not None and now < self.until
        self.turns = turns
        if turns is None:
            self.turn_cap, self.in_turn, self.until = math.inf, 0.0, math.inf
        elif had:
            self.turn_cap = turns.cap_with(self.turn)
        else:
            self._next_turn(now)

    def _next_turn(self, now: float) -> None:
        """The turn cap in force at `now`; `in_turn` starts again at a new second."""
        turns = self.turns
        if turns is None:
            return
        turn, until = turns.turn_at(now)
        if until != self.until:
            self.in_turn = 0.0
        self.turn, self.turn_cap, self.until = turn, turns.cap_with(turn), until

    def expire(self, now: float) -> None:
        """Drop admissions at or before now - 1 s (so [t, t + 1) holds at most `cap`)."""
        log = self.log
        h = self.head
        n = len(log)
        if h == n:
            return
        edge = now - WINDOW_SECONDS
        total = self.total
        while h < n and log[h] <= edge:
            total -= log[h + 1]
            h += 2
        if h == n:
            log.clear()
            self.head = 0
            self.total = 0.0  # exact again, whatever rounding the subtractions left
        else:
            if h > _COMPACT_AFTER:
                del log[:h]
                h = 0
            self.head = h
            self.total = total

    def fits(self, n: float, now: float) -> bool:
        """Whether admitting n now keeps the window within its cap, or the window is empty
        (an ask larger than the cap would never pass otherwise). What fits before expiring
        fits after (expiring only lowers the total), so the common case reads one sum. Under
        turns, n must also fit the second's turn cap (or the second be empty)."""
        if now >= self.until:
            self._next_turn(now)
        elif self.total + n <= self.cap and self.in_turn + n <= self.turn_cap:
            return True
        if self.in_turn + n > self.turn_cap and (self.in_turn > 0.0 or self._turn_would_fit(n)):
            return False
        self.expire(now)
        total = self.total
        return total + n <= self.cap or total <= 0.0

    def _turn_would_fit(self, n: float) -> bool:
        """Whether some turn's cap (at most the rate plus one message) holds n: then n waits
        for such a turn rather than pass on an empty second. Below a message a second this is
        what makes the members' whole messages take turns: each may admit one in the seconds
        its turn allows, and in any second the members together admit at most the quota
        rounded up (the stated bound: one message over the quota)."""
        turns = self.turns
        return turns is not None and n <= turns.rate + turns.unit

    def room(self, now: float) -> float:
        """What the window may still admit now (negative after a charge took it over)."""
        if now >= self.until:
            self._next_turn(now)
        self.expire(now)
        return min(self.cap - self.total, self.turn_cap - self.in_turn)

    def add(self, n: float, now: float) -> None:
        """Count n admitted (or charged) at `now`; clock readings never go back."""
        if n > 0:
            if now >= self.until:
                self._next_turn(now)
            self.in_turn += n
            log = self.log
            log.append(now)
            log.append(n)
            self.total += n
            if len(log) - self.head > _EXPIRE_AT:  # fits() may not have expired for a while
                self.expire(now)

    def wait(self, n: float, now: float) -> float:
        """Seconds until n fits: until enough of the oldest admissions leave the window (all
        of them for an ask larger than the cap), and under turns at least until the next
        second where the current one's turn is spent."""
        if now >= self.until:
            self._next_turn(now)
        self.expire(now)
        waits_turn = self.in_turn + n > self.turn_cap and (self.in_turn > 0.0 or self._turn_would_fit(n))
        turn_wait = self.until - now if waits_turn else 0.0
        total = self.total
        if total + n <= self.cap or total <= 0.0:
            return turn_wait
        need = total if n > self.cap else total + n - self.cap
        log = self.log
        freed = 0.0
        i = self.head
        at = now
        while i < len(log) and freed < need - 1e-9:
            at = log[i]
            freed += log[i + 1]
            i += 2
        return max(0.0, turn_wait, at + WINDOW_SECONDS - now)
