"""What the limiter's hot path costs in process, this tree against a baseline revision.

    python bench/bench_limiter.py [--asks 200000] [--rounds 5] [--baseline REV]

`Limiter.acquire` and `Limiter.acquire_batch` with no HTTP around them, three cases:
- `admit`: one-message asks at 500/s on a 1 000 msg/s share (every ask passes);
- `deny`: one-message asks at 2 000/s on a 100 msg/s share (most are refused);
- `batch`: batches of 100 one-message asks, 50 batches a second, on a 10 000 msg/s share.
Each case times `--asks` asks on the limiter's own clock (no sleeping) and prints
nanoseconds per ask. With `--baseline REV` the same runs against revision REV's tree (`git
archive`, a fresh interpreter per round, rounds alternating with this tree's), and the
ratios are printed (baseline / this tree: > 1 means this tree spends less). Why it exists:
the acquire path is what every broker ask pays, so a change to it is judged here, beside the
code it replaces, before the HTTP benchmarks (bench_acquire.py, bench_batch.py) whose noise
would hide a few nanoseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from revision_rounds import measure_rounds

CASES = ("admit", "deny", "batch")
BATCH = 100


def measure(asks: int) -> dict[str, float]:
    """Nanoseconds per ask of each case (imports rgd from wherever the interpreter finds it)."""
    from rgd.api.requests import Ask
    from rgd.config.groups import ResourceGroup
    from rgd.limiting.limiter import Limiter

    out: dict[str, float] = {}
    for case, share, per_second in (("admit", 1000.0, 500.0), ("deny", 100.0, 2000.0)):
        group = ResourceGroup("g", publish_msgs=share * 3)
        limiter = Limiter(lambda: 0.0)
        limiter.set_limit(group, "publish", share, float("inf"))
        acquire, gap = limiter.acquire, 1.0 / per_second
        started = time.perf_counter()
        for i in range(asks):
            acquire(group, "publish", 1, 100, "t/ns", None, i * gap)
        out[case] = (time.perf_counter() - started) / asks * 1e9
    group = ResourceGroup("g", publish_msgs=30_000.0)
    limiter = Limiter(lambda: 0.0)
    limiter.set_limit(group, "publish", 10_000.0, float("inf"))
    batch = [Ask("t/ns", "publish", 1, 100) for _ in range(BATCH)]
    namespaces = ("t/ns",)
    started = time.perf_counter()
    for i in range(max(1, asks // BATCH)):
        limiter.acquire_batch(group, "publish", batch, i * 0.02, namespaces)
    out["batch"] = (time.perf_counter() - started) / (max(1, asks // BATCH) * BATCH) * 1e9
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_limiter", description=__doc__.splitlines()[0])
    p.add_argument("--asks", type=int, default=200_000, help="asks per case and round")
    p.add_argument("--rounds", type=int, default=5, help="rounds (alternating with the baseline's; median reported)")
    p.add_argument("--baseline", metavar="GIT_REV", help="also measure this revision's tree, round by round")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if not (BATCH <= a.asks <= 10_000_000 and 1 <= a.rounds <= 50):
        p.error(f"--asks must be {BATCH}..10000000 and --rounds 1..50")
    if a.inner:
        print(json.dumps(measure(a.asks)))
        return 0
    command = f"python bench/bench_limiter.py --asks {a.asks} --rounds {a.rounds}"
    print(f"$ {command}" + (f" --baseline {a.baseline}" if a.baseline else ""))
    ours, theirs = measure_rounds(Path(__file__).resolve(), ["--asks", str(a.asks)], a.rounds, a.baseline)
    rows = [("this tree", ours)] + ([(f"baseline {a.baseline}", theirs)] if theirs else [])
    med = {label: {c: statistics.median(r[c] for r in runs) for c in CASES} for label, runs in rows}
    for label, m in med.items():
        print(f"{label}: " + ", ".join(f"{c} {m[c]:.0f} ns" for c in CASES)
              + f" per ask (median of {a.rounds} rounds)")
    if theirs:
        b, n = med[f"baseline {a.baseline}"], med["this tree"]
        print("baseline / this tree: " + ", ".join(f"{c} {b[c] / n[c]:.2f}x" for c in CASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
