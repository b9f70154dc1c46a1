"""A small share's 1-second windows: at most 1.1 s of its rate, or its rate plus one message
(rgd/limiting/second_window.py).

The oracle is arithmetic on the log of what a Limiter admitted (every half-open window
[s, s + 1) starting at an admission), not the window's own bookkeeping. Without the
window a bucket that the ten-message floor made a second of its rate admits up to twice
its rate in a window.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_second_window.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_second_window import _run, _worst_second


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=0.5, max_value=99.0, allow_nan=False),
    gaps=st.lists(st.tuples(st.floats(min_value=0.0, max_value=0.4, allow_nan=False),
                            st.integers(min_value=1, max_value=3)), min_size=1, max_size=200),
)
def test_no_second_admits_more_than_its_cap(rate: float, gaps: list[tuple[float, int]]) -> None:
    t = 0.0
    asks = []
    for gap, n in gaps:
        t += gap
        asks.append((t, n))
    passed, _ = _run(rate, asks)
    n_max = max(n for _, n in asks)
    assert _worst_second(passed) <= max(rate * 1.1, rate + 1.0, n_max) + 1e-9  # n_max: on an empty window
