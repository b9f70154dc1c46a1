"""Turns at the last whole message (rgd/limiting/window_turns.py): the members' caps, counted in
whole messages by brute force, against the bounds the module claims; and live in the
limiter, with members whose arrivals are in lockstep (fuzz case 137 of seed 1's shape)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.config.groups import ResourceGroup
from rgd.limiting.limiter import Limiter, Place, full_quota
from rgd.limiting.second_window import SecondWindow
from rgd.limiting.window_turns import GOLDEN_STEP, Layout, turns_for
from tests.support.fake_clock import FakeClock
from tests.support.window_caps import cap_at, whole_messages

BURST = 0.1


def _evenly(share: float, rank: int, members: int) -> Layout:
    """The layout of the `rank`-th of `members` with equal shares, where the quota takes the
    fractions rounded up (points 1 apart)."""
    fractions = members * (share % 1.0)
    up = math.ceil(fractions - 1e-9)
    return Layout(rank * (share % 1.0), float(max(up, 1)), up)


@settings(max_examples=100, deadline=None)
@given(members=st.integers(1, 50), rank=st.integers(0, 49), share=st.floats(0.2, 30.0))
def test_a_member_takes_its_turns_evenly_so_a_saturated_one_averages_its_share(members, rank, share):
    rank %= members
    turns = turns_for(share, 1.0, BURST, members * share, members, _evenly(share, rank, members), 0.0)
    seconds = 2000
    mean = sum(whole_messages(cap_at(turns, s + 0.5), 1.0) for s in range(seconds)) / seconds
    assert mean >= share * 0.99 - 0.01


def test_the_cap_holds_until_the_next_wall_clock_second():
    turns = turns_for(2.4, 1.0, BURST, 2.4 * 17, 17, _evenly(2.4, 3, 17), wall_offset=1000.25)  # wall = clock + 1000.25
    cap, until = cap_at(turns, 10.0), turns.turn_at(10.0)[1]  # wall 1010.25: second 1010 ends at wall 1011, clock 10.75
    assert until == 10.75
    assert cap_at(turns, 10.7) == cap
    assert turns.turn_at(10.75)[1] == 11.75


def _lockstep(places: list[Place | None], share: float, rate: float, seconds: int) -> tuple[list[int], list[int]]:
    """Members of one group at `share` msg/s each, asked one message at the same instants
    (`rate` a second, the same for all: the simulator's even arrivals). Admitted and offered
    per second."""
    clock = FakeClock(0.0)
    group = ResourceGroup("g", publish_msgs=share * len(places))
    limiters = []
    for place in places:
        lim = Limiter(clock, BURST, 10.0, initial_limits=full_quota, wall_offset=0.0)
        lim.set_limit(group, "publish", share, math.inf, place)
        limiters.append(lim)
    admitted = [0] * seconds
    offered = [0] * seconds
    for i in range(int(seconds * rate)):
        clock.t = i / rate
        for lim in limiters:
            offered[int(clock.t)] += 1
            if lim.acquire(group, "publish", 1, 100, "t/ns").allowed:
                admitted[int(clock.t)] += 1
    return admitted, offered


@pytest.mark.parametrize("members, quota, rate", [
    (17, 40.3, 2.7),  # fuzz case 137 of seed 1: 2.37 msg/s each, offered 2.7 (3, 3, 2 a second)
    (2, 4.92, 6.7),  # case 486: two members of 2.46 msg/s
    (6, 25.6, 11.0),  # case 411: six of 4.27
    (17, 40.3, 10.0),
])
def test_members_in_lockstep_stay_within_the_quota_every_second_and_use_it(members, quota, rate):
    share = quota / members
    places = [Place(members, *_evenly(share, k, members), 0.0, 1.0, 0) for k in range(members)]
    admitted, offered = _lockstep(places, share, rate, 60)
    ideal = [min(quota, o) for o in offered]  # what one limiter of the whole quota could admit
    assert max(admitted[2:]) <= max(quota * (1 + BURST), math.floor(quota) + 1)
    assert sum(admitted[2:]) >= 0.97 * sum(ideal[2:])
    # Without places every member rounds up in the same seconds: 17 to 26 % over.
    fixed, _ = _lockstep([None] * members, share, rate, 60)
    assert max(fixed[2:]) > quota * 1.15


def test_a_new_layout_within_a_second_keeps_the_seconds_turn():
    """Members read each other's layouts a report late, so a member's layout may move within a
    second; the second's turn stays the one drawn at its start (else a member whose stretch
    moved under that second's point would take an extra message another member's turn
    already took). A new rate still applies at once; the next second draws again."""
    phi = (10 * GOLDEN_STEP) % 1.0
    off = turns_for(2.5, 1.0, 0.0, 10.0, 3, Layout((phi - 0.7) % 1.0, 1.0, 1), 0.0)  # the point misses it
    on = turns_for(2.5, 1.0, 0.0, 10.0, 3, Layout((phi - 0.2) % 1.0, 1.0, 1), 0.0)  # the point falls on it
    assert cap_at(off, 10.5) == 2.5 and cap_at(on, 10.5) > 3.0
    window = SecondWindow(100.0, off, now=10.1)
    admitted = 0
    for i, t in enumerate([10.1, 10.3, 10.5, 10.7, 10.9]):
        if i == 2:
            window.take_turns(on, 100.0, t)
        if window.fits(1.0, t):
            window.add(1.0, t)
            admitted += 1
    assert admitted == 2  # the share rounded down: second 10 was not this member's turn
    faster = turns_for(3.5, 1.0, 0.0, 10.0, 3, Layout((phi - 0.2) % 1.0, 1.0, 1), 0.0)
    window.take_turns(faster, 100.0, 10.95)
    assert window.turn_cap == 3.5  # a new rate applies within the second, the turn does not
    assert window.fits(1.0, 10.96)
    window.take_turns(on, 100.0, 11.0)
    assert window.turn_cap == cap_at(on, 11.0)  # a new second, a new draw
