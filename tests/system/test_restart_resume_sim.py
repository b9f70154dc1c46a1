"""A same-id restart resumes near its old share (rgd.cluster.node.Resume), not from the floor.

ClusterNode on a fake clock for the rules; the simulator for what they buy across a
rolling restart (the cluster's admitted load, measured by the engine, not computed by
the allocator). Expected shares are worked out by hand in the comments.

Here the simulated rolling restarts; the rules on a fake clock are in tests/unit/test_restart_resume.py.
"""

from __future__ import annotations

import pytest

from sim.engine import run
from sim.metrics import evaluate
from sim.scenario import load


@pytest.mark.parametrize("name", ["issue12-rolling-restart", "rolling-crash"])
def test_a_rolling_restart_keeps_the_cluster_busy(name: str) -> None:
    # 6 daemons asking 1500 msg/s of 1200 restart one after another with the same id. When
    # the rejoiner started from the floor (it waited a tick to settle), the cluster admitted
    # 84-92 % of the quota in the tick each rejoins and 98.4 % in the next; resuming, at
    # least 92 % and 99 %, and no tick goes over the quota by more than 1 %. (A crash leaves
    # its share unused until the TTL: those ticks are not rejoins and not checked here.)
    sc = load(name)
    r = run(sc, "rgd")
    series = r.dims["g/publish"]
    rejoins = [ev.at for ev in sc.events if ev.join]
    assert len(rejoins) == 6
    for k in rejoins:
        for tick, least in ((k, 0.92), (k + 1, 0.99)):
            t = series[tick]
            assert t is not None and sum(t.admitted.values()) >= least * t.quota, (tick, t.admitted)
    assert evaluate(r).overshoot_pct <= 1.0
