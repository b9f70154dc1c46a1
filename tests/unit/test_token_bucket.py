import math

from rgd.limiting.token_bucket import TokenBucket


def test_refill_is_capped_at_capacity():
    b = TokenBucket.new(100, now=0.0, burst_seconds=0.5)
    assert b.capacity == 50
    b.take(50)
    b.refill(10.0)
    assert b.tokens == 50


def test_shortfall_and_wait():
    b = TokenBucket.new(10, now=0.0, burst_seconds=1.0)
    b.take(10)
    assert b.shortfall(5) == 5
    assert b.wait_seconds(5) == 0.5
    b.refill(0.5)
    assert b.shortfall(5) == 0


def test_oversize_request_passes_on_a_full_bucket_into_debt():
    b = TokenBucket.new(10, now=0.0, burst_seconds=1.0)
    assert b.shortfall(25) == 0  # full bucket admits an oversize ask
    b.take(25)
    assert b.tokens == -15
    assert b.shortfall(25) == 25  # then waits for the bucket to be full again
    b.refill(2.5)
    assert b.tokens == 10 and b.shortfall(25) == 0


def test_zero_rate_blocks_everything():
    b = TokenBucket.new(0, now=0.0)
    assert b.shortfall(1) > 0
    assert b.shortfall(0) > 0
    assert math.isinf(b.wait_seconds(b.shortfall(1)))


def test_charge_goes_into_capped_debt():
    b = TokenBucket.new(10, now=0.0, burst_seconds=1.0, max_debt_seconds=2.0)
    b.charge(1000, 0.0)
    assert b.tokens == -20
    b.refill(2.0)
    assert b.tokens == 0


def test_set_rate_keeps_state():
    b = TokenBucket.new(100, now=0.0, burst_seconds=1.0)
    b.take(80)  # 20 left
    b.set_rate(50, 0.1)  # refills 10 at the old rate first -> 30 = 0.3 s of 100/s; a cut keeps
    assert b.tokens == 15 and b.rate == 50  # the 0.3 s: 15 of the new 50/s
    b.set_rate(10, 0.1)  # still 0.3 s: 3 of 10/s
    assert b.tokens == 3
    b.charge(100, 0.1)
    b.set_rate(20, 0.1)  # debt is kept
    assert b.tokens == -97  # 3 - 100


def test_unlimited_never_short():
    b = TokenBucket.new(math.inf, now=0.0)
    assert b.shortfall(10**12) == 0
    b.set_rate(5, 1.0)
    assert b.tokens == 5 * b.burst_seconds  # from unlimited: start full at the new capacity
