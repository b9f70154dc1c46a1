"""A fixed corpus of fuzzed scenarios plus every built-in, judged by the independent oracle.

The floors asserted here are what the `rgd` strategy measures on this corpus now
(sim/README.md, "Guarantees"), not the issue's targets where it falls short of them; each
assertion names the target beside the floor. Tighten them when the algorithm improves; a
regression below them fails here. The targets it misses are asserted too, as strict
xfails: the day they are met, those tests fail until the marker goes.

Re-measured when the allocator gained early reports, delay-aware increases and the joint
messages+bytes split: worst overshoot, calm scenarios and convergence within 3 ticks got
better; the worst window's Jain index fell from 0.990 to 0.946 (case 3: a 1-2 msg/s
bytes-only group under a 2-tick delay keeps its smallest recent reading for the delay)
and windows at >= 95 % utilization from 0.996 to 0.989 (conservative dominant shares
where daemons bind on different dimensions).

Re-measured when daemons began to settle on the measured delivery delay (a tick plus the
delay of listening, not a tick), to resume same-id restarts and to keep a waking group's
even split until each member has reported: scenarios with no tick over 10 % went from 23
to 26 of 30 and the worst overshoot from 112 % to 62 %; windows at >= 95 % utilization
0.989 -> 0.991; changes within 3 ticks fell from 0.962 to 0.954 and within 5 from 0.977
to 0.973 (start-up under a 1-tick delay converges a tick later: nobody may take more
than the floor before every peer's report has had time to arrive). Jain min and
utilization min did not move.

Re-measured when a limit cut below an unthrottled daemon's demand began to drain its saved
tokens (behaviour 8 of sim/README.md, in its git history): every floor measured the same (26 of 30 scenarios
without a tick over 10 %, 0.954 within 3 ticks, 0.973 within 5, windows at >= 95 %
utilization 0.991, Jain min 0.946). Case 13 (a 10x quota cut: 24.9 % over) is now under
1 %; case 0 went from 4.6 % to 11.0 % over (a busy peer evicted after three lost reports
at 28 % loss and a 2-tick delay, one tick later than before: the drain shifted the timing,
not the cause), so the share of calm scenarios is unchanged. Then a same-id restart began
to settle only on peer reports published after the peer could have seen it: windows at
>= 95 % utilization 0.991 -> 0.993, the worst window's utilization 0.897 -> 0.894 (above the
0.89 floor: a restarted daemon under a delay takes the floor until its peers' announcements
arrive, where it used to take the even split of groups it could not see), the rest unchanged.

Re-measured when the bucket shrank from 1 s to 0.1 s with room for ten messages, Retry-After
came to be capped by the next react, and the simulated brokers began to ask at their own
instants over a sub-step with each daemon's reacts folding what arrived during it
(behaviour 9 of sim/README.md, in its git history): scenarios with no tick over 10 % 26 -> 29 of 30, the worst
overshoot 62.3 % -> 16.4 % (case 0, two ticks after a crash under 28 % loss and a 2-tick
delay), the worst window's utilization 0.894 -> 0.948, windows at >= 95 % utilization
0.993 -> 0.996, Jain min and convergence unchanged.

Re-measured when silence came to be judged against the measured loss and early reports to
count their noise in events (asks, usage records) and to need the trailing tick's agreement
(behaviours 10 and 11 of sim/README.md, in its git history): every scenario now stays within 10 % in every tick
(29 -> 30 of 30; worst 16.4 % -> 9.9 %, case 7; case 0, a busy peer evicted after three
lost reports at 28 % loss, 16.4 % -> 5.4 %); within 3 ticks 0.954 -> 0.958, within 5
0.973 -> 0.977; Jain min unchanged; the worst window's utilization 0.948 -> 0.937 (case 6)
and windows at >= 95 % 0.996 -> 0.991. On the next 40 cases of the seed (30-69, not in
this corpus) the worst overshoot went from 51.0 % to 8.4 % with the loss-aware eviction
and the trailing tick's agreement alone.

Re-judged (rgd unchanged) when the judge came to count one message off a fractional ideal as
none, in convergence and in Jain (a tick admits whole messages; at a few messages a second
10 % of the ideal is less than one): Jain min 0.946 -> 0.993 (case 3 was a 1-2 msg/s group),
within 3 ticks 0.966 -> 0.977, within 5 unchanged; windows at >= 95 % utilization 0.991 ->
0.988, since windows that now converge count among the converged ones.

Re-measured when a small share's bucket came to cap its 1-second windows at 1.1 s of its
limit plus one message (rgd/limiting/second_window.py): on this corpus the worst window's
utilization 0.935 -> 0.915 and windows at >= 95 % 0.988 -> 0.984 (case 0: g00/publish after
a join under 28 % loss and a 2-tick delay, a bytes quota of 66 kB/s in 0.4-3.5 kB messages
over six daemons, where windows held the daemons whose limits the join cut),
within 3 ticks 0.977 -> 0.973, the rest unchanged. On the 500 scenarios of the fuzz the same
change halved the worst overshoot (72.1 % -> 33.3 %) and moved utilization the other way
(windows below 95 % 168 -> 160, the worst 89.5 % -> 89.9 %), so the floors follow it here.
Then reports came to carry how many members their sender counts, and a newcomer that has
not heard them all listens a tick longer (ClusterNode.unheard_members): windows at >= 95 %
0.984 -> 0.986, the rest unchanged.

Re-measured when the simulated brokers came to ask in producer batches (at most 1 ms of their
demand, 1000 messages or 128 KB, coarsened up to 1 % of the daemon's limit: sim/engine.py)
and an unconfirmed group entry came to outlive the safety TTL under measured loss
(rgd/cluster/map_keeper.py, entry_ttl): the worst overshoot 9.9 % -> 5.2 % (case 20), the worst
window's utilization 0.915 -> 0.927 (case 9), windows at >= 95 % 0.986 -> 0.989, within 3
ticks 0.973 -> 0.977, within 5 and Jain unchanged. Then a small share's 1-second window
came to be capped at 1.1 s of its rate or its rate plus one message, whichever is more,
rather than the sum: within 3 ticks 0.977 -> 0.981 (doorman-fair 0.977, so rgd now
converges best on the corpus too), within 5 0.981 -> 0.985, the worst window's utilization
0.927 -> 0.919 and windows at >= 95 % 0.989 -> 0.986 (case 9); on the 500 scenarios windows
under 95 % went 126 -> 125 and failing cases 99 -> 92.
Then the idle reserve went from 5 % to 2 % of the quota and a peer's tick report after an
announcement came to name every group (a second chance for a newcomer that lost the
announcement): windows at >= 95 % 0.986 -> 0.995, the worst window's utilization 0.919 ->
0.903 (case 9, a bytes quota of 8.9 kB/s in 48-355 byte messages at 15 % jitter: shares of
10-16 messages a second, after a crash under 16 % loss), within 3 ticks 0.981 -> 0.977 (one
change; doorman-fair 0.977 -> 0.981, as the second announcement serves every strategy), the
worst overshoot 5.2 % -> 7.0 % (case 20); within 5 and Jain unchanged. On the 500 scenarios
(rgd): windows under 95 % 125 -> 75, changes over 5 ticks 64 -> 52, failing cases 92 -> 70.
Re-judged (rgd unchanged) when a change came to end the windows of the dimensions it touches
only (sim.metrics.touching: its group's quota, demand or sizes, or a daemon coming or going),
not every dimension's: the worst window's utilization 0.8995 -> 0.921 (case 9's one-tick
window after another group's sizes changed is gone), windows at >= 95 % 0.989 -> 0.9885, Jain
min 0.996 -> 0.997; within 3 ticks 0.989 -> 0.984 (253 of 257) and within 5 0.996 -> 0.992,
since changes that an unrelated one used to cut short now count, and some converge late.
Re-measured when the simulated topic came to draw each delivery's loss from its
own identity instead of one stream (a report more or less no longer re-deals every later
loss) and the judge came to take the cluster's usage to within one message of its largest
sender, as it takes each daemon's: the worst window's utilization 0.899 -> 0.913, within 3
ticks 0.984 -> 0.988 (254 of 257, as many as doorman-fair, whose worst is never: the
strict xfail on converging best is gone), within 5 0.992 -> 0.996, the rest unchanged.
"""

from __future__ import annotations

import functools
import math

import pytest

from sim.engine import RunResult, run
from sim.fuzz import CaseResult, draw_scenario, judge_case, run_case
from sim.metrics import evaluate
from sim.scenario import builtin_names, load
from tests.support.lexmaxmin_lp import lexicographic_max_min

SEED = 1
CORPUS = tuple(range(30))  # cases 0..29 of fuzz seed 1
STRATEGIES = ("rgd", "pulsar", "doorman-proportional", "doorman-fair", "static")


@functools.cache
def corpus() -> dict[str, list[CaseResult]]:
    out: dict[str, list[CaseResult]] = {s: [] for s in STRATEGIES}
    for i in CORPUS:
        for c in run_case((SEED, i, STRATEGIES)):
            out[c.strategy].append(c)
    return out


def _completed(strategy: str) -> list[CaseResult]:
    return [c for c in corpus()[strategy] if not c.error]


def _strict(cs: list[CaseResult]) -> list[float]:
    return [math.inf if t is None else t for c in cs if c.strict_convergence for t in c.converge]


def test_corpus_is_what_it_was() -> None:
    # The corpus is a pure function of (seed, index): the same scenarios on every machine.
    assert draw_scenario(SEED, 0) == draw_scenario(SEED, 0)
    assert draw_scenario(SEED, 0).name == "fuzz-1-0000"
    # Cases 3, 11 and 22 delete a group with traffic; they raised until a deleted group left
    # every piece of node state. Every run of every strategy completes now.
    assert {(s, i) for s in STRATEGIES for i in CORPUS if corpus()[s][i].error} == set()


# The acknowledged protocol (issue 42) holds the overshoot floors (worst 7.0 % on the corpus) but
# not yet all of these floors: first measured util min 0.889 (0.976 of windows >= 0.95), Jain min
# 0.974, 0.875 of changes within 3 ticks, 0.984 within 5; with leases from the last report a peer
# heard and restarted peers counted from their subscription: util min 0.925 (0.9855 >= 0.95), Jain
# min 0.992, 0.984 within 3 ticks, 0.992 within 5. The mark goes when they all hold again.
@pytest.mark.xfail(strict=True, reason="issue 42 open: util min 0.925 (floor 0.93), 0.984 of changes within 3 "
                   "ticks (floor 0.985) and 0.992 within 5 (floor 0.995) on the corpus; Jain min 0.992, 0.9855 of "
                   "windows >= 95 %, worst overshoot 7.0 % hold")
def test_rgd_floors_on_the_corpus() -> None:
    cs = _completed("rgd")
    assert len(cs) == len(CORPUS)
    utils = [u for c in cs for u in c.utilization]
    jains = [j for c in cs for j in c.jain]
    strict = _strict(cs)
    within3 = sum(1 for t in strict if t <= 3) / len(strict)
    within5 = sum(1 for t in strict if t <= 5) / len(strict)
    calm = sum(1 for c in cs if c.overshoot_pct <= 10.0) / len(cs)
    util_ok = sum(1 for u in utils if u >= 0.95) / len(utils)
    figures = f"util min {min(utils):.3f} ({util_ok:.4f} of windows >= 0.95), Jain min {min(jains):.4f}, " \
              f"<=3 {within3:.3f}, <=5 {within5:.3f}, no tick over 10 % in {calm:.3f} of scenarios"
    worst = max(c.overshoot_pct for c in cs)
    figures += f", worst overshoot {worst:.1f} %"
    # Since the judge counts one message off a fractional ideal as none (sim/metrics.py), Jain
    # went 0.946 -> 0.993 and changes within 3 ticks 0.966 -> 0.977; windows that converge now
    # are averaged over their converged part, not their last half, so their utilization
    # counts among the converged windows: 0.991 -> 0.988 of them at >= 0.95.
    assert min(jains) >= 0.99, figures  # the target, in every window: measured 0.993
    # The joint budget of 1.5 took convergence up (0.977 -> 0.989 within 3 ticks, 0.985 -> 0.996
    # within 5); windows bounded by the changes that touch their dimension only took it back
    # down a little (changes an unrelated one cut short now count) and the worst window up.
    # Turns at the whole message (rgd/limiting/window_turns.py) took case 0's worst window 0.921 -> 0.899: a
    # newcomer's ramp under 27.6 % loss and a 2-tick delay, a tick later, in a group of 10 000 msg/s
    # shares (no windowed bucket). The topic draws every delivery's loss from one stream, so a report
    # more or less anywhere deals every later loss again; over the 500-scenario fuzz, windows under
    # 95 % went 32 -> 35 of ~7 370, and scenarios over 10 % overshoot 8 -> 4.
    # With each delivery's loss drawn from its own identity and the cluster judged to within
    # one message: min 0.899 -> 0.913, within 3 ticks 0.984 -> 0.988, within 5 0.992 -> 0.996.
    # With a cut of at most one message keeping the bucket (behaviour 23): case 0's worst
    # window 0.913 -> 0.940, and case 9's two low windows (0.934, 0.941) became three closer
    # to the target (0.941, 0.946, 0.948): 5 -> 6 of 347 windows under 0.95.
    assert min(utils) >= 0.93, figures  # target 0.95 in every window: measured min 0.940 ...
    assert util_ok >= 0.98, figures  # ... and 0.9827 of windows at >= 0.95
    assert within3 >= 0.985, figures  # target 0.95 of changes: measured 0.988 (0.958 before the joint budget)
    assert within5 >= 0.995, figures  # target: all of them; measured 0.996 (0.977 before)
    assert calm == 1.0, figures  # target: every scenario; measured 30 of 30
    assert worst <= 10.0, figures  # the target; measured 7.0 % (case 20)


@pytest.mark.xfail(strict=True, reason="issue targets not met on the corpus, and not all able to hold within the "
                   "fuzz's bounds (sim/README.md, 'Guarantees within the bounds'): windows >= 95 % "
                   "utilization 0.9827 (all), changes within 5 ticks 0.996 (all)")
def test_rgd_meets_the_targets_on_the_corpus() -> None:
    cs = _completed("rgd")
    strict = _strict(cs)
    assert min(j for c in cs for j in c.jain) >= 0.99
    assert min(u for c in cs for u in c.utilization) >= 0.95
    assert all(t <= 5 for t in strict)


def test_no_other_strategy_converges_better_on_the_corpus() -> None:
    """Measured with leases counted from the report a peer last heard and a restarted peer
    counted from its subscription (docs/design/protocol.md, M4 and M7): rgd 253 of 257 changes
    within 3 ticks, worst 12; doorman-fair 253, worst never; doorman-proportional 230 of 251.
    (The acknowledged protocol's first version: 0.875 within 3 ticks against 0.908.)"""

    def key(strategy: str) -> tuple[float, float]:
        strict = _strict(_completed(strategy))
        return sum(1 for t in strict if t <= 3) / len(strict), -max(strict)

    for other in STRATEGIES[1:]:
        assert key(other) <= key("rgd"), (other, key(other), key("rgd"))


def test_every_corpus_run_completes() -> None:
    assert not [c.scenario for c in corpus()["rgd"] if c.error]


# -- built-ins, judged the same way ---------------------------------------------------------------


@functools.cache
def builtin(name: str, strategy: str) -> RunResult:
    return run(load(name), strategy)


def test_no_other_strategy_beats_rgd_on_worst_overshoot_of_the_builtins() -> None:
    worst = {s: max(evaluate(builtin(n, s)).overshoot_pct for n in builtin_names()) for s in STRATEGIES}
    assert all(worst["rgd"] <= w for w in worst.values()), worst


# -- the oracle against the LP on every allocation problem of the corpus ------------------------------


def _problems() -> list[tuple[tuple[float, ...], tuple[float, ...], float, float]]:
    """Each change's first judged tick, per dimension: the problems the judge actually solves."""
    seen = set()
    runs = [builtin(n, "rgd") for n in builtin_names()]
    runs += [run(draw_scenario(SEED, i), "rgd") for i in CORPUS if not corpus()["rgd"][i].error]
    for r in runs:
        for series in r.dims.values():
            for ch in r.changes:
                t = series[ch.observable] if ch.observable < len(series) else None
                if t is None:
                    continue
                ids = sorted(t.offered)
                sizes = tuple(t.message_bytes.get(i, 1.0) for i in ids) if t.bytes_quota >= 0 else (1.0,) * len(ids)
                seen.add((tuple(t.offered[i] for i in ids), sizes, t.quota, t.bytes_quota))
    return sorted(seen)


def test_oracle_matches_the_lp_on_the_corpus() -> None:
    from sim.oracle import dominant_fair

    problems = _problems()
    assert len(problems) > 100
    for demands, sizes, m, b in problems:
        got = dominant_fair(demands, sizes, m, b).shares
        want = lexicographic_max_min(demands, sizes, m, b)
        scale = max(demands, default=1.0)
        for g, w in zip(got, want):
            assert g == pytest.approx(w, rel=1e-5, abs=1e-6 * scale), (demands, sizes, m, b, got, want)


def test_replayed_failing_case_gives_the_same_figures(tmp_path) -> None:
    from sim.fuzz import write_failure

    original = corpus()["rgd"][0]
    path = write_failure(tmp_path, SEED, 0, {"rgd": ["overshoot"]})
    sc = load(str(path))
    replayed = judge_case(sc, evaluate(run(sc, "rgd")), 0.0)
    assert replayed == CaseResult(**{**original.__dict__, "seconds": 0.0})
