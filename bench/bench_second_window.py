"""What a small share's 1-second window (rgd/limiting/second_window.py) costs the limiter's hot path.

    .venv/bin/python bench/bench_second_window.py [--asks 200000] [--rounds 5]

`Limiter.acquire` in-process (no HTTP) at a 50 msg/s share, where the ten-message floor
makes the bucket larger than 0.1 s and the window applies, with asks offered at 2 000/s
(most denied: the path that also works out when the window lets an ask pass) and at
40/s (all admitted); beside it, in the same run and alternating round by round, the same
asks with the window switched off. Prints nanoseconds per acquire (median of the rounds)
and the ratio. A share of 100 msg/s or more has no window and pays one attribute test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import rgd.limiting.limiter as limiter_module
from rgd.config.groups import ResourceGroup
from rgd.limiting.token_bucket import INF


def _no_window(burst_seconds: float, rate: float, unit: float) -> float:
    return INF


def nanoseconds_per_acquire(windowed: bool, asks: int, asks_per_second: float) -> float:
    """Time `asks` single asks of one message, `1 / asks_per_second` apart on the limiter's clock."""
    saved = limiter_module.window_cap
    if not windowed:
        limiter_module.window_cap = _no_window
    try:
        group = ResourceGroup(name="g", publish_msgs=50.0)
        limiter = limiter_module.Limiter(lambda: 0.0)
        acquire = limiter.acquire
        gap = 1.0 / asks_per_second
        started = time.perf_counter()
        for i in range(asks):
            acquire(group, "publish", 1, 0, "t/ns", None, i * gap)
        return (time.perf_counter() - started) / asks * 1e9
    finally:
        limiter_module.window_cap = saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_second_window", description=__doc__.splitlines()[0])
    parser.add_argument("--asks", type=int, default=200_000, help="asks per round and case")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (median reported)")
    args = parser.parse_args(argv)
    if not (1 <= args.asks <= 5_000_000 and 1 <= args.rounds <= 50):
        parser.error("--asks must be 1..5000000 and --rounds 1..50")
    print(f"$ python bench/bench_second_window.py --asks {args.asks} --rounds {args.rounds}")
    for offered in (2000.0, 40.0):
        on: list[float] = []
        off: list[float] = []
        for _ in range(args.rounds):
            off.append(nanoseconds_per_acquire(False, args.asks, offered))
            on.append(nanoseconds_per_acquire(True, args.asks, offered))
        a, b = statistics.median(off), statistics.median(on)
        print(f"50 msg/s share, {offered:.0f} asks/s offered: no window {a:.0f} ns, window {b:.0f} ns "
              f"per acquire: {b / a:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
