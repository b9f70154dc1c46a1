"""Turns at the last whole message: which of a group's daemons may admit one message more
than its share in a given wall-clock second.

Why: a daemon admits whole messages, so at a share of 2.4 msg/s it admits 2 in most
seconds and 3 in some, and its 1-second window (rgd.limiting.second_window) lets it: the window's
cap was the share plus one message. Daemons with the same share and the same arrivals
take that third message in the same second. A group of 17 daemons at 2.4 msg/s each
admitted 51 messages in one second of a 40.3 msg/s quota, 26 % over (fuzz case 137 of
seed 1), and 6 daemons at 4.3 msg/s of 36 kB messages 17 % over (case 411). A cap of one
message over the share, given to every member, adds one message per member to a second.

So the members take turns. Each member's share has a fractional message f (2.4 msg/s: 0.4);
the fractions lie end to end in id order, each member's a stretch [before, before + f) of a
circle (`Layout`), and in wall second s, N points equally spaced around it and turned by s·g
(g the golden ratio's fraction) give the extra messages: a member whose stretch holds a point
takes one. No stretch is longer than the spacing, so the extras in a second number at most N;
s·g mod 1 is equidistributed, so each member's extra comes round in the same share of the
seconds as its f: no member is the one that always rounds down. N is the fractions' sum F
rounded up, points 1 apart: each member averages its share, and the members' whole messages
add up to their shares' sum rounded up at most. Where one more message would take a second
past the quota plus its tolerance (3 members of 2.36 messages on a 7.2-message quota admit
8, 11 % over), N is F rounded down, on a circle of F: the sum rounded down in every second,
each member losing the same part of its fraction; none at all where F < 1, unless a member's
share is under a message (it would never admit one): then one point, and a second may pass
the quota by that message. Turns spread evenly by rank whatever the shares keep the sum
within one message only when the shares are equal (Hermite's identity); 20 members of random
shares of 1-10 msg/s round up together by up to 5 messages a second that way.

A member reads the fractions of those before it from their reports (the limits in force);
rgd.cluster.node lays them out. While shares move those are a tick old and stretches may
overlap by what moved, so a member's turn is drawn once at the start of each second and kept
through it (rgd.limiting.second_window). Seconds are wall-clock seconds, the same for every
daemon (NTP keeps them within milliseconds), and the ones operators (rgd_used, the fairness
report) and the simulator count in.

Where the quota has room for it, every member also gets `spare` messages whatever its
turn: the group's burst tolerance (burst_seconds of the quota, 10 %) less the one message
the turns may round up, split over the members. So the members' caps add up to at most
the quota plus its burst tolerance in every second (the quota plus one message where the
tolerance is less than a message: a quota of 4.35 msg/s must admit 5 in some seconds to
average 4.35 in whole messages), and a member whose demand sits near its limit keeps room
for clumps where the quota can afford it: at 50 msg/s of 100 between two members the cap
is 54.5, where the fixed cap was 55 (1.1 s of the rate).

Pure: time is passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["GOLDEN_STEP", "Layout", "Turns", "layout_for", "turns_for", "whole_and_fraction"]

# (sqrt(5) - 1) / 2: the step of the turn from one second to the next. Its multiples mod 1
# spread the most evenly over [0, 1) of any step's (three-distance theorem), so a member's
# turns come round evenly however few seconds a share lasts.
GOLDEN_STEP = (math.sqrt(5.0) - 1.0) / 2.0


def whole_and_fraction(messages: float) -> tuple[int, float]:
    """A share in messages as whole messages and the fractional message over them; a share a
    float's rounding away from a whole number is that whole number (1.9999999999999996: 2, not
    1 and a fraction that would round up to a third message)."""
    whole = math.floor(messages + 1e-9)
    return whole, max(0.0, messages - whole)


class Layout(NamedTuple):
    """Where a member's stretch lies on the group's circle of turns, and how many points
    fall on the circle each second."""

    before: float  # where the member's stretch begins: the fractions of those before it, summed
    circumference: float
    points: int


def layout_for(before: float, fractions: float, whole: float, largest: float, quota: float, tolerance: float,
               under_one: bool) -> Layout:
    """The layout of a member whose stretch begins at `before`, in a group whose members'
    fractional messages sum to `fractions` and whose shares rounded down sum to `whole`
    units (the dimension's, as `quota`; `largest`: the largest member's message in them;
    `under_one`: some member's share is under a message). The module doc says which N."""
    if fractions <= 0:
        return Layout(before, 1.0, 0)
    up = math.ceil(fractions - 1e-9)
    if whole + up * largest <= quota * (1.0 + tolerance) + 1e-9:
        return Layout(before, float(up), up)
    down = math.floor(fractions + 1e-9)
    if down == 0:
        return Layout(before, 1.0, 1 if under_one else 0)
    return Layout(before, fractions, down)


@dataclass(frozen=True, slots=True)
class Turns:
    """One member's window caps, second by second."""

    rate: float  # the bucket's rate, units per second
    unit: float  # one message in the bucket's units (1, or the mean message's bytes)
    before: float  # where the member's stretch begins on the circle
    fraction: float  # its length: the share's fractional message
    spacing: float  # between the points on the circle (inf: none)
    spare: float  # messages the member may take over its rate in any second, its turn or not
    wall_offset: float  # wall-clock seconds minus clock seconds

    def turn_at(self, now: float) -> tuple[float, float]:
        """The turn at clock reading `now`, and the clock reading it holds until: a point on
        the stretch in this wall second gives a turn of 1 - δ (δ from the stretch's start to
        the point), which rounds the share up to the next whole message; else 0."""
        second = math.floor(now + self.wall_offset)
        turn = 0.0
        if self.spacing != math.inf:
            delta = ((second * GOLDEN_STEP) % 1.0 * self.spacing - self.before) % self.spacing
            if delta < self.fraction - 1e-9:  # a point on the stretch's end is the next stretch's
                turn = 1.0 - delta
        return turn, second + 1.0 - self.wall_offset

    def cap_with(self, turn: float) -> float:
        """The second's cap at `turn`: the rate plus the turn's message (or the spare)."""
        return self.rate + max(turn, self.spare) * self.unit


def turns_for(rate: float, unit: float, burst_seconds: float, quota: float, members: int, layout: Layout,
              wall_offset: float) -> Turns:
    """A member's Turns in a group of `members` whose quota in this dimension is `quota` units
    per second, its stretch where `layout` puts it."""
    members = max(1, members)
    tolerance = burst_seconds * quota / unit  # in messages
    spacing = layout.circumference / layout.points if layout.points > 0 else math.inf
    return Turns(rate, unit, layout.before, whole_and_fraction(rate / unit)[1], spacing,
                 max(0.0, (tolerance - 1.0) / members), wall_offset)
