"""Fuzz cases of seed 1 that once went over the quota, judged by the simulator's oracle
(sim/oracle.py, sim/metrics.py), not by rgd: each stays within 10 % on the acknowledged
protocol (docs/design/protocol.md).

Long runs (each a simulated scenario of a second or more): pure code, but kept out of
tests/unit so that tier stays under 20 s.
"""

from __future__ import annotations


def test_a_first_demand_lost_to_a_peer_does_not_let_it_take_the_share() -> None:
    # Fuzz case 86 of seed 1 (25 % loss): c's reports of its first demand in h were lost to a
    # peer, c's next tick report suppressed the unmoved demand, the peer took it for idle and
    # took c's share: 11.6 % over.
    from sim.engine import run
    from sim.fuzz import draw_scenario
    from sim.metrics import evaluate

    m = evaluate(run(draw_scenario(1, 86), "rgd"))
    assert m.overshoot_pct <= 10.0, (m.overshoot_pct, m.overshoot_at)


def test_a_newcomer_under_a_two_tick_delay_takes_no_busy_peer_s_share() -> None:
    # Fuzz cases 382 and 227 of seed 1 (2-tick delay): the newcomer settled a tick before
    # its peers' first reports were back and took a busy group's share beside them (20.4 and
    # 11.4 % over). Judged by the simulator's metrics (sim/oracle.py), not by rgd.
    from sim.engine import run
    from sim.fuzz import draw_scenario
    from sim.metrics import evaluate

    for case in (382, 227):
        m = evaluate(run(draw_scenario(1, case), "rgd"))
        assert m.overshoot_pct <= 10.0, (case, m.overshoot_pct, m.overshoot_at)


def test_a_busy_peer_others_still_hear_is_not_evicted_for_reports_we_lost() -> None:
    # Fuzz case 426 of seed 1 (16.5 % loss, 14 daemons): one daemon lost five reports in a
    # row of a busy peer, evicted it and took its share, 12.9 % over the quota for a tick.
    # The peers that heard it say so in their tick reports. Judged by sim/oracle.py.
    from sim.engine import run
    from sim.fuzz import draw_scenario
    from sim.metrics import evaluate

    m = evaluate(run(draw_scenario(1, 426), "rgd"))
    assert m.overshoot_pct <= 10.0, (m.overshoot_pct, m.overshoot_at)
