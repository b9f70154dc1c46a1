"""`rgd whatif` on the logs of a real 3-daemon run (embedded broker, `rgd run` processes).

The daemons run with their default report suppression; their logs carry tick accounting
frames (docs/tick-accounting.md), so whatif reads every admitted message once, suppressed
or not. What brokers were told (the load generator's own counts of allowed and offered
messages) is the oracle: the counts whatif reads back must equal it, the replay under the
logged quotas must admit what the logs say within 2 % (the issue's bar), and a cut quota
must cut admissions to it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rgd.devtools.load_generator import RateFn, Stream, constant, run_streams
from tests.support.cluster_harness import Cluster

pytestmark = [pytest.mark.slow]

QUOTA = 200
SECONDS = 24
RAMP = 4  # seconds the load rises over at its start and tails off over at its end (see `ramped`)
PROPOSED = 100


def ramped(rate: RateFn) -> RateFn:
    """`rate` rising linearly over the first RAMP seconds and tailing off over the last RAMP. Why: the
    logs say how much a daemon was offered in a second, not how it was spread within it, and the
    replay spreads it evenly. Load that stops dead a third of a second into a second was offered at
    its full rate for that third; spread over the second it fits under the daemon's share, and the
    replay admits what the cluster throttled (about 70 messages of a run's last second, 1.8 % of all
    it admitted). Load that starts dead in the middle of a second is the same at the other end (CI
    saw the replay admit 45 messages more than the cluster in the first two seconds: 1.0 %)."""
    return lambda t: rate(t) * max(0.0, min(1.0, t / RAMP, (SECONDS - t) / RAMP))


# d3 steps up half way: the shares move (max-min fair 80/80/40, then 67/67/67 of 200)
RATES = {"d1": ramped(constant(200.0)), "d2": ramped(constant(80.0)),
         "d3": ramped(lambda t: 40.0 if t < SECONDS / 2 else 150.0)}


@pytest.fixture(scope="module")
def run(broker, tmp_path_factory) -> tuple[Path, dict[str, dict[str, int]]]:
    """A real 3-daemon run; returns its work directory (logs under logs/<daemon>/) and what brokers were told."""
    work = tmp_path_factory.mktemp("whatif-run")
    c = Cluster(broker.url, work, quota=QUOTA)
    try:
        for d in RATES:
            c.start(d, wait=False)
        for d in c.daemons.values():
            d.wait_ready()
        stats = asyncio.run(run_streams([Stream(c.daemons[d].url, f"acme/{d}", r) for d, r in RATES.items()], SECONDS))
        c.wait_ticks(2)  # two idle ticks: every admitted message is in a report
    finally:
        c.stop_all()
    told = {d: {"admitted": sum(s.admitted.values()), "offered": sum(s.offered.values()), "errors": s.errors}
            for d, s in zip(RATES, stats)}
    assert all(t["errors"] == 0 for t in told.values()), told
    return work, told


@pytest.fixture(scope="module")
def whatif(run) -> tuple[subprocess.CompletedProcess[str], dict, Path]:
    work, _ = run
    out = work / "whatif"
    proc = subprocess.run([sys.executable, "-m", "rgd.cli", "whatif", str(work / "logs"), "--out", str(out),
                           "--set", f"gold.publishRateInMsgs={PROPOSED}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, json.loads((out / "whatif.json").read_text()), out


def test_the_logs_read_back_what_brokers_were_told(run, whatif):
    _, told = run
    _, doc, _ = whatif
    logged = doc["groups"]["gold/publish"]["logged"]
    admitted = sum(t["admitted"] for t in told.values())
    offered = sum(t["offered"] for t in told.values())
    assert doc["accounting_frames"] > 0 and doc["suppressed_entries_filled"] == 0  # exact counts: nothing filled in
    assert logged["admitted_messages"] == pytest.approx(admitted, abs=1e-6)
    assert logged["admitted_messages"] + logged["throttled_messages"] == pytest.approx(offered, abs=1e-6)


def test_replayed_under_the_logged_quotas_it_admits_what_the_logs_say(whatif):
    _, doc, _ = whatif
    g = doc["groups"]["gold/publish"]
    assert g["now"]["admitted_messages"] == pytest.approx(g["logged"]["admitted_messages"], rel=0.02)
    assert abs(g["replay_error"]) <= 0.02


def test_a_cut_quota_cuts_admissions_to_it_and_throttles_the_rest(whatif):
    _, doc, _ = whatif
    g = doc["groups"]["gold/publish"]
    now, proposed = g["now"], g["proposed"]
    offered_now = now["admitted_messages"] + now["throttled_messages"]
    assert proposed["admitted_messages"] + proposed["throttled_messages"] == pytest.approx(offered_now, rel=0.001)
    # demand (320 msg/s, then 430) is above the proposed quota in every second of load but the first and the last
    assert proposed["admitted_messages"] == pytest.approx(PROPOSED * (SECONDS - 1), rel=0.1)
    assert proposed["overshoot_pct"] < 10
    assert proposed["jain_mean"] > 0.95


def test_the_page_and_the_printed_table_show_now_and_proposed(whatif):
    proc, doc, out = whatif
    page = (out / "whatif.html").read_text()
    assert f"gold.publishRateInMsgs={PROPOSED}" in page
    assert page.count("<polyline") >= 8  # admitted/quota and Jain charts
    row = next(line for line in proc.stdout.splitlines() if line.startswith("gold "))
    g = doc["groups"]["gold/publish"]
    assert row.split()[2:5] == [f"{g[k]['admitted_messages']:.0f}" for k in ("logged", "now", "proposed")]
