"""bench/bench_second_window.py runs and prints both cases with their ratio (a small size:
the figures are the benchmark's to judge, this only keeps the script from rotting)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_second_window.py"


def test_bench_second_window_prints_both_cases_against_no_window() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--asks", "2000", "--rounds", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("$ python bench/bench_second_window.py --asks 2000 --rounds 1")
    lines = re.findall(r"50 msg/s share, (\d+) asks/s offered: no window \d+ ns, window \d+ ns per acquire: "
                       r"[0-9.]+x", out.stdout)
    assert lines == ["2000", "40"]


def test_bench_second_window_refuses_unbounded_loops() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--asks", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--asks must be" in out.stderr
