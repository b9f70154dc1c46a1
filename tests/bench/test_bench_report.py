"""bench/bench_report.py on a small set: its checks hold, and it exits 1 when they do not.

The generator's logs publish reports as daemons do, with unchanged groups suppressed, and
log each tick's accounting: the report's totals equal the generator's only when they come
from the accounting (the figures are the benchmark's to judge at full size)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "bench_report.py"


def test_bench_report_totals_equal_the_generators(tmp_path: Path) -> None:
    cmd = [sys.executable, str(BENCH), "--daemons", "4", "--groups", "6", "--ticks", "60", "--segment-mib", "1",
           "--logs", str(tmp_path / "logs"), "--out", str(tmp_path / "out"), "--baseline-segments", "1",
           "--target", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    checks = result["checks"]
    assert checks["admitted_totals_match"] and checks["throttled_totals_match"], checks
    assert checks["accounting_source"] == "tick accounting" and result["checks_hold"]
    assert result["group_rows"] == 4 * 6 * 60
    info = json.loads(next((tmp_path / "logs").glob("d4-g6-t60/bench-info.json")).read_text())
    assert sum(info["expected"]["admitted_messages"].values()) > 0
