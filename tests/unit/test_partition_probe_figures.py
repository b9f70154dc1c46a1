"""The partition probe's reading of its counts (scripts/partition_probe.py), on literal seconds."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import partition_probe as probe


def _rows(*shares: tuple[float, float, float]) -> list[dict[str, float]]:
    return [{"t": float(i), "d1": a, "d2": b, "d3": c, "total": a + b + c} for i, (a, b, c) in enumerate(shares)]


def test_fair_from_the_first_second_that_stays_fair_to_the_end() -> None:
    share = 100 / 3  # fair: within 10 %, 30.0 .. 36.7
    rows = _rows((50, 50, 33), (50, 50, 33), (45, 20, 33), (34, 31, 33), (33, 33, 34), (36, 31, 33))
    # The heal at 2.3 s: the second [2, 3) is not fair, [3, 4) and every later one is.
    assert probe.fair_from(rows, 2.3, share) == 3.0 - 2.3
    # A second before the heal that is fair does not count, nor does one that is fair and then is not.
    rows = _rows((33, 33, 33), (34, 33, 33), (50, 20, 33), (33, 33, 33), (29, 38, 33), (33, 33, 33))
    assert probe.fair_from(rows, 1.5, share) == 5.0 - 1.5
    # Fair in the second the heal fell in: 0, not negative.
    assert probe.fair_from(_rows((33, 33, 33), (33, 34, 33)), 0.4, share) == 0.0


def test_never_fair_again_is_none() -> None:
    rows = _rows((33, 33, 33), (50, 50, 33))
    assert probe.fair_from(rows, 0.5, 100 / 3) is None
