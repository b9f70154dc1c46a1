"""The simulator's logged runs: the fairness report's totals equal what the simulated brokers
were told, to the message, however many reports the topic lost or duplicated.

The oracle is the simulator's own count of admitted messages (sim.engine: what each broker's
asks got back, per tick), which shares no code with the usage log or the report: the report
reads the logs' tick accounting (rgd.usage_log.accounting).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from sim.engine import run
from sim.scenario import parse
from sim.usage_logs import UsageLogs

pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark

SCENARIO = {
    "description": "skew, a step and a graceful leave, with a lossy topic that duplicates too",
    "ticks": 24, "daemons": ["a", "b", "c"],
    "transport": {"loss": 0.3, "duplicate": 0.3, "delay": 0.5},
    "groups": {"g": {"publishRateInMsgs": 900}, "h": {"publishRateInMsgs": 200}},
    "demand": {"g": {"a": 800, "b": 300, "c": 100}, "h": {"a": 50, "b": 250}},
    "events": [{"at": 8, "demand": {"g": {"c": 600}}}, {"at": 16, "leave": "b"}],
}


@pytest.fixture(scope="module")
def spark():
    from rgd.fairness.options import ReportOptions
    from rgd.fairness.spark_session import spark_session

    session = spark_session("local[2]", ReportOptions(driver_memory="1g"), progress=False)
    yield session
    session.stop()


@pytest.mark.parametrize("strategy", ["rgd", "pulsar"])
def test_report_totals_equal_the_simulators_admitted_counts(tmp_path: Path, spark, strategy: str) -> None:
    from rgd.fairness import run_report

    logs = UsageLogs(tmp_path / "logs")
    result = run(parse(SCENARIO, "accounting"), strategy, log=logs)
    admitted: dict[tuple[str, str], float] = defaultdict(float)
    for dim, ticks in result.dims.items():
        group, kind = dim.split("/")
        if kind != "publish":  # no demand there
            assert not any(t is not None and any(t.admitted.values()) for t in ticks)
            continue
        for tick in ticks:
            for daemon, n in (tick.admitted if tick is not None else {}).items():
                admitted[(group, daemon)] += n
    assert result.reports_lost > 0  # the topic did lose reports
    summary = run_report(str(tmp_path / "logs"), str(tmp_path / "out"), progress=False, spark=spark)
    totals = pq.read_table(tmp_path / "out" / "totals.parquet").to_pandas()
    by_daemon = {(r.group, r.daemon): r.publish_messages_admitted for r in totals.itertuples() if
                 r.publish_messages_admitted}
    expected = {k: int(round(v)) for k, v in admitted.items() if v}
    assert all(v == int(v) for v in admitted.values())
    print(f"\nsimulator admitted {expected}\nreport admitted {by_daemon}")
    assert by_daemon == expected
    for group in ("g", "h"):
        assert summary["groups"][group]["totals"]["publish_messages_admitted"] == sum(
            v for (g, _), v in expected.items() if g == group)
    # The per-tick series adds up to the same totals: each tick's counts once, in its own tick.
    ticks = pd.read_parquet(tmp_path / "out" / "ticks")
    series = ticks[ticks["dim"] == "publish_messages"].groupby("group")["admitted"].sum()
    assert series.to_dict() == pytest.approx(  # a tick's counts spread over the seconds it spans, as float32
        {g: sum(v for (h, _), v in expected.items() if h == g) for g in ("g", "h")}, abs=0.05)
    acct = summary["accounting"]
    assert acct["source"] == "tick accounting" and acct["missing_frames"] == 0 and not acct["crashed"]
    assert {d["ended"] for d in acct["daemons"].values()} == {"stopped"}


def test_report_page_structure(tmp_path: Path, spark) -> None:
    """The page: one colour per daemon in every group's chart, never the quota's; delay and
    staleness on axes of their own; x labels inside the picture; no start-up tick among the
    worst moments; a graceful leave listed as stopped, not as a daemon that left."""
    import re
    from datetime import UTC, datetime

    from rgd.fairness import run_report
    from rgd.fairness.html import QUOTA_COLOR

    run(parse(SCENARIO, "page"), "rgd", log=UsageLogs(tmp_path / "logs"))
    summary = run_report(str(tmp_path / "logs"), str(tmp_path / "out"), progress=False, spark=spark)
    page = (tmp_path / "out" / "report.html").read_text()
    fills: dict[str, set[str]] = {}
    for daemon, fill in re.findall(r'<path class="area" data-daemon="([^"]+)" d="[^"]*" fill="([^"]+)"', page):
        fills.setdefault(daemon, set()).add(fill)
    assert set(fills) == {"a", "b", "c"}, fills
    assert all(len(f) == 1 for f in fills.values()), f"a daemon changes colour between groups: {fills}"
    colours = [next(iter(f)) for f in fills.values()]
    assert len(set(colours)) == 3 and QUOTA_COLOR not in colours
    assert len(re.findall(r'<path class="area" data-daemon=', page)) == 5  # g: a, b, c; h: a, b
    # every chart has its axes: a frame, y labels, x labels that stay inside the 575 px picture
    charts = re.findall(r"<svg [^>]*>(.*?)</svg>", page, flags=re.S)
    assert charts
    for svg in charts:
        assert 'class="plot"' in svg and 'class="yl"' in svg and 'class="xl"' in svg
        for x, anchor in re.findall(r'<text x="([\d.]+)" y="[\d.]+" class="xl" text-anchor="(\w+)"', svg):
            assert anchor != "middle" or 24 < float(x) < 575 - 24
    assert "Report delay, per tick" in page and "Report staleness, per tick" in page
    assert "Fair error</b> is" in page and "Convergence: after" in page
    # no start-up tick (nor the last, daemons stopping) among the worst moments
    ticks = pd.read_parquet(tmp_path / "out" / "ticks")
    for group, t in ticks.groupby("group"):
        seconds = sorted(t["time_s"].unique())
        startup = {datetime.fromtimestamp(s, tz=UTC).strftime("%H:%M:%S") for s in seconds[:2] + seconds[-1:]}
        section = page.split(f"<h3>{group} &middot;")[1].split('<div class="group">')[0]
        worst = section.split("Worst moments")[1].split("</table>")[0] if "Worst moments" in section else ""
        shown = set(re.findall(r"<tr><td>(\d\d:\d\d:\d\d)</td>", worst))
        assert shown and not shown & startup, (group, shown, startup)
    assert summary["daemons_stopped"] == ["a", "b", "c"] and summary["daemons_left"] == []
    assert "Daemons stopped (a clean shutdown" in page
