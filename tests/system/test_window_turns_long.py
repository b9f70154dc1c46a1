"""Turns at the last whole message (rgd/limiting/window_turns.py): the members' caps, counted in
whole messages by brute force, against the bounds the module claims; and live in the
limiter, with members whose arrivals are in lockstep (fuzz case 137 of seed 1's shape).

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_window_turns.py.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.limiting.window_turns import turns_for

BURST = 0.1


def whole_messages(cap: float, unit: float) -> int:
    """What a window of `cap` admits in one second, in whole messages of `unit` (an ask
    larger than the cap passes on an empty window: one)."""
    return max(1, math.floor(cap / unit + 1e-9))


@settings(max_examples=300, deadline=None)
@given(members=st.integers(1, 50), share=st.floats(0.05, 30.0), unit=st.sampled_from([1.0, 96.0, 36_117.0]),
       second=st.integers(0, 10**9), wall_offset=st.floats(0.0, 1e9))
def test_equal_members_caps_add_up_to_the_quota_and_its_tolerance_in_every_second(members, share, unit, second,
                                                                                 wall_offset):
    quota = members * share * unit
    now = second - wall_offset + 0.5  # mid-second, on the clock
    total = sum(whole_messages(turns_for(share * unit, unit, BURST, quota, k, members, wall_offset).cap_at(now)[0],
                               unit) for k in range(members))
    in_messages = quota / unit
    # The tolerance (10 % of the quota), or the quota rounded up to a whole message where
    # the tolerance is smaller than one; and never less than a message per member that
    # asks (the oversize rule lets one through an empty window).
    bound = max(math.floor(in_messages * (1 + BURST) + 1e-9), math.floor(in_messages + 1e-9) + 1, members)
    assert total <= bound
