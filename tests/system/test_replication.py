"""A replication quota shared live by 2 real daemons, then seen in the Spark report.

The group limits only replication dispatch (Pulsar's replicationDispatchRateInMsgs);
publish on the same namespaces is unlimited and must pass untouched. Demand is
300 + 100 replication messages/s against a quota of 200: max-min fair shares are
100 + 100 (the smaller demand is met; the larger takes the rest).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rgd.devtools.load_generator import Stream, constant, run_streams
from tests.support.cluster_harness import Cluster
from tests.support.live import write_config

QUOTA = 200.0
DEMANDS = {"d1": 300.0, "d2": 100.0}
FAIR = {"d1": 100.0, "d2": 100.0}
PUBLISH = 150.0  # on d1, unlimited
SECONDS = 12
STEADY = range(6, SECONDS - 1)  # seconds after convergence, the last (partial) one left out


@pytest.fixture(scope="module")
def run(broker, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replication")
    c = Cluster(broker.url, tmp, extra=["--report-tolerance", "0", "--log-segment-age", "3"])
    write_config(c.config, {"gold": {"replicationDispatchRateInMsgs": QUOTA}}, tenants={"acme": "gold"})
    try:
        for d in DEMANDS:
            c.start(d, wait=False)
        for d in c.daemons.values():
            d.wait_ready()
        streams = [Stream(c.daemons[d].url, f"acme/{d}", constant(r), kind="replication") for d, r in DEMANDS.items()]
        streams.append(Stream(c.daemons["d1"].url, "acme/d1", constant(PUBLISH), kind="publish"))
        stats = asyncio.run(run_streams(streams, SECONDS))
        c.wait_ticks(2)  # two idle ticks: every admitted message is in a report by now
        admitted = {d: c.metric(d, "rgd_admitted_messages_total", group="gold", kind="replication") for d in DEMANDS}
        _, quota_doc = c.daemons["d1"].get_json("/v1/quota?namespace=acme/d1")
    finally:
        c.stop_all()
    return {"stats": stats, "admitted": admitted, "quota": quota_doc, "logs": tmp / "logs"}


def test_replication_quota_is_shared_and_enforced_live(run):
    repl = run["stats"][:2]
    per_second = [sum(s.admitted.get(t, 0) for s in repl) for t in STEADY]
    print(f"\nreplication admitted per second, cluster: {per_second}; "
          f"d1 {[repl[0].admitted.get(t, 0) for t in STEADY]}, d2 {[repl[1].admitted.get(t, 0) for t in STEADY]}")
    assert all(abs(n - QUOTA) <= 0.10 * QUOTA for n in per_second), per_second
    for (d, fair), s in zip(FAIR.items(), repl):
        avg = s.admitted_between(STEADY.start, STEADY.stop) / len(STEADY)
        assert avg == pytest.approx(fair, rel=0.15), (d, avg)
    publish = run["stats"][2]
    assert publish.admitted_between(STEADY.start, STEADY.stop) / len(STEADY) == pytest.approx(PUBLISH, rel=0.05)
    assert run["quota"]["replication"]["cluster"]["messages_per_second"] == QUOTA
    assert run["quota"]["publish"]["cluster"]["messages_per_second"] is None


@pytest.mark.spark
def test_replication_shows_in_the_spark_report(run, tmp_path: Path):
    pytest.importorskip("pyspark")
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "rgd.cli", "report", str(run["logs"]), "--out", str(out), "--master", "local[2]"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    import pyarrow.parquet as pq

    totals = pq.read_table(out / "totals.parquet").to_pandas()
    gold = totals[totals["group"] == "gold"]
    by_daemon = gold.groupby("daemon")["replication_messages_admitted"].sum().to_dict()
    print(f"\nmetrics admitted {run['admitted']}; report admitted {by_daemon}")
    assert by_daemon == pytest.approx(run["admitted"])
    assert gold["replication_messages_throttled"].sum() > 0
    html = (out / "report.html").read_text()
    assert "replication_messages" in html
    summary = json.loads((out / "summary.json").read_text())
    assert "replication_messages" in json.dumps(summary)
