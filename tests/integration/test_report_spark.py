"""run_report end to end on logs written by UsageLog: exact figures, damage, HTML in Chromium.

One Spark run (local[2]) for the whole module: the scenario below is small
but has everything the report must get right: suppression (forward fill), a
daemon leaving, a restart (new incarnation), lost receipts, a corrupt frame
in the middle of a segment, a torn tail, and a segment of pure garbage.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the report needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="the report needs the spark extra: pip install -e '.[spark]'")

import pandas as pd
import pyarrow.parquet as pq

from rgd.usage_log import UsageLog, read_segment
from rgd.usage_log.frame import RECEIPT
from rgd.wire.usage_report_pb2 import UsageReport
from tests.support.fake_clock import FakeClock
from tests.support.scripts import load_script

pytestmark = pytest.mark.spark

T0 = 1_700_000_000  # seconds, a whole tick
TICKS = 40
QUOTA = {"g1": 100.0, "g2": 50.0}
OFFSET_MS = {"a": 100, "b": 300, "c": 500}
LEAVE_AT = 25  # c's last report, with leaving=True
RESTART_AT = 30  # b restarts: new incarnation, sequence back to 1
DROPPED = {("a", "b", 1, 10), ("a", "b", 1, 11), ("b", "c", 1, 20)}  # (receiver, publisher, inc, seq) never heard


def demand(d: str, g: str, t: int) -> int:
    return {"g1": {"a": 80, "b": 30, "c": 20}, "g2": {"a": 10, "b": 10, "c": 10}}[g][d]


def admitted(d: str, g: str, t: int) -> int:
    if g == "g2":
        return 10
    if d == "a":
        if t < 5:
            return 80  # overshoot until the limits converge
        return 50 if t < LEAVE_AT + 3 else 70  # takes c's share two ticks after c left
    return demand(d, g, t)


def build_scenario(root: Path) -> dict:
    clock = FakeClock(float(T0))
    logs = {d: UsageLog(root / "logs", d, segment_max_bytes=3000, clock=clock) for d in "abc"}
    inc = {"a": 1, "b": 1, "c": 1}
    seq = {"a": 0, "b": 0, "c": 0}
    expected = {"admitted": {"g1": 0, "g2": 0}, "rows": 0}
    for t in range(TICKS):
        reports = {}
        for d in "abc":
            if d == "c" and t > LEAVE_AT:
                continue
            if d == "b" and t == RESTART_AT:
                logs["b"].close()
                logs["b"] = UsageLog(root / "logs", "b", segment_max_bytes=3000, clock=clock)
                inc["b"], seq["b"] = 2, 0
            seq[d] += 1
            pub_ms = (T0 + t) * 1000 + OFFSET_MS[d]
            r = UsageReport(daemon_id=d, sequence=seq[d], publish_time_ms=pub_ms, tick_ms=1000,
                            incarnation=inc[d], leaving=(d == "c" and t == LEAVE_AT))
            for g in ("g1", "g2"):
                if d == "b" and g == "g2" and t % 3 and not (d == "b" and t == RESTART_AT):
                    continue  # suppressed: unchanged since the last report
                gu = r.groups.add(group=g)
                adm = admitted(d, g, t)
                gu.publish.admitted_messages = adm
                gu.publish.throttled_messages = demand(d, g, t) - adm
                gu.publish.limit_messages = float(adm)
                gu.publish.quota_messages = QUOTA[g]
                gu.dispatch.quota_messages = gu.dispatch.quota_bytes = -1.0
                gu.publish.quota_bytes = gu.dispatch.limit_messages = gu.dispatch.limit_bytes = -1.0
                gu.publish.limit_bytes = -1.0
                expected["admitted"][g] += adm
                expected["rows"] += 1
            raw = r.SerializeToString()
            clock.t = pub_ms / 1000.0
            logs[d].append_published(raw)
            reports[d] = (r, raw)
        for recv in "abc":
            if recv == "c" and t > LEAVE_AT:
                continue
            for pub, (r, raw) in reports.items():
                if pub == recv or (recv, pub, r.incarnation, r.sequence) in DROPPED:
                    continue
                clock.t = r.publish_time_ms / 1000.0 + 0.005
                logs[recv].append_receipt(r, raw, receive_time=clock.t)
        for log in logs.values():
            log.maintain()
    for log in logs.values():
        log.close()
    return expected


def damage(root: Path) -> dict:
    """Corrupt one receipt frame in the middle of a's segments; tear the tail of one of b's; add garbage."""
    segs = sorted((root / "logs").glob("a-*.seg"))
    target = None
    for p in segs[1:-1]:
        frames, _ = read_segment(p)
        for i, f in enumerate(frames[1:-1], start=1):
            m = f.metadata
            if m.kind == RECEIPT and m.publisher_id == "c" and 12 <= m.publisher_sequence <= 20:
                target = (p, f, m.publisher_sequence, frames[i + 1].offset - f.offset)
                break
        if target:
            break
    p, f, lost_seq, flen = target
    data = bytearray(p.read_bytes())
    data[f.offset + 12] ^= 0xFF
    p.write_bytes(bytes(data))
    victim = last = None
    for q in sorted((root / "logs").glob("b-*.seg"))[:-1]:  # not the last: a later segment shows the gap
        frames, _ = read_segment(q)
        if frames[-1].metadata.kind == RECEIPT:  # tear a receipt, so the admitted totals stay exact
            victim, last = q, frames[-1]
            break
    assert victim is not None
    torn = 9
    victim.write_bytes(victim.read_bytes()[:-torn])
    garbage = root / "logs" / "zz-00000000000000000000-00000000000000000009.seg"
    garbage.write_bytes(b"\xabRGL" + bytes(range(256)) * 3)
    return {"corrupt_len": flen, "lost_seq": lost_seq, "torn": torn, "torn_frame": last,
            "garbage": garbage.stat().st_size, "garbage_name": garbage.name, "corrupt_file": p.name,
            "corrupt_offset": f.offset}


@pytest.fixture(scope="module")
def spark():
    from rgd.fairness.options import ReportOptions
    from rgd.fairness.spark_session import spark_session

    session = spark_session("local[2]", ReportOptions(driver_memory="1g"), progress=False)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, spark) -> dict:
    from rgd.fairness.job import run_report

    root = tmp_path_factory.mktemp("report")
    expected = build_scenario(root)
    dmg = damage(root)
    summary = run_report(str(root / "logs"), str(root / "out"), progress=False, spark=spark)
    return {"root": root, "out": root / "out", "summary": summary, "expected": expected, "damage": dmg}


def test_nothing_but_garbage_still_reports(tmp_path: Path, spark) -> None:
    from rgd.fairness.job import run_report

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "x-00000000000000000000.open").write_bytes(b"\xabRGL\x00\x00\x00\x05abc")
    (tmp_path / "logs" / "notes.txt").write_text("not a segment")
    s = run_report(str(tmp_path / "logs"), str(tmp_path / "out"), progress=False, spark=spark)
    assert s["input"]["segments"] == 1 and s["input"]["group_rows"] == 0 and s["groups"] == {}
    assert s["damage"]["open_tail_bytes"] == 11 and s["damage"]["torn_tail_bytes"] == 0  # an open segment's tail
    assert (tmp_path / "out" / "report.html").exists()


def test_admitted_totals_and_rows_equal_what_was_written(report: dict) -> None:
    s, exp = report["summary"], report["expected"]
    assert s["input"]["group_rows"] == exp["rows"]
    for g in ("g1", "g2"):
        assert s["groups"][g]["totals"]["publish_messages_admitted"] == exp["admitted"][g]
    assert s["grid_ms"] == 1000 and s["span"]["ticks"] == TICKS
    assert sorted(s["daemons"]) == ["a", "b", "c"] and s["daemons_stopped"] == ["c"] and s["daemons_left"] == []


def test_loss_equals_the_gaps(report: dict) -> None:
    s = report["summary"]
    loss = pq.read_table(report["out"] / "loss.parquet").to_pandas()
    lost = {(r.receiver, r.publisher, r.incarnation): r.lost for r in loss.itertuples() if r.lost}
    torn = report["damage"]["torn_frame"].metadata  # the receipt cut by the torn tail is lost too
    want = {("a", "b", 1): 2, ("b", "c", 1): 1, ("a", "c", 1): 1}  # dropped + the corrupt receipt (a <- c)
    key = ("b", torn.publisher_id, torn.publisher_incarnation)
    want[key] = want.get(key, 0) + 1
    assert lost == want
    assert s["loss"]["lost"] == sum(lost.values())
    assert s["loss"]["by_receiver"]["a"] == 3 and s["loss"]["by_receiver"]["b"] == 2
    # b's restart is a new incarnation, not 30 lost reports
    assert set(loss[(loss["publisher"] == "b")]["incarnation"]) == {1, 2}
    assert s["delay_ms"]["max"] == pytest.approx(5.0, abs=0.01)
    assert s["delay_ms"]["mean"] == pytest.approx(5.0, abs=0.01)


def test_damage_is_counted_with_file_and_offset(report: dict) -> None:
    d, dm = report["summary"]["damage"], report["damage"]
    assert d["corrupt_regions"] == 1 and d["bytes_skipped"] == dm["corrupt_len"]
    assert d["frames_lost_in_segments"] == 1
    assert d["torn_tail_bytes"] == dm["torn_frame"].end - dm["torn_frame"].offset - dm["torn"] + dm["garbage"]
    assert d["frames_lost_between_segments"] == 1  # the torn receipt, seen from the next segment's index
    assert d["segments_damaged"] == 3
    problems = "\n".join(d["problems"])
    corrupt = f"{dm['corrupt_file']}: corrupt region of {dm['corrupt_len']} bytes at offset {dm['corrupt_offset']}"
    assert corrupt in problems
    assert dm["garbage_name"] in problems


def test_per_tick_figures_forward_fill_leave_and_convergence(report: dict) -> None:
    ticks = pd.read_parquet(report["out"] / "ticks")
    g1 = ticks[(ticks["group"] == "g1") & (ticks["dim"] == "publish_messages")].set_index("bucket").sort_index()
    assert len(g1) == TICKS
    b = lambda t: T0 + t  # noqa: E731
    assert g1.loc[b(0), "admitted"] == 130 and g1.loc[b(0), "overshoot_ratio"] == pytest.approx(0.3)
    assert g1.loc[b(10), "fair_error"] == 0 and g1.loc[b(10), "jain"] == pytest.approx(1.0)
    # c gone, a not yet up: demands 80 and 30 share 100 max-min fairly as 70 and 30 (30 is
    # met, the rest goes to the other), and the 80 got 50: (50 - 70) / 100 off its fair share.
    # (A literal: the report's own max_min_fair would grade the report with itself.)
    assert g1.loc[b(26), "fair_error"] == pytest.approx((70 - 50) / 100)
    assert g1.loc[b(LEAVE_AT), "n_present"] == 3 and g1.loc[b(LEAVE_AT + 1), "n_present"] == 2
    g2 = ticks[(ticks["group"] == "g2") & (ticks["dim"] == "publish_messages")].set_index("bucket")
    assert (g2.loc[b(1):b(LEAVE_AT), "admitted"] == 30).all()  # b's suppressed g2 is forward-filled
    assert g2.loc[b(1), "n_reported"] == 2 and g2.loc[b(1), "n_present"] == 3
    conv = pd.read_parquet(report["out"] / "convergence.parquet")
    c1 = conv[(conv["group"] == "g1") & (conv["dim"] == "publish_messages")].sort_values("event_bucket")
    start = c1.iloc[0]
    assert (start["kind"], bool(start["converged"]), start["seconds"]) == ("start", True, 5.0)
    last = c1.iloc[-1]
    assert last["event_bucket"] in (b(LEAVE_AT), b(LEAVE_AT + 1)) and bool(last["converged"])
    assert last["end_bucket"] == b(LEAVE_AT + 3)
    s = report["summary"]["groups"]["g1"]["dims"]["publish_messages"]
    assert s["ticks_over_quota"] == 5 and s["overshoot_ratio_max"] == pytest.approx(0.3)
    shares = pd.read_parquet(report["out"] / "shares")
    assert set(shares[shares["group"] == "g1"]["daemon"]) == {"a", "b", "c"}
    daemons = pq.read_table(report["out"] / "daemons.parquet").to_pandas()
    assert set(daemons["daemon"]) == {"a", "b", "c"}


def test_outputs_exist_and_summary_json_matches(report: dict) -> None:
    out = report["out"]
    for name in ("segments.parquet", "loss.parquet", "delay.parquet", "delay_ticks.parquet", "totals.parquet",
                 "convergence.parquet", "daemons.parquet", "membership.parquet", "summary.json", "report.html"):
        assert (out / name).exists(), name
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["input"] == report["summary"]["input"]
    html = (out / "report.html").read_text()
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert html.count("<svg") >= 4


def test_html_renders_in_headless_chromium(report: dict) -> None:
    helper = load_script("render_report_png")
    exe = helper.find_chromium()
    assert exe is not None, "chromium is not installed: run scripts/system-deps.sh (README command 2 does)"
    result = helper.render(exe, report["out"] / "report.html", report["root"] / "shot.png")
    assert result["svg"] >= 4 and result["polylines"] >= 6 and result["paths"] >= 1, result
    assert result["size_ratio"] > 3, result


def test_html_says_what_its_numbers_measure(report: dict) -> None:
    html = (report["out"] / "report.html").read_text()
    s = report["summary"]
    run = html[html.index("<h2>Run</h2>"):]
    assert "{" not in run, "a Python dict repr in the Run section"
    assert "Membership events: " in run and "Report stages: " in run
    assert f'{s["span"]["ticks"]} ticks of 1000 ms from the first report to the last' in html
    assert "ticks measured" in html  # a group's own tick count, which can be smaller
    assert "<b>Delay</b> is the time from a report" in html
