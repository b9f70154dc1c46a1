"""`rgd up`, the README's main command, runs end to end and exits 0."""

import subprocess
import sys
from pathlib import Path


def test_rgd_up_runs_and_exits_zero(tmp_path: Path):
    work = tmp_path / "up"
    proc = subprocess.run(
        [sys.executable, "-m", "rgd.cli", "up", "--daemons", "3", "--duration", "30", "--workdir", str(work)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "daemons ready" in proc.stdout
    assert "tenant-a" in proc.stdout  # the table was printed (non-TTY: every 5 s)
    logs = list((work / "logs").rglob("*"))
    assert any(p.is_file() for p in logs), "the daemons logged nothing"
    assert (work / "report" / "report.html").exists()
