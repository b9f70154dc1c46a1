"""Smoke test of bench/bench_batch.py and bench/raw_load.py: every stage runs briefly
and prints its figures. Not a timed assertion: the numbers only have to exist, be
positive and agree with each other."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_batch.py"


def test_every_stage_tiny(tmp_path: Path) -> None:
    assert shutil.which("wrk"), "wrk is not installed: run scripts/system-deps.sh"
    out = tmp_path / "batch.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--duration", "1", "--warmup", "0", "--connections", "4",
                           "--transport-pairs", "1", "--transport-seconds", "1", "--client-callers", "100",
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stdout = proc.stdout
    assert stdout.startswith("# command: python bench/bench_batch.py --duration 1")
    for label in ("batch_10ns", "batch_1000ns"):
        assert re.search(rf"^  {label} +[\d,]+ dec/CPU-s = [\d.]+x single  target >= [\d,]+  (MET|BELOW TARGET)$",
                         stdout, re.M), label
    assert re.search(r"^  unix/tcp single +req/s [\d.]+x \(unix [\d,]+; tcp [\d,]+\); daemon CPU per request",
                     stdout, re.M)
    assert re.search(r"^  single at 50 % load .* p99 [\d.]+ ms .*target p99 <= 1.0 ms .*trivial handler", stdout, re.M)
    assert re.search(r"^  rgd.client, one process +[\d,]+ decisions/s .*x raw batch_10ns", stdout, re.M)
    assert len(re.findall(r"^  client call at +\d+%", stdout, re.M)) == 3

    doc = json.loads(out.read_text())
    runs, fig = doc["runs"], doc["figures"]
    by_case = {r["case"]: r for r in runs["wrk"]}
    assert set(by_case) == {"single", "batch_10ns", "batch_1000ns"}
    for case, row in by_case.items():
        assert row["errors"] == 0 and row["req_per_s"] > 0, case
        assert abs(row["decisions_per_s"] - row["req_per_s"] * (1 if case == "single" else 1000)) <= 1000
    assert fig["batch_10ns_decisions_per_cpu_s"]["per_round"] == [by_case["batch_10ns"]["decisions_per_cpu_s"]]
    assert {(r["transport"], r["body"]) for r in runs["transport"]} == {
        ("tcp", "single"), ("unix", "single"), ("tcp", "batch_10ns"), ("unix", "batch_10ns")}
    assert all(r["requests"] > 0 and r["non_2xx"] == 0 and r["errors"] == 0 for r in runs["transport"])
    assert {(r["server"], r["body"]) for r in runs["latency"]} == {
        ("rgd", "single"), ("trivial", "single"), ("rgd", "batch_10ns"), ("trivial", "batch_10ns")}
    client = runs["client"]
    assert [c["load"] for c in client] == [1.0, 0.1, 0.5, 0.9]
    assert all(c["calls"] > 0 and c["not_from_daemon"] == 0 and c["denied"] == 0 for c in client)
    assert client[0]["asks_per_request"] > 1  # 100 closed-loop callers: coalesced


def test_raw_load_counts_what_the_server_answered(tmp_path: Path) -> None:
    """raw_load.py against the trivial server over TCP, closed and open loop."""
    from rgd.transport.embedded_broker import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, str(REPO / "bench" / "trivial_server.py"), "--listen",
                               f"127.0.0.1:{port}"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        body = tmp_path / "b.json"
        body.write_text('{"requests":[{"namespace":"a/b"},{"namespace":"a/c"}]}')
        import time
        import urllib.request

        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, "trivial server did not start"
                time.sleep(0.1)
        for extra in ([], ["--rate", "200"]):
            proc = subprocess.run([sys.executable, str(REPO / "bench" / "raw_load.py"), "--target",
                                   f"tcp:127.0.0.1:{port}", "--body-file", str(body), "--duration", "1",
                                   "--connections", "4", *extra], cwd=REPO, capture_output=True, text=True, timeout=60)
            line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH_JSON "))
            s = json.loads(line[len("BENCH_JSON "):])
            assert s["requests"] > 0 and s["non_2xx"] == 0 and s["errors"] == 0
            assert s["p999_us"] >= s["p99_us"] >= s["p50_us"] > 0
            if extra:
                assert 150 <= s["requests"] <= 210  # open loop: about 200 requests in 1 s, never more
    finally:
        server.terminate()
        server.wait(10)


def test_baseline_is_compared_in_the_same_run(tmp_path: Path) -> None:
    """--baseline REV: stage 1 against that revision's daemon first, then this tree's, and the
    ratio per case beside both absolute figures."""
    assert shutil.which("wrk"), "wrk is not installed: run scripts/system-deps.sh"
    out = tmp_path / "batch.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--duration", "1", "--warmup", "0", "--connections", "4",
                           "--skip", "transport,latency,client", "--baseline", "HEAD", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "# baseline HEAD: 1. batch vs single, wrk" in proc.stdout
    for case in ("single", "batch_10ns", "batch_1000ns"):
        assert re.search(rf"^  {case} +this tree [\d,]+ vs baseline HEAD [\d,]+ dec/CPU-s \(best round each\) = "
                         r"[\d.]+x$", proc.stdout, re.M), case
    base = json.loads(out.read_text())["figures"]["baseline"]
    assert base["revision"] == "HEAD"
    for case in ("single", "batch_10ns", "batch_1000ns"):
        f = base[case]
        assert f["baseline"] > 0 and f["this_tree"] > 0 and f["ratio"] == round(f["this_tree"] / f["baseline"], 3)
