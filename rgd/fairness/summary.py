"""summary.json: the driver's fold of what the tasks sent back, and the document itself.

The summary is the report's one machine-readable result (the CLI prints
from it, tests and dashboards read it), so its inputs are named fields of
one value (`SummaryInputs`) rather than a long positional list that a new
figure would have to be threaded through in the right place.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from rgd.fairness.merge import Membership, ReceiptSummary, SegmentMeta, accounting_summary, publisher_gaps
from rgd.fairness.options import ReportOptions
from rgd.fairness.receipts import quantile_from_hist
from rgd.fairness.series import Grid

__all__ = ["ENDING_TICKS", "STARTUP_TICKS", "SummaryInputs", "build_summary", "daemon_endings", "fold_small",
           "jsonable", "pick_charted"]


STARTUP_TICKS = 2  # a group's first ticks: never among its worst moments
ENDING_TICKS = 1  # ... nor its last (daemons stopping: the last counts cover part of a tick)


def fold_small(small: list[tuple[str, dict[str, Any]]], opts: ReportOptions, tick_s: float = 1.0
               ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per (group, dim): the summary row; plus chart bins, worst ticks and raw convergence events.

    The worst ticks leave out a group's first STARTUP_TICKS ticks: daemons are starting, their
    first counts cover part of a tick and no share has been computed yet, so those ticks say
    how the run began, not how well the cluster enforces (they are in ticks.parquet); and its
    last ENDING_TICKS, where the daemons stop within the tick."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    tb, wr, cv = [], [], []
    for group, by_dim in small:
        for dim, part in by_dim.items():
            a = part["agg"]
            t = acc.setdefault((group, dim), {"ticks": 0, "first_s": math.inf, "last_s": -math.inf})
            t["ticks"] += a["ticks"]
            t["first_s"] = min(t["first_s"], a["first_s"])
            t["last_s"] = max(t["last_s"], a["last_s"])
            for k in ("quota_sum", "admitted_sum", "demand_sum", "overshoot_ratio_sum", "overshoot_ratio_n",
                      "ticks_over_quota", "utilization_sum", "utilization_n", "jain_sum", "jain_n",
                      "fair_error_sum", "fair_error_n"):
                t[k] = t.get(k, 0) + (0 if a[k] != a[k] else a[k])
            for k, how in (("overshoot_ratio_max", max), ("jain_min", min), ("fair_error_max", max),
                           ("daemons_max", max)):
                v = a[k]
                if v == v:
                    t[k] = v if k not in t else how(t[k], v)
            tb.append(part["tbin"].assign(group=group, dim=dim))
            wr.append(part["worst"].assign(group=group, dim=dim))
            if part["conv"]:
                cv.append(pd.DataFrame(part["conv"]).assign(group=group, dim=dim))
    rows = []
    for (group, dim), t in sorted(acc.items()):
        def mean(k: str, t: dict[str, Any] = t) -> float:  # default: binds the loop's t (B023)
            n = t.get(f"{k}_n", t["ticks"])
            return float(t[f"{k}_sum"] / n) if n else float("nan")

        rows.append({"group": group, "dim": dim, "ticks": t["ticks"], "first_s": t["first_s"], "last_s": t["last_s"],
                     "quota_mean": t["quota_sum"] / t["ticks"], "admitted_mean": t["admitted_sum"] / t["ticks"],
                     "demand_mean": t["demand_sum"] / t["ticks"],
                     "overshoot_ratio_max": t.get("overshoot_ratio_max", float("nan")),
                     "overshoot_ratio_mean": mean("overshoot_ratio"), "ticks_over_quota": int(t["ticks_over_quota"]),
                     "utilization_mean": mean("utilization"), "jain_mean": mean("jain"),
                     "jain_min": t.get("jain_min", float("nan")), "fair_error_mean": mean("fair_error"),
                     "fair_error_max": t.get("fair_error_max", float("nan")),
                     "daemons_max": int(t.get("daemons_max", 0))})
    per_group = pd.DataFrame(rows, columns=[
        "group", "dim", "ticks", "first_s", "last_s", "quota_mean", "admitted_mean", "demand_mean",
        "overshoot_ratio_max", "overshoot_ratio_mean", "ticks_over_quota", "utilization_mean", "jain_mean",
        "jain_min", "fair_error_mean", "fair_error_max", "daemons_max"])
    chart = pd.concat(tb, ignore_index=True) if tb else pd.DataFrame()
    if len(chart):  # a bin split by a chunk border appears twice: combine
        chart = chart.groupby(["group", "dim", "bin"], as_index=False).agg(
            time_s=("time_s", "min"), quota=("quota", "mean"), admitted=("admitted", "mean"),
            admitted_max=("admitted_max", "max"), demand=("demand", "mean"), jain=("jain", "mean"),
            jain_min=("jain_min", "min"), fair_error=("fair_error", "mean"), fair_error_max=("fair_error_max", "max"),
            overshoot_ratio_max=("overshoot_ratio_max", "max"))
    worst = pd.concat(wr, ignore_index=True) if wr else pd.DataFrame()
    if len(worst):
        keys = list(zip(worst["group"], worst["dim"]))
        start = np.array([acc[k]["first_s"] for k in keys], dtype=float)
        end = np.array([acc[k]["last_s"] for k in keys], dtype=float)
        at = worst["time_s"].to_numpy(float)
        worst = worst[(at >= start + STARTUP_TICKS * tick_s - 1e-9) & (at <= end - ENDING_TICKS * tick_s + 1e-9)]
        worst = (worst.sort_values(["group", "dim", "score"], ascending=[True, True, False])
                 .groupby(["group", "dim"]).head(10).reset_index(drop=True))
    conv = pd.concat(cv, ignore_index=True) if cv else pd.DataFrame(
        columns=["group", "dim", "bucket", "kind", "converged", "ticks", "end_bucket", "open"])
    return per_group, chart, worst, conv


def pick_charted(per_group: pd.DataFrame, limit: int) -> list[str]:
    """Groups worth a chart: the least fair or most overshooting first."""
    if per_group.empty:
        return []
    g = per_group.groupby("group").agg(fe=("fair_error_mean", "max"), ov=("overshoot_ratio_max", "max"))
    g = g.fillna(0).sort_values(["fe", "ov"], ascending=False)
    charted: list[str] = sorted(g.index[:limit].tolist())
    return charted


@dataclass(frozen=True, kw_only=True, slots=True)
class SummaryInputs:
    """What the summary is built from: the run's input, grid and options, and the merged results."""

    source: str  # the path or URI the report was asked for
    segments: list[tuple[str, int]]  # (uri, size) of every segment listed
    total_bytes: int
    grid: Grid
    grid_seen: int  # the most common tick in the reports' headers
    bin_ticks: int  # ticks per point of the share charts
    opts: ReportOptions
    metas: list[SegmentMeta]  # every segment's metadata, failed ones included
    good: list[SegmentMeta]  # ... the ones that decoded
    damage: dict[str, Any]
    headers: pd.DataFrame
    mem: Membership
    rec: ReceiptSummary
    per_group: pd.DataFrame  # fold_small's per (group, dim) rows
    conv: pd.DataFrame  # stitched convergence events
    totals_by_group: pd.DataFrame
    daemons: pd.DataFrame  # per (group, dim, daemon) figures (daemons.parquet)
    names: dict[int, str]  # daemon key -> name
    group_rows: int


def build_summary(s: SummaryInputs) -> dict[str, Any]:
    """The summary document, before `jsonable` (numpy scalars, NaN and infinities still in it)."""
    per_group, conv, names, mem, rec, headers = s.per_group, s.conv, s.names, s.mem, s.rec, s.headers
    groups: dict[str, Any] = {}
    row: Any  # a per_group row (pandas types its fields no closer)
    for row in per_group.sort_values(["group", "dim"]).itertuples(index=False):
        g = groups.setdefault(row.group, {"dims": {}})
        c = conv[(conv["group"] == row.group) & (conv["dim"] == row.dim)] if len(conv) else conv
        conv_done = c[c["converged"]]["seconds"] if len(c) else pd.Series(dtype=float)
        d = {k: getattr(row, k) for k in per_group.columns if k not in ("group", "dim")}
        d["convergence"] = {
            "events": int(len(c)), "converged": int(c["converged"].sum()) if len(c) else 0,
            "median_s": float(conv_done.median()) if len(conv_done) else None,
            "p90_s": float(conv_done.quantile(0.9)) if len(conv_done) else None,
            "max_s": float(conv_done.max()) if len(conv_done) else None,
        }
        g["dims"][row.dim] = d
    for gname, trow in s.totals_by_group.iterrows() if len(s.totals_by_group) else []:
        g = groups.setdefault(str(gname), {"dims": {}})
        g["totals"] = {k: int(v) for k, v in trow.items()}
    loss = rec.loss
    lost = int(loss["lost"].sum()) if len(loss) else 0
    expected = int(loss["expected"].sum()) if len(loss) else 0
    # daemons with at least one lost report (all pairs are in loss.parquet)
    by_pub = {k: v for k, v in loss.groupby("publisher")["lost"].sum().items() if v} if len(loss) else {}
    by_recv = {k: v for k, v in loss.groupby("receiver")["lost"].sum().items() if v} if len(loss) else {}
    n_receipts = int(sum(m.receipts for m in s.good))
    delay_sum = float(rec.pairs["delay_sum"].sum()) if len(rec.pairs) else 0.0
    stale_n = float(rec.pairs["stale_n"].sum()) if len(rec.pairs) else 0.0
    daemons = sorted({names.get(int(k), f"#{k}") for k in headers["daemon"].unique()}) if len(headers) else []
    accounting = accounting_summary(s.good, names, daemons)
    endings = daemon_endings(mem.events, names, accounting)
    grid_ms = s.grid.grid_ms
    return {
        "source": s.source,
        "group_rows": s.group_rows,
        "input": {"segments": len(s.segments), "bytes": int(s.total_bytes),
                  "frames": int(sum(m.frames for m in s.metas)),
                  "published_reports": int(sum(m.published for m in s.good)),
                  "group_rows": s.group_rows, "receipts": n_receipts},
        "grid_ms": grid_ms, "tick_ms_most_common": s.grid_seen, "share_bin_ticks": s.bin_ticks,
        "options": asdict(s.opts),
        "span": {"first_bucket": mem.t_first, "last_bucket": mem.t_last,
                 "ticks": max(mem.t_last - mem.t_first + 1, 0),
                 "first_s": mem.t_first * grid_ms / 1000.0, "last_s": mem.t_last * grid_ms / 1000.0},
        "daemons": daemons,
        "accounting": accounting,
        "membership_events": ({e: int(n) for e, n in mem.events["event"].value_counts().items()}
                              if len(mem.events) else {}),
        **endings,
        "damage": s.damage,
        "published_sequence_gaps": publisher_gaps(headers) if len(headers) else 0,
        "loss": {"expected": expected, "lost": lost, "ratio": (lost / expected) if expected else 0.0,
                 "by_publisher": {str(k): int(v) for k, v in by_pub.items()},
                 "by_receiver": {str(k): int(v) for k, v in by_recv.items()},
                 "duplicates": int(loss["duplicates"].sum()) if len(loss) else 0},
        "delay_ms": {"mean": delay_sum / n_receipts if n_receipts else None,
                     "p50": quantile_from_hist(rec.delay_hist, 0.5, rec.delay_max),
                     "p99": quantile_from_hist(rec.delay_hist, 0.99, rec.delay_max),
                     "max": rec.delay_max},
        "staleness_ms": {"mean": (float(rec.pairs["stale_sum"].sum()) / stale_n) if stale_n else None,
                         "p50": quantile_from_hist(rec.stale_hist, 0.5, rec.stale_max),
                         "p99": quantile_from_hist(rec.stale_hist, 0.99, rec.stale_max),
                         "max": rec.stale_max},
        "groups": groups,
    }


def daemon_endings(events: pd.DataFrame, names: dict[int, str], accounting: dict[str, Any]) -> dict[str, list[str]]:
    """How daemons went: `daemons_stopped` stopped cleanly (a leaving report, and the final
    accounting frame where the log keeps accounting), whether mid-run or at the run's end;
    `daemons_crashed` ended without the final accounting (killed, crashed); `daemons_evicted`
    fell silent and were evicted by the TTL (peers' view: a crash or a partition);
    `daemons_left` is the union of the last two: every daemon that went other than by a stop."""
    acct = accounting.get("daemons", {})
    crashed = {d for d, a in acct.items() if a.get("crashes")}
    stopped, evicted = set(), set()
    for e, d in zip(events["event"], events["daemon"]) if len(events) else []:
        name = names.get(int(d), f"#{d}")
        if e == "leave" and name not in crashed:
            stopped.add(name)
        elif e == "silent":
            evicted.add(name)
    stopped |= {d for d, a in acct.items() if a.get("ended") == "stopped"}
    evicted -= stopped | crashed
    return {"daemons_stopped": sorted(stopped), "daemons_crashed": sorted(crashed),
            "daemons_evicted": sorted(evicted), "daemons_left": sorted(crashed | evicted)}


def jsonable(x: Any) -> Any:
    """`x` with numpy scalars as Python ones, NaN as null and infinities as "inf"/"-inf"
    (strict JSON has no NaN or Infinity)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        return None if math.isnan(f) else (f if math.isfinite(f) else ("inf" if f > 0 else "-inf"))
    if isinstance(x, np.bool_):
        return bool(x)
    return x
