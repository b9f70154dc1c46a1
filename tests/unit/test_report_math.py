"""The report's pure math: fair shares, Jain, per-tick figures, convergence, membership (no Spark)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.fairness.measures import convergence, jain_index, max_min_fair, max_min_fair_matrix, tick_figures
from rgd.fairness.merge import membership
from rgd.fairness.series import forward_fill_index


def test_max_min_fair_known_splits() -> None:
    # Doorman's docs: capacity 120, wants 1000/50/10 -> FairShare 60/50/10
    assert max_min_fair(np.array([1000.0, 50, 10]), 120).tolist() == [60, 50, 10]
    # DESIGN.md section 2: quota 1000, demands 800/300 -> 700/300 (PIP-82 freezes at 727/272)
    assert max_min_fair(np.array([800.0, 300]), 1000).tolist() == [700, 300]
    assert max_min_fair(np.array([2000.0, 2000, 100]), 1000).tolist() == [450, 450, 100]
    assert max_min_fair(np.array([10.0, 20]), 100).tolist() == [10, 20]  # enough for all
    assert max_min_fair(np.array([10.0, 20]), np.inf).tolist() == [10, 20]
    assert max_min_fair(np.array([10.0, 20]), 0).tolist() == [0, 0]
    assert max_min_fair(np.array([np.nan, 50.0]), 30).tolist() == [0, 30]


def _progressive_filling(demands: list[float], cap: float) -> list[float]:
    """Max-min fair shares by the textbook procedure, written apart from rgd.fairness: serve
    the smallest demand first, each getting at most an equal split of what is left."""
    out = [0.0] * len(demands)
    left = cap
    order = sorted(range(len(demands)), key=lambda i: demands[i])
    for served, i in enumerate(order):
        out[i] = min(demands[i], left / (len(demands) - served))
        left -= out[i]
    return out


def test_progressive_filling_knows_the_literals() -> None:  # the oracle below, checked by hand
    assert _progressive_filling([1000.0, 50, 10], 120) == [60, 50, 10]
    assert _progressive_filling([2000.0, 2000, 100], 1000) == [450, 450, 100]


def test_matrix_matches_columns() -> None:
    # Each column is one tick's split; the oracle is progressive filling (above), not the
    # module's own per-tick max_min_fair.
    rng = np.random.default_rng(3)
    d = rng.uniform(0, 100, size=(7, 50))
    cap = rng.uniform(0, 600, size=50)
    m = max_min_fair_matrix(d, cap)
    for t in range(50):
        assert np.allclose(m[:, t], _progressive_filling(d[:, t].tolist(), float(cap[t])))


def test_jain_index() -> None:
    assert jain_index(np.array([1.0, 1, 1])) == pytest.approx(1.0)
    assert jain_index(np.array([1.0, 0, 0, 0])) == pytest.approx(0.25)
    x = np.array([[1.0, 2.0], [1.0, 0.0]])
    assert jain_index(x, np.array([[True, True], [True, False]])).tolist() == [1.0, 1.0]
    assert np.isnan(jain_index(np.array([1.0]), np.array([False])))


def test_tick_figures_by_hand() -> None:
    # quota 100; demands 80/30/20 -> fair 50/30/20; admitted 80/30/20 overshoots by 30
    adm = np.array([[80.0, 50.0], [30.0, 30.0], [20.0, 20.0]])
    dem = np.array([[80.0, 80.0], [30.0, 30.0], [20.0, 20.0]])
    present = np.ones_like(adm, dtype=bool)
    f = tick_figures(adm, dem, present, np.array([100.0, 100.0]))
    assert f.admitted.tolist() == [130, 100]
    assert f.overshoot.tolist() == [30, 0]
    assert f.overshoot_ratio.tolist() == pytest.approx([0.3, 0.0])
    assert f.utilization.tolist() == pytest.approx([1.3, 1.0])
    assert f.fair_error.tolist() == pytest.approx([0.3, 0.0])
    assert f.fair[:, 0].tolist() == [50, 30, 20]
    assert f.worst[0] == 0
    assert f.jain[1] == pytest.approx(1.0)
    x = np.array([80 / 50, 1, 1])
    assert f.jain[0] == pytest.approx(x.sum() ** 2 / (3 * (x * x).sum()))
    assert f.fair_shift.tolist() == [0, 0]


def test_convergence_events() -> None:
    members = np.array([1] * 10 + [2] * 10)
    shift = np.zeros(20)
    shift[14] = 0.5  # demand moved
    err = np.array([0.3] * 4 + [0.0] * 6 + [0.2, 0.2, 0.0, 0.0, 0.3, 0.3, 0.3, 0.0, 0.0, 0.0])
    over = np.zeros(20)
    ev = convergence(members, shift, err, over, shift_threshold=0.1, tolerance=0.05, hold=3)
    assert [(e.index, e.kind, e.converged, e.ticks) for e in ev] == [
        (0, "start", True, 4), (10, "membership", False, 4), (14, "demand", True, 3)]


def test_forward_fill_stops_at_ttl_and_barriers() -> None:
    reported = np.zeros((2, 12), dtype=bool)
    reported[0, [0, 5]] = True
    reported[1, [1]] = True
    last, live = forward_fill_index(reported, w0=100, group_ttl=3, barriers=[np.array([], np.int64),
                                                                              np.array([103])])
    assert last[0].tolist() == [0, 0, 0, 0, 0, 5, 5, 5, 5, 5, 5, 5]
    assert live[0].tolist() == [True] * 4 + [False] + [True] * 4 + [False] * 3
    assert live[1].tolist() == [False, True, True, False] + [False] * 8  # evicted at bucket 103


def test_membership_join_leave_silence_restart() -> None:
    rows = []
    for b in range(0, 10):
        rows.append(("a", b, 1, b, False))
    for b in (0, 1, 2, 7, 8):  # silent 3..6: evicted after ttl 2 at bucket 5
        rows.append(("b", b, 1, b, False))
    rows.append(("c", 0, 1, 0, False))
    rows.append(("c", 1, 1, 1, True))  # leaves at 1
    rows.append(("a", 10, 2, 1, False))  # restart: new incarnation
    h = pd.DataFrame(rows, columns=["daemon", "bucket", "incarnation", "seq", "leaving"])
    keys = {"a": 11, "b": 22, "c": 33}
    h = pd.DataFrame({"daemon": h["daemon"].map(keys), "incarnation": h["incarnation"], "seq": h["seq"],
                      "pub_ms": h["bucket"] * 1000 + 5, "tick_ms": 1000, "leaving": h["leaving"].astype(int),
                      "groups": 1, "order": np.arange(len(h))})
    m = membership(h, 1000, member_ttl=2)
    assert (m.t_first, m.t_last) == (0, 10)
    assert m.members_n.tolist() == [3, 2, 2, 2, 2, 1, 1, 2, 2, 2, 2]
    assert m.barriers[33].tolist() == [2]
    assert m.barriers[22].tolist() == [5]
    ev = {(r.daemon, r.bucket, r.event) for r in m.events.itertuples()}
    assert (22, 5, "silent") in ev and (22, 7, "join") in ev and (33, 1, "leave") in ev
    assert (11, 10, "restart") in ev
    assert m.members_fp[0] == 11 + 22 + 33 and m.members_fp[5] == 11


def test_html_helpers_draw_real_svg() -> None:
    from rgd.fairness.html import fmt, line_chart, nice_ticks, stacked_chart

    assert nice_ticks(0, 1000) == [0, 250, 500, 750, 1000]
    assert fmt(1234567) == "1.23M" and fmt(float("nan")) == "-" and fmt(float("inf")) == "∞" and fmt(12) == "12"
    xs = [0.0, 1.0, 2.0, 3.0]
    svg = line_chart(xs, [("quota", [10, 10, 10, 10], "#f00", True),
                          ("admitted", [1, 5, 9, float("nan")], "#00f", False)],
                     "msg/s", title="t")
    assert svg.count("<polyline") == 2 and "stroke-dasharray" in svg and "<title>admitted</title>" in svg
    pts = svg.split('points="')[2].split('"')[0].split()
    assert len(pts) == 3  # the NaN is left out, not drawn at zero
    svg = stacked_chart(xs, [("a", [1, 1, 1, 1], "#111"), ("b", [2, 2, 2, 2], "#222")], "msg/s",
                        ("quota", [4, 4, 4, 4], "#000"))
    assert svg.count("<path") == 2 and svg.count("<polyline") == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.one_of(st.just(float("nan")), st.floats(-1e6, 1e6))), min_size=1,
                max_size=40))
def test_bin_stat_is_pandas_groupby(cells: list[tuple[int, float]]) -> None:
    import pandas as pd

    from rgd.fairness.analyze import bin_stat

    cells = sorted(cells, key=lambda c: c[0])
    keys = np.array([c[0] for c in cells])
    x = np.array([c[1] for c in cells])
    _, first = np.unique(keys, return_index=True)
    g = pd.DataFrame({"k": keys, "x": x}).groupby("k")["x"]
    for how in ("mean", "min", "max"):
        np.testing.assert_allclose(bin_stat(x, first, how), getattr(g, how)().to_numpy(), rtol=1e-12, atol=1e-9)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 10**9), max_size=60), st.integers(1, 16))
def test_decode_tasks_cover_every_segment_once_balanced_by_bytes(sizes: list[int], slots: int) -> None:
    from rgd.fairness.executor import plan_decode_tasks

    segments = [(f"s{i}", n) for i, n in enumerate(sizes)]
    tasks = plan_decode_tasks(segments, slots)
    assert sorted(i for t in tasks for i, _ in t) == list(range(len(sizes)))
    assert all(uri == f"s{i}" for t in tasks for i, uri in t)
    if sizes:
        assert len(tasks) == min(len(sizes), 4 * slots)
        loads = [sum(max(sizes[i], 1) for i, _ in t) for t in tasks]
        assert max(loads) - min(loads) <= max(max(sizes), 1)  # greedy largest-first: within one segment
