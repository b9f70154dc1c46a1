"""bench/bench_own_reports.py runs, against a baseline revision too (a small size: the figures
are the benchmark's to judge, this only keeps the script from rotting)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_own_reports.py"


def test_bench_own_reports_prints_this_tree_and_the_baseline_with_ratios() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--groups", "200", "--asks", "20", "--ticks", "2",
                          "--rounds", "1", "--baseline", "HEAD"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("$ python bench/bench_own_reports.py --groups 200 --asks 20 --ticks 2 --rounds 1"
                                 " --baseline HEAD")
    rows = re.findall(r"^(this tree|baseline HEAD): 200 groups x 2 kinds, 20 asks/s: tick [0-9.]+ ms, "
                      r"reacts [0-9.]+ ms per tick", out.stdout, re.M)
    assert rows == ["this tree", "baseline HEAD"]
    ratios = r"^baseline / this tree: tick [0-9.]+x, reacts ([0-9.]+x|- \(nothing measured\))$"
    assert re.search(ratios, out.stdout, re.M)


def test_bench_own_reports_refuses_unbounded_loops() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--ticks", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--ticks 1..100" in out.stderr
