"""sim.hindsight: the one-tick-late reference the judge's targets are read against."""

from __future__ import annotations

import itertools

from sim.engine import run
from sim.hindsight import replay
from sim.metrics import converged, evaluate, judge
from sim.scenario import parse

STEADY = {"ticks": 8, "daemons": ["a", "b"], "groups": {"g": {"publishRateInMsgs": 100}},
          "demand": {"g": {"a": 80, "b": 40}}}


def test_steady_demand_is_met_from_the_second_tick() -> None:
    r = run(parse(STEADY), "static")
    h = replay(r)
    series = h.dims["g/publish"]
    for before, tick in itertools.pairwise(series[1:]):
        assert tick is not None and before is not None
        for d, got in tick.admitted.items():
            assert got <= tick.arrived[d] + 1e-9
            assert got == min(tick.arrived[d], judge(before).shares[d])
        assert converged(tick)
    # The arrivals, quotas and changes are the run's; only the admissions differ.
    assert [t.arrived for t in series] == [t.arrived for t in r.dims["g/publish"]]  # type: ignore[union-attr]
    assert h.changes == r.changes
    assert evaluate(h).ticks_to_converge == 0


