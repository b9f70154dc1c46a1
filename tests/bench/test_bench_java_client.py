"""Smoke test of bench/bench_java_client.py: one tiny round of each client against one daemon;
the figures only have to exist, come from the daemon, and agree with each other."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_java_client.py"


def test_both_clients_tiny(tmp_path: Path) -> None:
    out = tmp_path / "java.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--duration", "1", "--warmup", "1", "--callers", "100",
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stdout = proc.stdout
    assert stdout.startswith("# command: python bench/bench_java_client.py --duration 1 --warmup 1 --callers 100")
    for client in ("java", "python"):
        assert re.search(rf"^  round 1 {client} +[\d,]+ decisions/s \(\d+ asks/request, [\d,]+ requests\)  daemon "
                         rf"[\d.]+ CPU-s for [\d,]+ decisions = [\d.]+ us each", stdout, re.M), client
        assert re.search(rf"^  {client} +one process +[\d,]+ decisions/s  daemon +[\d.]+ CPU-us/decision", stdout,
                         re.M), client
    assert re.search(r"^  java/python: [\d.]+x decisions/s, [\d.]+x daemon CPU per decision$", stdout, re.M)

    doc = json.loads(out.read_text())
    runs = {r["client"]: r for r in doc["runs"]}
    assert set(runs) == {"java", "python"}
    for client, r in runs.items():
        assert r["calls"] > 0 and r["requests"] > 0 and r["not_from_daemon"] == 0 and r["denied"] == 0, client
        assert r["decisions"] >= r["calls"] and r["daemon_cpu_s"] > 0, client
        assert abs(r["daemon_cpu_us_per_decision"] - r["daemon_cpu_s"] / r["decisions"] * 1e6) < 0.01, client
        assert r["asks_per_request"] > 1, client  # 100 callers in one process: coalesced
    fig = doc["figures"]
    assert fig["java"]["decisions_per_s"] == runs["java"]["calls_per_s"]
    assert fig["java_over_python_decisions_per_s"] == round(
        runs["java"]["calls_per_s"] / runs["python"]["calls_per_s"], 3)
