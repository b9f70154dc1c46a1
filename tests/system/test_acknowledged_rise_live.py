"""The rise a daemon takes only once every peer acknowledged it, in real daemons and in the simulator.

The acknowledged minimum (docs/design/protocol.md, M4, M13) replaced the first-demand claims
whose closing the simulator proved and the live daemon never did (its clock ignored the
instant it was asked about). Here one scenario runs twice, on real processes and in the
simulator, and one reading of the usage logs both write (tests/support/acknowledged_rise.py,
no code shared with rgd.cluster) checks the same sequence in each: the riser's first report
of the higher demand asks for acknowledgements; every limit it reports until the last
acknowledgement of that report reaches it stays at its old share; a report shortly after
carries the new one. The live run also checks what the brokers were told.

Two daemons, quota 100 msg/s: d1 offered 80, d2 offered 10 (d2's share about 10, with a
share of the spare), then d2 offered 80: fair is 50 each.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from sim.engine import run
from sim.scenario import parse
from sim.usage_logs import UsageLogs
from tests.support.acknowledged_rise import Rise, find_rise, read_logs
from tests.support.cluster_harness import Cluster
from tests.support.scripts import load_script

probe = load_script("reaction_probe")

QUOTA = 100.0
OLD_SHARE_AT_MOST = 30.0  # d2's share before the rise: 10 and part of the spare 10
NEW_SHARE = 50.0


def check_sequence(rise: Rise, within_ms: float) -> None:
    """What holds in the live run and the simulated one alike."""
    assert rise.report.ack_wanted, "the report of a rise asks for acknowledgements"
    assert rise.limits_before, "reports went out between the rise and its last acknowledgement"
    assert max(rise.limits_before) <= OLD_SHARE_AT_MOST, rise.limits_before
    soon = [lim for at, lim in rise.limits_after if at <= rise.acked_at_ms + within_ms]
    assert soon and max(soon) >= 0.9 * NEW_SHARE, rise.limits_after[:10]


def test_the_simulated_rise_waits_for_its_acknowledgements(tmp_path: Path) -> None:
    doc = {
        "description": "d2's demand rises from 10 to 80 at tick 5", "ticks": 10, "daemons": ["d1", "d2"],
        "substeps": 10, "groups": {"gold": {"publishRateInMsgs": QUOTA}},
        "demand": {"gold": {"d1": 80, "d2": 10}}, "events": [{"at": 5, "demand": {"gold": {"d2": 80}}}],
    }
    logs = UsageLogs(tmp_path / "logs")
    run(parse(doc, "acknowledged-rise"), "rgd", log=logs)
    logs.close()
    read = read_logs(tmp_path / "logs")
    rise = find_rise(read, "d2", "gold", after_ms=0.0)
    check_sequence(rise, within_ms=1500.0)


@pytest.mark.timing
def test_a_live_rise_waits_for_its_acknowledgements_as_in_the_simulator(broker, tmp_path: Path) -> None:
    c = Cluster(broker.url, tmp_path, quota=QUOTA)
    rise_at = 3.0
    try:
        c.start_members("d1", "d2")
        counts = probe.Counts()
        wall_minus_mono = time.time() - time.monotonic()
        streams = [(c.daemons["d1"].url, ("d1", "gold"), "acme/x", lambda _t: 80.0),
                   (c.daemons["d2"].url, ("d2", "gold"), "acme/y", lambda t: 10.0 if t < rise_at else 80.0)]
        t0 = asyncio.run(probe.run_load(streams, rise_at + 3.0, counts))
        c.wait_ticks(2)
    finally:
        c.stop_all()
    rise_wall_ms = (t0 + wall_minus_mono + rise_at) * 1000.0
    rise = find_rise(read_logs(tmp_path / "logs"), "d2", "gold", after_ms=rise_wall_ms - 100.0)
    acked = rise.acked_at_ms / 1000.0 - wall_minus_mono - t0  # on the load's clock
    print(f"\nrise reported {rise.report.publish_time_ms - rise_wall_ms:.0f} ms after it began, acknowledged "
          f"{rise.acked_at_ms - rise.report.publish_time_ms:.0f} ms later; limits before {rise.limits_before}, "
          f"after {[lim for _, lim in rise.limits_after[:5]]}")
    check_sequence(rise, within_ms=1500.0)
    # What the brokers were told: until the acknowledgement d2 admitted at its old share (and
    # its burst, 10 messages at most); a second after it, about its new share.
    key = ("d2", "gold")
    waited = max(acked - rise_at, 0.05)
    assert counts.decided_in(key, rise_at, acked) <= OLD_SHARE_AT_MOST * waited + 10
    assert counts.admitted_in(key, acked + 0.5, acked + 1.5) >= 0.8 * NEW_SHARE
