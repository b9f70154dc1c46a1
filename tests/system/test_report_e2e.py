"""3 real daemons on the embedded broker, then `rgd report` on their logs: the
report's figures equal what the daemons' own metrics said.

Suppression is off (`--report-tolerance 0`) so every tick's counts are in a
report: with suppression on, the report forward-fills suppressed ticks (within
the tolerance) and totals are estimates, not equalities. A fake publisher
injects a sequence gap so that loss is not trivially zero.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pulsar
import pyarrow.parquet as pq
import pytest

from rgd.devtools.load_generator import Stream, constant, run_streams
from rgd.wire.usage_report_pb2 import UsageReport
from tests.support.cluster_harness import Cluster

pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark

DEMANDS = {"d1": 240.0, "d2": 90.0, "d3": 30.0}


def test_report_matches_daemon_metrics(broker, tmp_path):
    c = Cluster(broker.url, tmp_path, quota=300, extra=["--report-tolerance", "0", "--log-segment-age", "3"])
    try:
        for d in DEMANDS:
            c.start(d, wait=False)
        for d in c.daemons.values():
            d.wait_ready()
        client = pulsar.Client(broker.url)
        try:
            producer = client.create_producer(c.topic, batching_enabled=False)

            def ghost(seq: int, leaving: bool = False) -> None:
                r = UsageReport(daemon_id="ghost", sequence=seq, publish_time_ms=int(time.time() * 1000),
                                tick_ms=1000, incarnation=1, leaving=leaving)
                producer.send(r.SerializeToString())

            ghost(1)
            streams = [Stream(c.daemons[d].url, f"acme/{d}", constant(r)) for d, r in DEMANDS.items()]
            asyncio.run(run_streams(streams, 8))
            ghost(2)
            time.sleep(1.2)  # deliberate: the ghost's reports a tick apart, as a daemon's are
            ghost(5)  # 3 and 4 never sent: every daemon counts 2 lost
            time.sleep(1.2)  # deliberate, as above
            ghost(6, leaving=True)
        finally:
            client.close()
        c.wait_ticks(2)  # two idle ticks: every admitted message is in a report by now
        admitted = {d: c.metric(d, "rgd_admitted_messages_total", group="gold", kind="publish") for d in DEMANDS}
        lost = {d: c.metric(d, "rgd_reports_lost_total") for d in DEMANDS}
    finally:
        c.stop_all()
    assert all(v > 0 for v in admitted.values())
    assert sum(lost.values()) >= 6

    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "rgd.cli", "report", str(tmp_path / "logs"), "--out", str(out), "--master", "local[2]"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    totals = pq.read_table(out / "totals.parquet").to_pandas()
    by_daemon = totals[totals["group"] == "gold"].groupby("daemon")["publish_messages_admitted"].sum().to_dict()
    print(f"\nmetrics admitted {admitted}; report admitted {by_daemon}; metrics lost {lost}")
    assert by_daemon == pytest.approx(admitted)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["loss"]["lost"] == sum(lost.values())
    assert summary["loss"]["by_receiver"] == {d: int(n) for d, n in lost.items() if n}
    assert (out / "report.html").stat().st_size > 10_000
