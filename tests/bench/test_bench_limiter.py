"""bench/bench_limiter.py runs, against a baseline revision too (a small size: the figures
are the benchmark's to judge, this only keeps the script from rotting)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_limiter.py"


def test_bench_limiter_prints_this_tree_and_the_baseline_with_ratios() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--asks", "1000", "--rounds", "1", "--baseline", "HEAD"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("$ python bench/bench_limiter.py --asks 1000 --rounds 1 --baseline HEAD")
    rows = re.findall(r"^(this tree|baseline HEAD): admit [0-9]+ ns, deny [0-9]+ ns, batch [0-9]+ ns per ask",
                      out.stdout, re.M)
    assert rows == ["this tree", "baseline HEAD"]
    assert re.search(r"^baseline / this tree: admit [0-9.]+x, deny [0-9.]+x, batch [0-9.]+x$", out.stdout, re.M)


def test_bench_limiter_refuses_unbounded_loops() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--rounds", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--rounds 1..50" in out.stderr
