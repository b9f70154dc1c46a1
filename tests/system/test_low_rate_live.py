"""A rate under a message a tick, in real daemons and in the simulator: never read as idle.

Measured tick by tick, a namespace asking once every 1.7 s reads 1, 1, 0, 1, 1, 0 messages a
tick; a daemon's own demand counts as the smallest of its figures a peer may still hold (M4),
so it read idle nearly always and the daemon held the group to the idle floor (2 % of the
quota), throttling most of the asks. A low rate is now measured until two messages arrived or
four ticks passed, and any demand reads at least a message a tick (docs/design/protocol.md,
M13). Two daemons, quota 10 msg/s: d1 asks 20 a second, d2 0.6: fair is d2's 0.6 and d1 the
rest, so d2's asks are admitted.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from sim.engine import run
from sim.scenario import parse
from tests.support.acknowledged_rise import read_logs
from tests.support.cluster_harness import Cluster
from tests.support.scripts import load_script

probe = load_script("reaction_probe")

QUOTA = 10.0
LOW_RATE = 0.6
SECONDS = 14.0
SETTLED = 4.0  # seconds after which every ask of d2 should be admitted


def test_a_simulated_rate_under_a_message_a_tick_is_admitted() -> None:
    doc = {
        "description": "d2 asks 0.6 a second beside d1's 20, quota 10", "ticks": int(SECONDS), "daemons": ["d1", "d2"],
        "substeps": 10, "groups": {"gold": {"publishRateInMsgs": QUOTA}},
        "demand": {"gold": {"d1": 20, "d2": LOW_RATE}},
    }
    result = run(parse(doc, "low-rate"), "rgd")
    series = result.dims["gold/publish"]
    later = [t for k, t in enumerate(series) if t is not None and k >= SETTLED]
    offered = sum(t.offered.get("d2", 0) for t in later)
    admitted = sum(t.admitted.get("d2", 0) for t in later)
    assert offered >= 5 and admitted >= offered - 1, (offered, admitted)


@pytest.mark.timing
def test_a_live_rate_under_a_message_a_tick_is_never_reported_idle_and_is_admitted(broker, tmp_path: Path) -> None:
    c = Cluster(broker.url, tmp_path, quota=QUOTA)
    try:
        c.start_members("d1", "d2")
        counts = probe.Counts()
        wall_minus_mono = time.time() - time.monotonic()
        streams = [(c.daemons["d1"].url, ("d1", "gold"), "acme/x", lambda _t: 20.0),
                   (c.daemons["d2"].url, ("d2", "gold"), "acme/y", lambda _t: LOW_RATE)]
        t0 = asyncio.run(probe.run_load(streams, SECONDS, counts))
        c.wait_ticks(1)
    finally:
        c.stop_all()
    key = ("d2", "gold")
    offered = sum(n for b, n in counts.offered[key].items() if b * probe.BIN >= SETTLED)
    admitted = counts.admitted_in(key, SETTLED, SECONDS + 1.0)
    # d2's figures for the group once the load settled (its first ask reads as a burst: a
    # message in a fraction of a tick, then nothing for 1.7 s).
    settled_ms = (t0 + wall_minus_mono + SETTLED) * 1000.0
    figures = [sum(g.publish.admitted_messages + g.publish.throttled_messages for g in r.groups if g.group == "gold")
               for _, r in sorted(read_logs(tmp_path / "logs")["d2"].published.items())
               if r.publish_time_ms >= settled_ms and any(g.group == "gold" for g in r.groups)]
    print(f"\nd2 offered {offered}, admitted {admitted} after {SETTLED:g} s; figures {figures}")
    assert figures and 0 not in figures, "a report read the low rate as idle"
    assert offered >= 5 and admitted >= offered - 1
