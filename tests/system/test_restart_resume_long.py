"""A same-id restart resumes near its old share (rgd.cluster.node.Resume), not from the floor.

ClusterNode on a fake clock for the rules; the simulator for what they buy across a
rolling restart (the cluster's admitted load, measured by the engine, not computed by
the allocator). Expected shares are worked out by hand in the comments.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_restart_resume.py.
"""

from __future__ import annotations

from sim.engine import run
from sim.metrics import evaluate


def test_a_restart_settles_on_reports_published_after_peers_could_see_it() -> None:
    # Fuzz case 122 of seed 1: d01 leaves gracefully and comes back a tick later under a
    # 1.5-tick delay. d00, alone meanwhile, holds the whole quota of g05. The first report of
    # d00 that reaches the restarted d01 was published before d00 could have seen d01's hello:
    # not d00's full announcement, so g05 (suppressed, steady) is missing from it. Settling on
    # it, d01 saw nobody's demand in g05 and took the even split beside d00's whole quota (49 %
    # over the quota for a tick). Judged by the simulator's metrics (sim/oracle.py), not by rgd.
    from sim.fuzz import draw_scenario

    m = evaluate(run(draw_scenario(1, 122), "rgd"))
    assert m.overshoot_pct <= 10.0, (m.overshoot_pct, m.overshoot_at)
