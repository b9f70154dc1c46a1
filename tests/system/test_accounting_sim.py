"""The simulator's logged runs: the fairness report's totals equal what the simulated brokers
were told, to the message, however many reports the topic lost or duplicated.

The oracle is the simulator's own count of admitted messages (sim.engine: what each broker's
asks got back, per tick), which shares no code with the usage log or the report: the report
reads the logs' tick accounting (rgd.usage_log.accounting).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

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
    acct = summary["accounting"]
    assert acct["source"] == "tick accounting" and acct["missing_frames"] == 0 and not acct["crashed"]
    assert {d["ended"] for d in acct["daemons"].values()} == {"stopped"}
