"""`rgd up`, the README's main command, runs end to end and exits 0; what it prints."""

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

from rgd.showcase import new_run_dir, report_lines, status_table


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
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    first = new_run_dir(tmp_path, now)
    (first / "report.html").write_text("first run")
    second = new_run_dir(tmp_path, now)
    assert first.name == "20260102T030405Z" and second.name == "20260102T030405Z-2"
    assert (first / "report.html").read_text() == "first run"
    assert (tmp_path / "latest").resolve() == second


def test_status_table_reads_as_rows_of_numbers():
    table = status_table(["tenant-a"], 300, ["daemon-1", "daemon-2"],
                         offered={(0, 0): 216, (0, 1): 36}, admitted={(0, 0): 156, (0, 1): 36},
                         shares={("tenant-a", "daemon-1"): 264.0}, elapsed=12)
    console = Console(record=True, width=100)
    console.print(table)
    rows = [" ".join(line.replace("│", " ").replace("┃", " ").split()) for line in console.export_text().splitlines()]
    assert "group daemon demand limit admitted" in rows
    assert "tenant-a all daemons 252 300 192" in rows
    assert "daemon-1 216 264 156" in rows
    assert "daemon-2 36 - 36" in rows  # no share heard yet


def test_report_lines_say_what_the_report_found():
    summary = {
        "grid_ms": 1000, "span": {"ticks": 61}, "daemons": ["daemon-1", "daemon-2", "daemon-3"],
        "options": {"tolerance": 0.05},
        "loss": {"lost": 2, "expected": 540},
        "delay_ms": {"p50": 29.9, "mean": 512.3},
        "groups": {"tenant-a": {"dims": {"publish_messages": {
            "admitted_mean": 291.6, "demand_mean": 358.4, "quota_mean": 300.0, "overshoot_ratio_max": 0.031,
            "ticks_over_quota": 0, "jain_mean": 0.9712}}}},
    }
    lines = report_lines(summary, Path("/r/report.html"))
    assert lines == [
        "fairness report: /r/report.html",
        "  61 ticks of 1 s from the first report to the last, 3 daemons, 1 groups",
        "  tenant-a: admitted 292/s of 358/s demand, quota 300/s (worst tick 3.1% over it; 0 ticks more than 5% "
        "over); Jain index of the daemons' shares 0.971 on average (1 = each daemon got its max-min fair share)",
        "  reports: 2 of 540 lost; delay from publish to the receiver applying it at its next tick: median 30 ms, "
        "mean 512 ms",
    ]
