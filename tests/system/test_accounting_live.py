"""Live: the fairness report's admitted totals against the brokers' own count of allowed answers.

Three real daemons on the embedded broker, default suppression (most ticks' reports leave
groups out, and early reports and restatements repeat counts), load whose allowed answers
the test counts itself from the HTTP answers (plain aiohttp, no rgd code), then `rgd report`.
Stopped cleanly, every allowed answer is in the report's totals, to the message. A daemon
SIGKILLed mid-run loses at most what it admitted after its last accounting frame, and the
report says it crashed and from when its count is short.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import aiohttp
import pyarrow.parquet as pq
import pytest

from tests.support.cluster_harness import Cluster

pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark

DEMANDS = {"d1": 260.0, "d2": 120.0, "d3": 40.0}  # msg/s each, against a quota of 300: throttled
STEP = 0.05


async def _load(urls: dict[str, str], seconds: float, answers: dict[str, list[tuple[float, int]]],
                kill: tuple[str, float, asyncio.Event] | None = None) -> None:
    """Ask each daemon for its demand in batches every STEP; log (answer time, allowed count)."""
    async def one(daemon: str, session: aiohttp.ClientSession) -> None:
        owed = 0.0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            owed += DEMANDS[daemon] * STEP
            n, owed = int(owed), owed - int(owed)
            if n:
                body = {"requests": [{"namespace": f"acme/{daemon}", "kind": "publish", "messages": 1,
                                      "bytes": 100} for _ in range(n)]}
                try:
                    async with session.post(urls[daemon] + "/v1/acquire", json=body,
                                            timeout=aiohttp.ClientTimeout(total=5)) as resp:
                        doc = await resp.json()
                    got = time.time()
                    answers[daemon].append((got, sum(1 for r in doc["results"] if r["allowed"] is True)))
                except (TimeoutError, aiohttp.ClientError):
                    if kill is None or daemon != kill[0]:
                        raise
            await asyncio.sleep(STEP)

    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.create_task(one(d, session)) for d in urls]
        if kill is not None:
            await asyncio.sleep(kill[1])
            kill[2].set()
        await asyncio.gather(*tasks)


def _report(tmp_path: Path) -> tuple[dict[str, int], dict]:
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "rgd.cli", "report", str(tmp_path / "logs"), "--out", str(out), "--master", "local[2]"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    totals = pq.read_table(out / "totals.parquet").to_pandas()
    by_daemon = totals[totals["group"] == "gold"].groupby("daemon")["publish_messages_admitted"].sum()
    return {str(k): int(v) for k, v in by_daemon.items()}, json.loads((out / "summary.json").read_text())


def test_clean_stop_report_totals_equal_allowed_answers(broker, tmp_path: Path) -> None:
    c = Cluster(broker.url, tmp_path, quota=300)
    answers: dict[str, list[tuple[float, int]]] = defaultdict(list)
    try:
        for d in DEMANDS:
            c.start(d, wait=False)
        for d in c.daemons.values():
            d.wait_ready()
        asyncio.run(_load({d: c.daemons[d].url for d in DEMANDS}, 8.0, answers))
        suppressed = sum(c.metric(d, "rgd_report_groups_suppressed_total") for d in DEMANDS)
    finally:
        c.stop_all()  # at once: the last tick's counts are in no report, only in the final accounting
    allowed = {d: sum(n for _, n in answers[d]) for d in DEMANDS}
    report, summary = _report(tmp_path)
    print(f"\nallowed answers {allowed}; report admitted {report}; groups suppressed {suppressed}")
    assert all(v > 0 for v in allowed.values())
    assert report == allowed
    assert summary["groups"]["gold"]["totals"]["publish_messages_admitted"] == sum(allowed.values())
    acct = summary["accounting"]
    assert acct["source"] == "tick accounting" and not acct["crashed"] and acct["missing_frames"] == 0
    assert {d["ended"] for d in acct["daemons"].values()} == {"stopped"}


def test_sigkilled_daemon_short_by_at_most_what_it_admitted_after_its_last_accounting(broker, tmp_path: Path) -> None:
    c = Cluster(broker.url, tmp_path, quota=300)
    answers: dict[str, list[tuple[float, int]]] = defaultdict(list)
    killed = asyncio.Event()
    try:
        for d in DEMANDS:
            c.start(d, wait=False)
        for d in c.daemons.values():
            d.wait_ready()

        async def run() -> None:
            load = asyncio.create_task(_load({d: c.daemons[d].url for d in DEMANDS}, 8.0, answers,
                                             kill=("d1", 4.5, killed)))
            await killed.wait()
            c.daemons["d1"].kill()  # SIGKILL, mid-tick: no leaving report, no final accounting
            await load

        asyncio.run(run())
    finally:
        c.stop_all()
    allowed = {d: sum(n for _, n in answers[d]) for d in DEMANDS}
    report, summary = _report(tmp_path)
    acct = summary["accounting"]["daemons"]
    assert acct["d1"]["ended"] == "crashed" and summary["accounting"]["crashed"] == ["d1"]
    assert acct["d2"]["ended"] == acct["d3"]["ended"] == "stopped"
    last_collect_s = acct["d1"]["last_collect_ms"] / 1000.0
    after = sum(n for t, n in answers["d1"] if t >= last_collect_s)
    shortfall = allowed["d1"] - report["d1"]
    print(f"\nallowed {allowed}; report {report}; d1 short by {shortfall}, admitted {after} after its last "
          f"accounting frame")
    assert 0 <= shortfall <= after
    assert report["d2"] == allowed["d2"] and report["d3"] == allowed["d3"]
    page = (tmp_path / "report" / "report.html").read_text()
    assert "d1" in page and "crashed" in page and "not in these totals" in page
