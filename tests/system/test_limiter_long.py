"""The limiter against a reference model of its token buckets, drawn at random.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_limiter.py.
"""

from hypothesis import example, given, settings
from hypothesis import strategies as st

from rgd.config.groups import ResourceGroup
from rgd.limiting.limiter import (
    Limiter,
    bucket_seconds,
)
from rgd.limiting.token_bucket import INF, TokenBucket
from tests.support.fake_clock import FakeClock
from tests.unit.test_limiter import _rates, _ref_window, _reference, _steps


@settings(max_examples=300, deadline=None)
@given(_rates, _rates, st.sampled_from([0.5, 1.0, 2.0]), _steps)
# A draw CI once made: 7.5 msg/s, a bucket of a second (7.5) and a window of 11.25; 6 pass,
# then 7 are short of 5.5 tokens (0.73 s) but wait for the 6 to leave the window (1 s).
@example(7.5, INF, 0.5, [(0.0, 6, 0, False), (0.0, 7, 0, False)])
def test_inlined_acquire_matches_token_bucket_methods(msg_rate, byte_rate, burst, steps):
    clock = FakeClock(0.0)
    lim = Limiter(clock, burst_seconds=burst, initial_limits=lambda g, k: (msg_rate, byte_rate))
    g = ResourceGroup("g")
    lim.state(g, "publish", 0.0)  # created now, as the reference buckets are
    mb = TokenBucket.new(msg_rate, 0.0, bucket_seconds(burst, msg_rate, 1.0))  # room for ten messages
    bb = TokenBucket.new(byte_rate, 0.0, burst)
    win = _ref_window(msg_rate, burst)  # the byte bucket has no mean message yet: no window
    for dt, messages, nbytes, charge in steps:
        clock.t += dt
        if charge:  # usage after the fact: debt the next acquires must repay
            lim.record_usage(g, "publish", messages, nbytes, "t/ns")
            mb.charge(messages, clock.t)
            bb.charge(nbytes, clock.t)
            if win is not None and messages > 0 and msg_rate != INF:
                win.log.append((clock.t, messages))
            continue
        d = lim.acquire(g, "publish", messages, nbytes, "t/ns")
        allowed, retry = _reference(mb, bb, win, messages, nbytes, clock.t)
        state = lim.states[("g", "publish")]
        assert d.allowed == allowed
        assert d.retry_after_s == retry
        assert (state.messages.tokens, state.messages.updated) == (mb.tokens, mb.updated)
        assert (state.bytes.tokens, state.bytes.updated) == (bb.tokens, bb.updated)
