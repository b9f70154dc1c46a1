"""The Spark fairness report: `run_report(path_or_uri, out_dir)` (DESIGN.md section 3).

Stages (each prints a progress line on stderr; Spark's own bar too on a terminal):
1. list segments (`*.seg`, `*.open`) under a directory or fsspec URI, and read
   the head of each daemon's first segment for the tick length and the chunk
   origin (bucketing happens inside the decode tasks); the Spark session
   starts meanwhile, in a thread;
2. on a cluster (any master but local): ship rgd's code to the executors and
   check their Python (ship.py);
3. one Spark job (its task functions: executor.py): decode, segments packed
   into about four tasks per core (`mapInArrow`, task.py): frames, receipts and reports become dense series
   rows (series.py), while each segment's small SegmentMeta is written beside
   the data; then one task per (group, chunk of ticks)
   (`groupBy().applyInArrow`, analyze.py): forward fill, fair shares and the
   per-tick figures, written as Parquet by the task itself; only bounded
   aggregates come back to the driver;
4. on the driver: damage, membership, loss, delay, staleness (merge.py);
   convergence stitched across chunks; the summary and `report.html` (html.py).

Outputs in out_dir: ticks/ and shares/ (Parquet datasets, one file per group
and chunk), segments, loss, delay, delay_ticks, totals, daemons, convergence,
membership (.parquet), summary.json, report.html; spark.log (the JVM's console).

Segments are read by the Python workers through fsspec (local paths, file://,
s3://, gs://, hdfs:// ... with the matching fsspec driver installed on the
workers, see rgd.config.storage), and out_dir must be reachable the same way by the
workers and the driver (on a cluster: shared storage or an object store). Bad
input never stops the run: a segment that cannot be read or decoded is
skipped and reported.

This module only runs the stages in order; each stage's work lives in its
own module: progress (the console lines), listing (segments and the grid),
spark_session (the session and its console log), executor (the Spark tasks,
importable on executors), writers (every output file, written atomically),
summary (summary.json), options (ReportOptions).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pandas as pd

from rgd.config.storage import filesystem
from rgd.fairness.executor import (
    AUX_SCHEMA,
    DECODED_SCHEMA,
    analyze_groups,
    build_context,
    decode_partitions,
    plan_decode_tasks,
)
from rgd.fairness.listing import list_segments, sample_grid
from rgd.fairness.merge import (
    SegmentMeta,
    choose_grid_ms,
    damage_summary,
    merge_receipts,
    segments_table,
    totals_frame,
)
from rgd.fairness.options import ReportOptions
from rgd.fairness.progress import Progress
from rgd.fairness.series import Grid
from rgd.fairness.spark_session import jvm_log_path, spark_session
from rgd.fairness.summary import SummaryInputs, build_summary, fold_small, jsonable, pick_charted
from rgd.fairness.writers import load_pickles, write_frame, write_text

__all__ = ["run_report", "ship_code"]


def run_report(path_or_uri: str, out_dir: str, master: str | None = None, progress: bool = True,
               *, spark: Any = None, options: ReportOptions | None = None) -> dict[str, Any]:
    """Replay the usage logs under `path_or_uri` with Spark; write tables, summary.json and report.html.

    Returns the summary (also written as summary.json). `spark`: an existing
    session to use (kept open); otherwise one is created for `master`
    (default local[*]) and stopped at the end.
    """
    opts = options or ReportOptions()
    prog = Progress(progress)
    t_start = time.monotonic()
    own_session = spark is None
    # The JVM takes seconds to start and waits on nothing here: start it while the segments are
    # listed and sampled (py4j is thread-safe; the session is the same either way). Its console
    # output goes to spark.log (Progress keeps its own handle on the real stderr).
    # In the temp directory while Spark runs (nothing is written to --out before the logs
    # are found), beside the report once it is written.
    jvm_log = os.path.join(tempfile.gettempdir(), f"rgd-report-spark-{os.getpid()}.log") if own_session else None
    final_log = jvm_log_path(out_dir) if own_session else None
    starting = ThreadPoolExecutor(1, thread_name_prefix="rgd-spark-start") if own_session else None
    pending = starting.submit(spark_session, master, opts, progress, jvm_log) if starting else None
    try:
        with prog.stage("list", path_or_uri):
            segments = list_segments(path_or_uri)
            total_bytes = sum(s for _, s in segments)
            prog.say(f"{len(segments)} segments, {total_bytes / 1e6:.1f} MB")
            sampled_tick, earliest_ms = sample_grid(segments)
        grid_ms = opts.tick_ms or sampled_tick or 1000
        lookback = max(opts.group_ttl_ticks, 1) + 1
        origin = earliest_ms // grid_ms if earliest_ms is not None else 0
        grid = Grid(grid_ms, opts.chunk_ticks, lookback, origin)
        if pending is not None:
            # The session started beside the listing: say how long it took, and how long we then
            # waited for it (a stage timed from here alone read "spark done in 0.0s").
            waited = time.monotonic()
            spark = pending.result()
            prog.timings["spark_wait"] = round(time.monotonic() - waited, 3)
            prog.say(f"spark session {master or 'local[*]'} ready {time.monotonic() - t_start:.1f}s after the start "
                     f"(started beside the listing; waited {prog.timings['spark_wait']:.1f}s for it; "
                     f"Spark's own log: {final_log})")
    except BaseException:
        if pending is not None:  # a started session must not outlive a failed listing
            pending.add_done_callback(lambda f: f.exception() is None and f.result().stop())
        raise
    finally:
        if starting is not None:
            starting.shutdown(wait=False)
    sc = spark.sparkContext
    ship_dir = None
    executors = None
    try:
        if not sc.master.startswith("local"):
            ship_dir = tempfile.mkdtemp(prefix="rgd-ship-")
            with prog.stage("executors", "ship rgd's code, check the executors' Python"):
                executors = ship_code(sc, ship_dir, path_or_uri, out_dir)
        summary = _run(spark, sc, segments, total_bytes, grid, opts, out_dir, prog, t_start, path_or_uri, executors)
    finally:
        if own_session:
            spark.stop()
        if ship_dir is not None:
            shutil.rmtree(ship_dir, ignore_errors=True)
    if jvm_log is not None and final_log is not None and final_log != jvm_log and os.path.exists(jvm_log):
        shutil.move(jvm_log, final_log)  # the JVM has exited: nothing writes to it any more
    return summary


def ship_code(sc: Any, directory: str, *uris: str) -> dict[str, Any]:
    """Make rgd importable on executors that do not have it, then check they have the rest.

    Local masters skip this: their Python workers run on this machine, where
    rgd is installed.
    """
    from rgd.fairness.ship import check_executors, package_zip

    sc.addPyFile(str(package_zip(directory)))
    return check_executors(sc, *uris)


def _run(spark: Any, sc: Any, segments: list[tuple[str, int]], total_bytes: int, grid: Grid,
         opts: ReportOptions, out_dir: str, prog: Progress, t_start: float, source: str,
         executors: dict[str, Any] | None = None) -> dict[str, Any]:
    from rgd.fairness.analyze import stitch_convergence

    fs, root = filesystem(out_dir)
    root = root.rstrip("/")
    fs.makedirs(root, exist_ok=True)
    work = f"{root}/_work"
    if fs.exists(work):
        fs.rm(work, recursive=True)
    fs.makedirs(f"{work}/meta", exist_ok=True)
    meta_dir = fs.unstrip_protocol(f"{work}/meta") if "://" in out_dir else f"{work}/meta"
    ticks_dir, shares_dir = f"{root}/ticks", f"{root}/shares"
    for d in (ticks_dir, shares_dir):
        if fs.exists(d):
            fs.rm(d, recursive=True)
        fs.makedirs(d, exist_ok=True)

    def uri_of(p: str) -> str:
        return str(fs.unstrip_protocol(p)) if "://" in out_dir else p

    tasks = plan_decode_tasks(segments, sc.defaultParallelism)
    series = spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(
        decode_partitions(grid, meta_dir, tasks), DECODED_SCHEMA)
    spark.conf.set("spark.sql.shuffle.partitions", str(max(2, min(400, 4 * sc.defaultParallelism))))
    out = series.groupBy("group_key", "chunk").applyInArrow(
        analyze_groups(meta_dir, uri_of(ticks_dir), uri_of(shares_dir), grid, opts), AUX_SCHEMA)
    with prog.stage("decode+analyze",
                    f"{len(segments)} segments in {len(tasks)} decode tasks, then one task per (group, chunk)",
                    sc=sc):
        aux = [pickle.loads(r["blob"]) | {"group_key": r["group_key"]} for r in out.collect()]
    with prog.stage("merge", "damage, membership, receipts"):
        metas: list[SegmentMeta] = sorted(load_pickles(meta_dir, ".meta.pkl"), key=lambda m: m.uri)
        fs.rm(work, recursive=True)
        ctx, mem, headers = build_context(metas, grid, opts)
        names = ctx.names
        segs = segments_table(metas, names)
        damage = damage_summary(segs, metas)
        good = [m for m in metas if m.error is None]
        grid_seen = choose_grid_ms(headers, grid.grid_ms)
        rec = merge_receipts(good, names)
        totals = totals_frame(good, names)
        write_frame(segs, out_dir, "segments")
        write_frame(rec.loss, out_dir, "loss")
        write_frame(rec.pairs.drop(columns=[c for c in ("delay_sum", "stale_sum") if c in rec.pairs]),
                    out_dir, "delay")
        write_frame(rec.ticks.assign(time_s=rec.ticks["bucket"].astype(float) * grid.grid_ms / 1000.0),
                    out_dir, "delay_ticks")
        write_frame(totals, out_dir, "totals")
        ev = mem.events.copy()
        ev["daemon"] = [names.get(int(k), f"#{k}") for k in ev["daemon"]]
        write_frame(ev, out_dir, "membership")
    with prog.stage("summary"):
        import pyarrow.dataset as ds

        shares = ds.dataset(shares_dir, filesystem=fs, format="parquet").to_table().to_pandas() \
            if fs.ls(shares_dir) else pd.DataFrame(
                columns=["group", "dim", "bucket", "time_s", "daemon", "admitted", "demand", "fair", "limit", "ticks"])
        dparts = [a["daemons"] for a in aux if a["daemons"] is not None]
        daemons_pd = (pd.concat(dparts, ignore_index=True).groupby(["group", "dim", "daemon"], as_index=False).agg(
            ticks=("ticks", "sum"), admitted_sum=("admitted", "sum"), demand_sum=("demand", "sum"),
            fair_sum=("fair", "sum"), abs_dev_sum=("abs_dev", "sum"), max_dev_ratio=("max_dev_ratio", "max"),
            ticks_over=("ticks_over", "sum")) if dparts else pd.DataFrame(
                columns=["group", "dim", "daemon", "ticks", "admitted_sum", "demand_sum", "fair_sum", "abs_dev_sum",
                         "max_dev_ratio", "ticks_over"]))
        daemons_pd["share_of_fair"] = (daemons_pd["admitted_sum"]
                                       / daemons_pd["fair_sum"].where(daemons_pd["fair_sum"] > 0))
        write_frame(daemons_pd, out_dir, "daemons")
        per_group, chart_ticks, worst, conv_raw = fold_small(
            [(names.get(a["group_key"], f"#{a['group_key']}"), a["small"]) for a in aux], opts,
            tick_s=grid.grid_ms / 1000.0)
        conv_pd = stitch_convergence(conv_raw, grid.grid_ms)
        write_frame(conv_pd, out_dir, "convergence")
        charted = pick_charted(per_group, opts.max_groups_charted)
        chart_shares = shares[shares["group"].isin(charted)] if len(shares) else shares
        totals_by_group = totals.drop(columns=["daemon"]).groupby("group").sum() if len(totals) else pd.DataFrame()
        group_rows = int(sum(m.group_rows for m in good))
        summary = build_summary(SummaryInputs(
            source=source, segments=segments, total_bytes=total_bytes, grid=grid, grid_seen=grid_seen,
            bin_ticks=ctx.bin_ticks, opts=opts, metas=metas, good=good, damage=damage, headers=headers, mem=mem,
            rec=rec, per_group=per_group, conv=conv_pd, totals_by_group=totals_by_group, daemons=daemons_pd,
            names=names, group_rows=group_rows))
    if executors is not None:
        summary["executors"] = executors  # what the probe found on one executor (Python, libraries, rgd's zip)
    summary["timings_s"] = dict(prog.timings)
    with prog.stage("html"):
        from rgd.fairness.html import render_report

        html = render_report(summary, chart_ticks, chart_shares, worst, conv_pd, rec.ticks, daemons_pd, charted)
        write_text(fs, f"{root}/report.html", html)
    summary["timings_s"] = dict(prog.timings)
    summary["elapsed_s"] = round(time.monotonic() - t_start, 3)
    summary["group_rows_per_s"] = round(group_rows / summary["elapsed_s"], 1) if summary["elapsed_s"] else None
    write_text(fs, f"{root}/summary.json", json.dumps(jsonable(summary), indent=2, sort_keys=True))
    prog.say(f"done in {summary['elapsed_s']:.1f}s: {len(segments)} segments, {group_rows} group rows; "
             f"{out_dir}/report.html")
    result: dict[str, Any] = jsonable(summary)
    return result
