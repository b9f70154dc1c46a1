"""Turns at the last whole message (rgd/limiting/window_turns.py): the members' caps, counted in
whole messages by brute force, against the bounds the module claims; and live in the
limiter, with members whose arrivals are in lockstep (fuzz case 137 of seed 1's shape).

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_window_turns.py.
"""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.limiting.window_turns import Layout, layout_for, turns_for, whole_and_fraction
from tests.support.window_caps import cap_at, whole_messages

BURST = 0.1


@settings(max_examples=300, deadline=None)
@given(members=st.integers(1, 50), share=st.floats(0.05, 30.0), unit=st.sampled_from([1.0, 96.0, 36_117.0]),
       second=st.integers(0, 10**9), wall_offset=st.floats(0.0, 1e9))
def test_equal_members_caps_add_up_to_the_quota_and_its_tolerance_in_every_second(members, share, unit, second,
                                                                                 wall_offset):
    quota = members * share * unit
    now = second - wall_offset + 0.5  # mid-second, on the clock
    fraction = share % 1.0
    layouts = [layout_for(k * fraction, members * fraction, members * math.floor(share) * unit, unit, quota, BURST,
                          share < 1.0) for k in range(members)]
    turns = [turns_for(share * unit, unit, BURST, quota, members, layouts[k], wall_offset) for k in range(members)]
    total = sum(whole_messages(cap_at(t, now), unit) for t in turns)
    in_messages = quota / unit
    # The tolerance (10 % of the quota), or the quota rounded up to a whole message where
    # the tolerance is smaller than one; and never less than a message per member that
    # asks (the oversize rule lets one through an empty window).
    bound = max(math.floor(in_messages * (1 + BURST) + 1e-9), math.floor(in_messages + 1e-9) + 1, members)
    assert total <= bound


def _caps_in_whole_messages(shares: list[float], seconds: int, burst: float, quota: float) -> list[int]:
    """The members' caps (shares in messages, in id order, laid out as rgd.cluster.node lays
    them out) counted in whole messages, second by second."""
    fractions = sum(whole_and_fraction(x)[1] for x in shares)
    whole = sum(whole_and_fraction(x)[0] for x in shares)
    turns = []
    before = 0.0
    for share in shares:
        layout = layout_for(before, fractions, whole, 1.0, quota, burst, min(shares) < 1.0)
        turns.append(turns_for(share, 1.0, burst, quota, len(shares), layout, 0.0))
        before += whole_and_fraction(share)[1]
    return [sum(whole_messages(cap_at(t, s + 0.5), 1.0) for t in turns) for s in range(seconds)]


@settings(max_examples=200, deadline=None)
@given(shares=st.lists(st.floats(1.0, 12.0), min_size=2, max_size=30), room=st.floats(0.0, 0.3))
def test_members_of_different_shares_round_up_by_at_most_one_message_together(shares, room):
    """Without the tolerance's spare (burst 0), where the quota has room for the shares' sum
    rounded up, the members' whole messages add up to at most that in every second, and each
    averages its share over the seconds (all of them together: the sum's average)."""
    total = sum(shares)
    quota = math.ceil(total - 1e-9) * (1 + room)
    seconds = 3000
    totals = _caps_in_whole_messages(shares, seconds, 0.0, quota)
    assert max(totals) <= math.ceil(total - 1e-9)
    assert sum(totals) / seconds >= total - 0.01 * len(shares)


@settings(max_examples=200, deadline=None)
@given(shares=st.lists(st.floats(1.0, 4.0), min_size=2, max_size=8), burst=st.sampled_from([0.0, 0.05, 0.1]))
def test_where_one_more_message_is_beyond_the_tolerance_the_members_round_down_together(shares, burst):
    """A quota just above the shares' sum, its tolerance less than a message (so no member
    has a spare message): where one more message than the fractions rounded down would pass
    the quota plus its tolerance, the members' whole messages never do in any second, and
    they lose less than a message a second together."""
    total = sum(shares)
    burst = min(burst, 0.99 / total)
    whole = sum(math.floor(x + 1e-9) for x in shares)
    fractions = total - whole
    quota = total * 1.001
    seconds = 3000
    totals = _caps_in_whole_messages(shares, seconds, burst, quota)
    if whole + math.ceil(fractions - 1e-9) > quota * (1 + burst) and fractions >= 1.0:
        assert max(totals) <= quota * (1 + burst) + 1e-9
    else:
        assert max(totals) <= math.ceil(total - 1e-9)
    assert sum(totals) / seconds >= total - 1.0 - 0.01 * len(shares)


def test_turns_spread_by_rank_alone_round_up_together_where_shares_differ():
    """Why the layout: 20 members of shares between 1 and 10 msg/s whose turns are spread
    evenly by rank (each k / n of the way round, whatever its share) round up together by
    three messages in some second; laid end to end, by at most one."""
    draw = random.Random(3)
    shares = [draw.uniform(1.0, 10.0) for _ in range(20)]
    quota = math.ceil(sum(shares)) * 1.2
    by_rank = [turns_for(x, 1.0, 0.0, quota, 20, Layout(0.0, 1.0, 1), 0.0) for x in shares]
    # turns k / n + s·g (mod 1) rounding up at 1 - f: a stretch [1 - f - k / n, 1 - k / n) mod 1
    by_rank = [t.__class__(t.rate, t.unit, (1 - t.fraction - k / 20) % 1.0, t.fraction, 1.0, t.spare, t.wall_offset)
               for k, t in enumerate(by_rank)]
    worst_by_rank = max(sum(whole_messages(cap_at(t, s + 0.5), 1.0) for t in by_rank) for s in range(3000))
    assert worst_by_rank >= math.ceil(sum(shares)) + 3
    assert max(_caps_in_whole_messages(shares, 3000, 0.0, quota)) <= math.ceil(sum(shares))
