"""Turns at the last whole message: which of a group's daemons may admit one message more
than its share in a given wall-clock second.

Why: a daemon admits whole messages, so at a share of 2.4 msg/s it admits 2 in most
seconds and 3 in some, and its 1-second window (rgd.limiting.second_window) lets it: the window's
cap was the share plus one message. Daemons with the same share and the same arrivals
take that third message in the same second. A group of 17 daemons at 2.4 msg/s each
admitted 51 messages in one second of a 40.3 msg/s quota, 26 % over (fuzz case 137 of
seed 1), and 6 daemons at 4.3 msg/s of 36 kB messages 17 % over (case 411). A cap of one
message over the share, given to every member, adds one message per member to a second.

So the members take turns. Member k of n (the group's members sorted by id) gets, in wall
second s, the cap share + t·message, where t = (k/n + s·g) mod 1 and g is the golden
ratio's fraction. In any one second the members' t are n points 1/n apart, and whole
messages under those caps add up to the group's quota rounded down, plus at most one
(Hermite's identity: the sum over k of floor(x + k/n) is floor(n·x)), not n over it. Over
the seconds each member's t runs through [0, 1) evenly (s·g mod 1 is equidistributed), so
each admits its share on average: no member is the one that always rounds down. Seconds are
wall-clock seconds, the same for every daemon (NTP keeps them within milliseconds), and the
ones operators (rgd_used, the fairness report) and the simulator count in.

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

__all__ = ["GOLDEN_STEP", "Turns", "turns_for"]

# (sqrt(5) - 1) / 2: the step of the turn from one second to the next. Its multiples mod 1
# spread the most evenly over [0, 1) of any step's (three-distance theorem), so a member's
# turns come round evenly however few seconds a share lasts.
GOLDEN_STEP = (math.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True, slots=True)
class Turns:
    """One member's window caps, second by second."""

    rate: float  # the bucket's rate, units per second
    unit: float  # one message in the bucket's units (1, or the mean message's bytes)
    place: float  # k / n: the member's place among the group's members
    spare: float  # messages the member may take over its rate in any second, its turn or not
    wall_offset: float  # wall-clock seconds minus clock seconds

    def cap_at(self, now: float) -> tuple[float, float]:
        """The cap in force at clock reading `now`, and the clock reading it holds until."""
        second = math.floor(now + self.wall_offset)
        turn = (self.place + second * GOLDEN_STEP) % 1.0
        return self.rate + max(turn, self.spare) * self.unit, second + 1.0 - self.wall_offset


def turns_for(rate: float, unit: float, burst_seconds: float, quota: float, rank: int, members: int,
              wall_offset: float) -> Turns:
    """A member's Turns: the `rank`-th of `members` (0-based) in a group whose quota in this
    dimension is `quota` units per second."""
    members = max(1, members)
    tolerance = burst_seconds * quota / unit  # in messages
    return Turns(rate, unit, (rank % members) / members, max(0.0, (tolerance - 1.0) / members), wall_offset)
