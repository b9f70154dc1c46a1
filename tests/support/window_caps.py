"""Reading turns' caps in whole messages, for the tests of rgd/limiting/window_turns.py (the
limiter reads a second's turn once and builds its cap from it: `Turns.turn_at`, `cap_with`)."""

from __future__ import annotations

import math

from rgd.limiting.window_turns import Turns

__all__ = ["cap_at", "whole_messages"]


def cap_at(turns: Turns, now: float) -> float:
    """The cap in force at clock reading `now`."""
    return turns.cap_with(turns.turn_at(now)[0])


def whole_messages(cap: float, unit: float) -> int:
    """What a window of `cap` admits in one second, in whole messages of `unit` (an ask
    larger than the cap passes on an empty window: one)."""
    return max(1, math.floor(cap / unit + 1e-9))
