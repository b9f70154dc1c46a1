"""Simulator plumbing: schema validation, transport, determinism, CLI, scale mode, log hook.

Its longer runs (whole scenarios, the CLI writing files): pure code, but kept out of tests/unit so
that tier stays under 20 s; the quick tests are in tests/unit/test_sim_engine.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.__main__ import main
from sim.engine import run
from sim.metrics import converged, evaluate
from sim.scale import ScaleSpec, members_of, run_scale
from sim.scenario import load, parse
from tests.unit.test_sim_engine import COUPLED


def test_same_seed_same_run() -> None:
    sc = load("loss")
    a, b = evaluate(run(sc, "rgd")), evaluate(run(sc, "rgd"))
    assert a == b


def test_scale_mode_small() -> None:
    r = run_scale(ScaleSpec(daemons=10, groups=400, spread=5, ticks=4))
    assert r.groups_per_daemon == 200
    assert r.report_bytes_first > r.report_bytes_per_tick > 0  # suppression saves bytes
    assert r.map_entries_own == 200 * 5
    assert r.map_entries_all > r.map_entries_own and r.map_bytes_all > r.map_bytes_own > 0
    assert r.calc_seconds_per_tick > 0


def test_cli_writes_markdown_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["skew", "--strategy", "rgd", "--strategy", "pulsar", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| `skew` | rgd |" in out and "| pulsar |" in out
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [r["strategy"] for r in doc["results"]] == ["rgd", "pulsar"]
    assert doc["results"][0]["ticks_to_converge"] <= 3
    assert (tmp_path / "results.md").read_text().startswith("## Strategy comparison")


def test_cli_log_dir_writes_usage_logs(tmp_path: Path) -> None:
    from rgd.usage_log import read_segment
    from rgd.wire.usage_report_pb2 import UsageReport

    assert main(["join", "--strategy", "rgd", "--log-dir", str(tmp_path)]) == 0
    segments = sorted((tmp_path / "join" / "rgd").glob("a-*.seg"))
    assert segments
    frames = [f for seg in segments for f in read_segment(seg)[0]]
    published = [f for f in frames if f.payload]
    assert published and frames[0].metadata.daemon_id == "a"
    rep = UsageReport()
    rep.ParseFromString(published[0].payload)  # the report bytes, untouched
    assert rep.daemon_id == "a"


def test_scale_assignment_is_balanced() -> None:
    spec = ScaleSpec(daemons=100, groups=100_000, spread=5)
    counts = [0] * 100
    for g in range(0, 100_000):
        ms = members_of(g, spec)
        assert len(ms) == 5
        for d in ms:
            counts[d] += 1
    assert set(counts) == {5000}


def test_a_change_ends_the_windows_of_the_dimensions_it_touches_only() -> None:
    doc = {"ticks": 12, "daemons": ["a", "b"],
           "groups": {"g": {"publishRateInMsgs": 100}, "h": {"publishRateInMsgs": 100}},
           "demand": {"g": {"a": 80, "b": 40}, "h": {"a": 30, "b": 30}},
           "events": [{"at": 3, "demand": {"h": {"a": {"publish": 90}}}},
                      {"at": 5, "groups": {"h": {"publishRateInMsgs": 50}}},
                      {"at": 7, "message_sizes": {"h": 2000}},
                      {"at": 9, "join": ["c"]}]}
    m = evaluate(run(parse(doc), "rgd"))
    starts = {dim: [w.change for w in m.windows if w.dimension == dim] for dim in ("g/publish", "h/publish")}
    # h's demand, quota and sizes are not g's: g's windows run from the start to the join.
    assert starts["g/publish"] == ["start", "join c"]
    assert starts["h/publish"] == ["start", "demand", "groups h", "sizes h", "join c"]
    first_g = next(w for w in m.windows if w.dimension == "g/publish")
    assert (first_g.observable, first_g.end) == (1, 9)


def test_coupled_limits_are_recorded_and_judged_jointly() -> None:
    from sim.metrics import binding, judge, utilization

    r = run(parse(COUPLED), "static")
    t = r.dims["g/publish"][-1]
    assert t is not None and t.quota == 1000 and t.bytes_quota == 1_000_000
    assert t.message_bytes == {"a": 4000, "b": 4000, "c": 500}
    # Worked by hand: a and b are bytes-dominant (4 kB of 1 MB/s per message), c messages-dominant;
    # equal dominant shares at 0.4: a = b = 100 msg/s, c = 400 msg/s, bytes exactly full.
    j = judge(t)
    assert j.shares == pytest.approx({"a": 100, "b": 100, "c": 400}) and binding(j) == "bytes"
    # static: 1/3 of each dimension per daemon, so c is held to 333 msg/s and a, b to 83 each
    # by their bytes: bytes usage (83 + 83) * 4000 + 333 * 500 of 1 MB/s, not the 50 % a messages
    # view would read.
    bytes_used = sum(t.admitted[d] * t.message_bytes[d] for d in "abc")
    assert utilization(t) == pytest.approx(bytes_used / 1_000_000)
    assert utilization(t) > 0.75 and not converged(t)
