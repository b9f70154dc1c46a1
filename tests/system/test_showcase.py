"""`rgd up`, the README's main command, runs end to end and exits 0; what it prints.

Here `rgd up` itself; its table and report lines, in process, are in tests/unit/test_showcase_text.py.
"""

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from rgd.devtools.showcase import new_run_dir
from tests.support.doc_examples import output_sample, shape_of

ROOT = Path(__file__).resolve().parents[2]


def test_rgd_up_runs_and_exits_zero(tmp_path: Path):
    work = tmp_path / "up"
    proc = subprocess.run(
        [sys.executable, "-m", "rgd.cli", "up", "--daemons", "3", "--duration", "30", "--workdir", str(work)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "daemons ready" in proc.stdout
    assert "all daemons" in proc.stdout and "tenant-a" in proc.stdout  # the table (non-TTY: every 5 s)
    run = (work / "latest").resolve()
    assert run.parent == work and run.name.endswith("Z")
    logs = list((run / "logs").rglob("*"))
    assert any(p.is_file() for p in logs), "the daemons logged nothing"
    assert (run / "report" / "report.html").exists()
    assert f"fairness report: {run / 'report' / 'report.html'}" in proc.stdout
    # The README's sample summary has this run's lines, words and units (its figures were measured).
    sample = output_sample((ROOT / "README.md").read_text(), "rgd up")
    printed = proc.stdout[proc.stdout.index(f"fairness report: {run}"):].strip("\n").splitlines()
    assert shape_of("\n".join(printed[:len(sample.splitlines())])) == shape_of(sample)
    assert "{'" not in proc.stdout, "a Python dict printed for people"
    assert " WARN " not in proc.stderr, "Spark's log lines among the progress lines"
    assert (run / "report" / "spark.log").stat().st_size > 0
    summary = json.loads((run / "report" / "summary.json").read_text())
    # The daemons tick once a second; early reports between ticks must not set the report's grid.
    assert summary["grid_ms"] == 1000, summary["grid_ms"]
    for group, doc in summary["groups"].items():
        for d in doc["dims"].values():  # 360/s offered against a 300/s quota: the quota is used, not exceeded
            assert 0.8 * 300 <= d["admitted_mean"] <= 1.05 * 300, (group, d["admitted_mean"])


def test_a_short_run_into_a_pipe_prints_its_table(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "rgd.cli", "up", "--daemons", "2", "--duration", "2", "--no-report",
         "--workdir", str(tmp_path / "up")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "TERM": "dumb"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "all daemons" in proc.stdout and "daemon-2" in proc.stdout


def test_each_run_keeps_its_own_directory(tmp_path: Path):
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    first = new_run_dir(tmp_path, now)
    (first / "report.html").write_text("first run")
    second = new_run_dir(tmp_path, now)
    assert first.name == "20260102T030405Z" and second.name == "20260102T030405Z-2"
    assert (first / "report.html").read_text() == "first run"
    assert (tmp_path / "latest").resolve() == second


