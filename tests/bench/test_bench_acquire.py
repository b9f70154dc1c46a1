"""Smoke test of bench/bench_acquire.py: every case runs for a second and the
report has its figures. Not a timed assertion: the numbers only have to exist,
be positive and agree with each other (decisions = requests x batch)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_acquire.py"
ROW = re.compile(r"^(\S+)\s+(asyncio|uvloop)\s+([\d,]+)\s+([\d,]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)"
                 r"\s+(\d+)\s+([\d,]+)\s+([\d,]+)$")


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def _rows(stdout: str) -> dict[str, tuple]:
    table = re.split(r"\n# results[^\n]*\n", stdout, maxsplit=1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[1:]:
        m = ROW.match(line)
        assert m, f"not a result row: {line!r}"
        rows[m.group(1)] = (int(m.group(3).replace(",", "")), int(m.group(4).replace(",", "")),
                            float(m.group(5)), float(m.group(6)), int(m.group(7)))
    return rows


def test_full_benchmark_tiny_mode(tmp_path: Path) -> None:
    # README command 2 installs every one (scripts/system-deps.sh, the bench extra):
    # a missing one is a broken setup, so it fails here instead of skipping.
    for tool in ("wrk", "redis-server"):
        assert shutil.which(tool), f"{tool} is not installed: run scripts/system-deps.sh"
    for module in ("limits", "coredis", "redis"):
        assert importlib.util.find_spec(module), f"{module} is missing: pip install -e '.[bench]'"
    out = tmp_path / "bench.json"
    # 4 connections: limits+Redis answers a batch of 100 in tens of ms, so every case
    # completes requests inside a 1 s window.
    proc = _run("--duration", "1", "--warmup", "0", "--connections", "4", "--ab-pairs", "2", "--ab-seconds", "1",
                "--corun-rounds", "1", "--corun-duration", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stdout = proc.stdout
    assert stdout.startswith("# command: python ")
    assert "--duration 1 --warmup 0 --connections 4" in stdout.splitlines()[0]
    assert re.search(r"^  co-run 1: trivial +[\d,]+ req/s .* rgd/trivial per CPU-s [\d.]+$", stdout, re.M)
    assert re.findall(r"^  alternate (\d): trivial +[\d,]+ req/s +rgd +[\d,]+ req/s +rgd/trivial [\d.]+$",
                      stdout, re.M) == ["1", "2"]
    assert re.search(r"^# machine: nproc=\d+ .*python=3\.", stdout, re.M)
    assert re.search(r"^# redis-server ran [\d,]+ commands for the limits server$", stdout, re.M)

    rows = _rows(stdout)
    assert set(rows) == {"trivial-single", "rgd-single", "limits-single", "trivial-batch100", "rgd-batch100",
                         "limits-batch100", "rgd-single-deny", "limits-single-deny"}
    for name, (rps, dps, p50, p99, non2xx) in rows.items():
        assert rps > 0, name
        assert p99 >= p50 > 0, name
        batch = 100 if "batch" in name else 1
        assert abs(dps - rps * batch) <= batch, name  # both printed rounded
        if name.endswith("-deny"):
            assert non2xx > 0, f"{name}: a 100 msg/s group at full load must answer 429s"
        else:
            assert non2xx == 0, name

    for label in ("rgd_single_over_trivial_single_req", "rgd_single_over_trivial_corun_per_cpu_s",
                  "rgd_single_over_trivial_alternating_req",
                  "rgd_batch100_decisions_per_s",
                  "rgd_single_over_limits_single_req", "rgd_batch100_over_limits_batch100_decisions"):
        assert re.search(rf"^  {label}\s+[\d,.]+x?(\s|$)", stdout, re.M), label

    doc = json.loads(out.read_text())
    assert doc["command"].endswith("--corun-duration 1 --out " + str(out))
    stages = [(r["stage"], r["other"]) for r in doc["single_ab"]]
    assert stages == [("alternate", "rgd"), ("alternate", "rgd"), ("corun", "rgd")]
    corun = doc["single_ab"][-1]
    assert corun["trivial_cpu_s"] > 0 and corun["other_cpu_s"] > 0 and corun["ratio"] > 0
    for key in ("rgd_single_over_trivial_alternating_req", "rgd_single_over_trivial_corun_per_cpu_s"):
        assert doc["ratios"]["uvloop"][key]["target"] == 0.8
    assert doc["machine"]["nproc"] >= 1 and doc["machine"]["python"].startswith("3.")
    by = {r["case"]: r for r in doc["results"]}
    assert by["rgd-batch100"]["decisions_per_s"] == pytest.approx(by["rgd-batch100"]["req_per_s"] * 100, rel=1e-3)
    ratio = doc["ratios"]["uvloop"]["rgd_single_over_trivial_single_req"]  # the default loop, as rgd ships
    assert ratio["target"] is None and ratio["value"] == pytest.approx(
        by["rgd-single"]["req_per_s"] / by["trivial-single"]["req_per_s"], rel=1e-2)
    assert "429" in by["rgd-single-deny"]["check"] and "429" in by["limits-single-deny"]["check"]


def test_python_fallback_generator_against_trivial_server() -> None:
    """The load generator used when wrk is missing drives the same servers and report."""
    proc = _run("--duration", "1", "--warmup", "0", "--connections", "4", "--loadgen", "python", "--rounds", "2",
                "--cases", "trivial-single,trivial-batch100", timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "python load generator" in proc.stdout
    # two rounds ran, the second in reverse order (A B, B A), and the table keeps each case's best
    order = re.findall(r"^  (\d): (\S+) ", proc.stdout, re.M)
    assert order == [("1", "trivial-single"), ("1", "trivial-batch100"), ("2", "trivial-batch100"),
                     ("2", "trivial-single")]
    assert "# results (best of 2 rounds per case)" in proc.stdout
    best = max(int(m.replace(",", "")) for m in re.findall(r"^  \d: trivial-single\s+uvloop\s+([\d,]+) req/s",
                                                            proc.stdout, re.M))
    rows = _rows(proc.stdout)
    assert set(rows) == {"trivial-single", "trivial-batch100"}
    assert all(r[0] > 0 and r[4] == 0 for r in rows.values())
    assert rows["trivial-batch100"][1] >= 100 * rows["trivial-batch100"][0] - 100
    assert rows["trivial-single"][0] == best


def test_unknown_case_is_refused() -> None:
    proc = _run("--cases", "rgd-single,nope", timeout=60)
    assert proc.returncode != 0 and "unknown nope" in proc.stderr


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_acquire", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_acquire", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_ratio_is_the_median_of_per_round_ratios() -> None:
    """Pure: rounds pair the two cases; one round a neighbour hit on one side only
    moves the median less than it moves a best-of-rounds ratio."""
    bench = _bench_module()

    def result(case: str, rnd: int, rps: float):
        return bench.Result(case=case, server=case.split("-")[0], loop="uvloop", batch=0, requests=int(rps),
                            seconds=1.0, req_per_s=rps, decisions_per_s=rps, p50_ms=1, p90_ms=1, p99_ms=1,
                            max_ms=1, non_2xx=0, socket_errors=0, generator="wrk", round=rnd,
                            decisions_per_cpu_s=rps)

    rounds = [(1000, 900), (1000, 880), (1400, 910)]  # round 3: trivial alone got a quiet core
    results = [r for i, (t, g) in enumerate(rounds, 1) for r in (result("trivial-single", i, t),
                                                                  result("rgd-single", i, g))]
    out = bench.ratios(bench.best_of_rounds(results), results, "uvloop", 100)
    ratio = out["rgd_single_over_trivial_single_req"]
    assert ratio["per_round"] == [0.9, 0.88, 0.65] and ratio["value"] == 0.88
    # What best-of-rounds on each side would have said: each side's best round (round 3's
    # quiet-core 1400 for trivial, 910 for rgd), a ratio below the 0.8 target.
    best = {r.case: r for r in bench.best_of_rounds(results)}
    assert (best["trivial-single"].round, best["rgd-single"].round) == (3, 3)
    assert bench.ratio(best["rgd-single"].req_per_s, best["trivial-single"].req_per_s) == 0.65 < 0.8
    assert bench.ratio(1.0, 0.0) is None  # no figure when the denominator has none


def test_single_ab_medians() -> None:
    bench = _bench_module()
    rows = [{"stage": "alternate", "loop": "uvloop", "other": "rgd", "ratio": r} for r in (0.9, 0.7, 0.88, 0.86)]
    rows += [{"stage": "corun", "loop": "uvloop", "other": "rgd", "ratio": r} for r in (0.85, 0.86, 0.79)]
    rows += [{"stage": "corun", "loop": "uvloop", "other": "control", "ratio": r} for r in (0.99, 1.01)]
    out = bench.single_ratios(rows, "uvloop")
    assert out["rgd_single_over_trivial_alternating_req"]["value"] == 0.87
    assert out["rgd_single_over_trivial_alternating_req"]["met"] is True
    assert out["rgd_single_over_trivial_corun_per_cpu_s"]["value"] == 0.85
    assert out["control_trivial_over_trivial_corun_per_cpu_s"] == {"value": 1.0, "target": None, "met": None,
                                                                    "per_round": [0.99, 1.01]}
    assert "control_trivial_over_trivial_alternating_req" not in out
