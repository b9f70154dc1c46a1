"""Issue 42, live: one of 3 daemons loses the broker for 20 s (its own network namespace, link
down) while its brokers keep asking it. Quota 100 msg/s, 60 msg/s offered to each daemon.

The run is scripts/partition_probe.py (the same command the notes quote), once per module;
the topology is in its docstring and tests/support/netns.py. Two tests read its figures:
- that the run is the fault the issue describes (it can fail: the cut daemon kept answering
  its brokers, the others kept the broker, the load reached everyone, it went back ready);
- the issue's criteria: no second above quota + 10 % before, during and after the cut; the
  cut-off daemon not ready and saying why within 5 s; fair shares (each within 10 % of 33.3)
  again within 3 s of the heal;
- the mechanism behind them: the cut daemon admits nothing from before its peers take its share;
  and the same with `--cluster-process`, where the lease's end crosses the link to the buckets.

Needs root and iproute2 (CI has both: scripts/system-deps.sh); skipped otherwise, saying which.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.netns import unavailable

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "scripts" / "partition_probe.py"
QUOTA, OFFERED, BEFORE, CUT, AFTER = 100.0, 60.0, 10.0, 20.0, 10.0

pytestmark = [
    pytest.mark.slow, pytest.mark.timing,
    pytest.mark.skipif(unavailable() is not None, reason=str(unavailable())),
]


def _probe(out: Path, *daemon_args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(PROBE), "--quota", str(QUOTA), "--offered", str(OFFERED), "--before", str(BEFORE),
         "--cut", str(CUT), "--after", str(AFTER), "--out", str(out), *(f"--daemon-arg={a}" for a in daemon_args)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(proc.stdout)
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _probe(tmp_path_factory.mktemp("partition") / "figures.json")


def _phase(fig: dict[str, Any], lo: float, hi: float) -> list[dict[str, float]]:
    """Whole seconds inside [lo, hi) of the run."""
    return [r for r in fig["seconds"] if r["t"] >= lo and r["t"] + 1 <= hi]


def test_the_run_is_the_partition_the_issue_describes(figures: dict[str, Any]) -> None:
    fig = figures
    assert len(fig["seconds"]) >= BEFORE + CUT + AFTER - 2
    assert abs(fig["cut_at_s"] - BEFORE) < 1 and abs(fig["heal_at_s"] - BEFORE - CUT) < 1.5
    # Before the cut the cluster shares the quota: every daemon asked and answered.
    for r in _phase(fig, 1, fig["cut_at_s"]):
        assert all(r[d] > 0 for d in ("d1", "d2", "d3")), r
        assert r["total"] >= 0.9 * QUOTA, r
    # During the cut the others still have the broker (they keep admitting), and the cut
    # daemon's brokers still reach it: it answered them (it admitted in the cut's first second,
    # before its lease ended) and it answered /readyz over their link, saying it lost the broker.
    during = _phase(fig, fig["cut_at_s"], fig["heal_at_s"])
    # (The others admit nothing for a moment a few seconds in: their leases count from d3's last
    # acknowledgement and end before they evict it, docs/design/protocol.md "What the guarantee
    # costs". From then on they admit every second.)
    assert all(r["d1"] > 0 and r["d2"] > 0 for r in during[5:]), during
    assert during[0]["d3"] > 0, during[0]
    assert fig["not_ready_says"].get("status") == 503, fig["not_ready_says"]
    # And it came back once the link did.
    assert fig["ready_again_after_s"] is not None and fig["ready_again_after_s"] <= 10


# The issue's criteria. Measured on the node before the acknowledged protocol: 133-139 msg/s
# (+33 to +39 %) for 15-16 s of the 20-s cut, the local limits summing to 133 all along. Now the
# cut daemon's lease ends within its lease of the cut (it admits nothing) before its peers evict
# it and split the quota between them.
def test_the_issue_criteria_hold_through_the_partition(figures: dict[str, Any]) -> None:
    fig = figures
    for phase in ("before", "during", "after"):
        assert fig["worst_over_pct"][phase] <= 10.0, (phase, fig["worst_over_pct"])
    says = fig["not_ready_says"]
    assert fig["not_ready_after_s"] is not None and fig["not_ready_after_s"] <= 5.0, fig["not_ready_after_s"]
    # Why: its lease ended (nobody acknowledges it), or its broker does not answer, whichever it saw first.
    why = (says.get("lease") or {}).get("why")
    broker_down = says.get("broker_unresponsive") or says.get("broker_connected") is False
    assert says.get("ready") is False and (why or broker_down), says
    assert fig["fair_after_heal_s"] is not None and fig["fair_after_heal_s"] <= 3.0, fig["fair_after_heal_s"]


def test_the_cut_daemon_stops_admitting_before_a_peer_takes_its_share(figures: dict[str, Any]) -> None:
    """The lease (P4), live: the cut-off daemon's limiter refuses from its lease's end on its own
    clock, though its node recomputes only at its next tick while the broker is gone (a react
    waits for the broker); its peers evict it and take its share only after that."""
    _assert_stopped_before_taken(figures)


def _assert_stopped_before_taken(fig: dict[str, Any]) -> None:
    stopped, took = fig["cut_admitted_until_s"], fig["peers_took_share_after_s"]
    assert stopped is not None and took is not None, (stopped, took)
    assert stopped < took, (stopped, took)


def test_split_over_two_processes_the_serving_half_stops_at_the_lease_end_the_cluster_half_sent(
        tmp_path: Path) -> None:
    """`--cluster-process`: the buckets are in the serving process, the node in the other; the
    lease's end goes over the link with the limits, and the serving half refuses from it on
    its own, whatever the cluster half does meanwhile."""
    fig = _probe(tmp_path / "figures.json", "--cluster-process")
    for phase in ("before", "during", "after"):
        assert fig["worst_over_pct"][phase] <= 10.0, (phase, fig["worst_over_pct"])
    _assert_stopped_before_taken(fig)
