"""The Spark fairness report: `run_report(path_or_uri, out_dir)` (DESIGN.md section 3, issue 5).

Stages (each prints a progress line on stderr; Spark's own bar too on a terminal):
1. list segments (`*.seg`, `*.open`) under a directory or fsspec URI, and read
   the head of each daemon's first segment for the tick length and the chunk
   origin (bucketing happens inside the decode tasks); the Spark session
   starts meanwhile, in a thread;
2. on a cluster (any master but local): ship rgd's code to the executors and
   check their Python (ship.py);
3. one Spark job: decode, segments packed into about four tasks per core
   (`mapInArrow`, task.py): frames, receipts and reports become dense series
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
workers, see rgd.storage), and out_dir must be reachable the same way by the
workers and the driver (on a cluster: shared storage or an object store). Bad
input never stops the run: a segment that cannot be read or decoded is
skipped and reported.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Mapping

import numpy as np
import pandas as pd

from rgd.report.analyze import Context
from rgd.report.merge import (
    SegmentMeta, choose_grid_ms, damage_summary, headers_frame, membership, merge_receipts, publisher_gaps,
    segments_table, totals_frame,
)
from rgd.report.receipts import quantile_from_hist
from rgd.report.series import Grid, SeriesRow
from rgd.storage import filesystem, scheme
from rgd.usage_log.segment import parse_name

DECODED_SCHEMA = "group_key long, chunk long, daemon_key long, `order` long, b0 long, n long, dims long, blob binary"
AUX_SCHEMA = "group_key long, blob binary"


@dataclass(frozen=True, slots=True)
class ReportOptions:
    tick_ms: int | None = None  # grid; None: the most common tick in the reports
    chunk_ticks: int = 3600  # ticks per reducer task (memory bound: daemons x chunk)
    group_ttl_ticks: int = 9  # like the daemon's (report_every + ttl_ticks + 1)
    member_ttl_ticks: int = 3  # like the daemon's ttl_ticks
    share_bins: int = 100  # points per group in the stacked-share table and charts
    tolerance: float = 0.05  # convergence: fair error and overshoot ratio at most this ...
    hold_ticks: int = 3  # ... for this many ticks
    shift_threshold: float = 0.10  # a demand change: the fair split moved by this share of the quota
    max_groups_charted: int = 24
    driver_memory: str = "6g"
    spark_conf: tuple[tuple[str, str], ...] = ()  # extra Spark settings, applied last


class Progress:
    """One console line per stage (stderr), with its duration."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.t0 = time.monotonic()
        self.timings: dict[str, float] = {}
        # The JVM starts on another thread with file descriptor 2 pointed at spark.log for a
        # while (spark_session): progress keeps a handle on the real stderr of its own.
        self.out = sys.stderr
        try:
            self.out = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
        except (AttributeError, OSError, ValueError):  # a stderr without a descriptor (tests)
            pass

    def say(self, msg: str) -> None:
        if self.enabled:
            print(f"[rgd report {time.monotonic() - self.t0:7.1f}s] {msg}", file=self.out, flush=True)

    @contextmanager
    def stage(self, name: str, detail: str = "", sc: Any = None) -> Iterator[None]:
        """Time a stage; with `sc`, report Spark's task counts every 5 s while it runs
        (Spark draws its own bar only on a terminal)."""
        self.say(f"{name} ... {detail}".rstrip())
        t = time.monotonic()
        stop = threading.Event()
        watcher = None
        if sc is not None and self.enabled and not sys.stderr.isatty():
            watcher = threading.Thread(target=self._watch, args=(sc, stop), daemon=True)
            watcher.start()
        try:
            yield
        finally:
            stop.set()
            if watcher is not None:
                watcher.join(2.0)
        self.timings[name] = round(time.monotonic() - t, 3)
        self.say(f"{name} done in {self.timings[name]:.1f}s")

    def _watch(self, sc: Any, stop: threading.Event) -> None:
        last = ""
        while not stop.wait(5.0):
            try:
                tracker = sc.statusTracker()
                parts = []
                for sid in sorted(tracker.getActiveStageIds()):
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks"
                                     f"{f' ({info.numActiveTasks} running)' if info.numActiveTasks else ''}")
                line = "; ".join(parts)
            except Exception:  # the tracker is best effort: never fail a report over progress lines
                return
            if line and line != last:
                self.say(line)
                last = line


# -- listing ---------------------------------------------------------------------------------


def list_segments(path_or_uri: str) -> list[tuple[str, int]]:
    """(uri, size) of every segment under a directory/URI (or the one file given), largest first."""
    fs, root = filesystem(path_or_uri)
    if not fs.exists(root):
        raise FileNotFoundError(f"{path_or_uri}: no such file or directory")
    if fs.isfile(root):
        found = {root: fs.info(root)}
    else:
        found = fs.find(root, detail=True)
    local = not scheme(path_or_uri)
    out = []
    for path, info in found.items():
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if info.get("type", "file") == "directory" or parse_name(name) is None:
            continue
        out.append((path if local else fs.unstrip_protocol(path), int(info.get("size") or 0)))
    out.sort(key=lambda x: (-x[1], x[0]))
    return out


# -- Spark session ---------------------------------------------------------------------------


def spark_session(master: str | None, opts: ReportOptions, progress: bool, jvm_log: str | None = None) -> Any:
    """A session sized for a small machine: UI off, loopback for local masters.

    `jvm_log`: a local file for the JVM's console output (and its Python workers'),
    which would otherwise interleave Spark's start-up WARN lines with the progress lines."""
    from pyspark.sql import SparkSession

    master = master or "local[*]"
    b = (SparkSession.builder.appName("rgd-report").master(master)
         .config("spark.driver.memory", opts.driver_memory)
         .config("spark.driver.maxResultSize", "4g")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "true" if progress and sys.stderr.isatty() else "false")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.sql.shuffle.partitions", "16")
         .config("spark.sql.adaptive.enabled", "true")
         .config("spark.python.worker.reuse", "true")
         .config("spark.sql.execution.pyspark.udf.faulthandler.enabled", "true")
         .config("spark.local.dir", os.environ.get("RGD_SPARK_LOCAL_DIR", tempfile.gettempdir())))
    if master.startswith("local"):
        # One JVM on this machine: loopback only; the throughput GC (no concurrent threads competing
        # with the Python workers for 2 cores); only the quick JIT tier (C2's compiler threads cost
        # the bench run about 8 CPU-seconds of its 20 in the JVM, more than the code they make saves
        # in a job this short); no shuffle compression (the shuffle never leaves the machine, and LZ4
        # would cost more CPU than the page cache saves).
        b = (b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.extraJavaOptions", "-XX:+UseParallelGC -XX:TieredStopAtLevel=1")
             .config("spark.shuffle.compress", "false").config("spark.shuffle.spill.compress", "false"))
    extra = list(opts.spark_conf)
    extra += [tuple(kv.split("=", 1)) for kv in os.environ.get("RGD_SPARK_CONF", "").split(";") if "=" in kv]
    python = worker_python(dict(extra), os.environ)
    b = b.config("spark.pyspark.python", python)
    for k, v in extra:
        b = b.config(k, v)
    # PySpark takes the workers' interpreter from this variable when the context starts (the
    # conf key alone only works through spark-submit); set it for that moment only, so nothing
    # this process starts later inherits it.
    previous = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = python
    try:
        with _stderr_to(jvm_log):
            spark = b.getOrCreate()
    finally:
        if previous is None:
            del os.environ["PYSPARK_PYTHON"]
        else:
            os.environ["PYSPARK_PYTHON"] = previous
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def _stderr_to(path: str | None) -> Iterator[None]:
    """Point file descriptor 2 at `path` while the JVM starts: it inherits the descriptor for
    its whole life (so do the Python workers it starts). If the start fails, the log's tail
    is repeated on the real stderr, since the reason (no Java, ...) is in it."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
    except BaseException:
        with open(path, errors="replace") as fh:
            tail = fh.readlines()[-20:]
        print(f"Spark did not start; the end of {path}:\n{''.join(tail)}", file=sys.stderr, flush=True)
        raise
    finally:
        os.close(fd)
        os.close(saved)


def worker_python(conf: dict[str, str], environ: Mapping[str, str]) -> str:
    """The interpreter Spark starts its Python workers with.

    Spark's default is `python3` from the PATH, which is rarely the interpreter rgd runs
    in (the venv need not be activated): the workers would miss pandas, pyarrow and rgd.
    So the default is the driver's own interpreter. A choice the user made wins, in
    Spark's order: `spark.pyspark.python` (RGD_SPARK_CONF), then PYSPARK_PYTHON. With a
    remote `--master` the chosen path must exist, with rgd[spark] installed, on every
    worker (the report image has it at the same path as the driver).
    """
    return conf.get("spark.pyspark.python") or environ.get("PYSPARK_PYTHON") or sys.executable


# -- task functions (run on the executors) ---------------------------------------------------


def _put_pickle(uri: str, obj: Any) -> None:
    """Write a pickle atomically (tmp + move) at a local path or fsspec URI."""
    fs, path = filesystem(uri)
    tmp = f"{path}.tmp-{os.getpid()}"
    with fs.open(tmp, "wb") as fh:
        fh.write(pickle.dumps(obj, protocol=5))
    fs.mv(tmp, path)


def _load_pickles(uri_dir: str, suffix: str) -> list[Any]:
    fs, path = filesystem(uri_dir)
    out = []
    for p in sorted(fs.find(path)):
        if p.endswith(suffix):
            with fs.open(p, "rb") as fh:
                out.append(pickle.loads(fh.read()))
    return out


def plan_decode_tasks(segments: list[tuple[str, int]], slots: int, per_slot: int = 4) -> list[list[tuple[int, str]]]:
    """Segments packed into about `per_slot` tasks per core, balanced by bytes.

    One task per segment costs a Python worker round trip and a scheduling
    round per 30 MB segment (about as much as decoding it on 2 cores); a few
    tasks per core keep that fixed cost small while the last tasks still even
    out the load. Largest first into the lightest task (greedy LPT).
    """
    n = max(1, min(len(segments), max(1, slots) * per_slot))
    tasks: list[list[tuple[int, str]]] = [[] for _ in range(n)]
    load = [0] * n
    for i, (uri, size) in sorted(enumerate(segments), key=lambda x: (-x[1][1], x[0])):
        k = min(range(n), key=load.__getitem__)
        tasks[k].append((i, uri))
        load[k] += max(size, 1)
    return [t for t in tasks if t]


def _decode_partitions(grid: Grid, meta_dir: str, tasks: list[list[tuple[int, str]]]):
    """mapInArrow function: task ids -> series rows of their segments; each SegmentMeta goes to `meta_dir`.

    The metadata travels beside the data, not through it: the reducers need
    the whole cluster's membership before they start, Spark starts them only
    after every map task finished, and so each reducing worker reads the
    small `.ctx` files once (see `_context`), with no second pass over the
    decoded data and nothing cached.
    """

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from rgd.report.task import process_segment, segment_bytes

        names = ["group_key", "chunk", "daemon_key", "order", "b0", "n", "dims", "blob"]
        todo = [seg for batch in batches for t in batch.column("id").to_pylist() for seg in tasks[t]]
        for seg_id, uri in todo:
            try:
                with segment_bytes(uri) as data:
                    rows, meta = process_segment(data, uri, grid)  # never raises
            except Exception as exc:  # unreadable: reported, never fatal
                meta = SegmentMeta(uri=uri, size=0, error=f"cannot read: {type(exc).__name__}: {exc}")
                rows: list[SeriesRow] = []
            ctx_part = SegmentMeta(uri=meta.uri, size=meta.size, error=meta.error, names=meta.names,
                                   headers=meta.headers)
            _put_pickle(f"{meta_dir}/{seg_id:07d}.ctx.pkl", ctx_part)
            _put_pickle(f"{meta_dir}/{seg_id:07d}.meta.pkl", meta)
            for i in range(0, len(rows), 64):
                part = rows[i:i + 64]
                yield pa.RecordBatch.from_arrays([
                    pa.array([r.group_key for r in part], pa.int64()),
                    pa.array([r.chunk for r in part], pa.int64()),
                    pa.array([r.daemon_key for r in part], pa.int64()),
                    pa.array([r.order for r in part], pa.int64()),
                    pa.array([r.b0 for r in part], pa.int64()), pa.array([r.n for r in part], pa.int64()),
                    pa.array([r.dims for r in part], pa.int64()),
                    pa.array([r.blob for r in part], pa.binary())], names=names)

    return run


_CONTEXTS: dict[str, Context] = {}  # per worker process: meta_dir -> Context


def build_context(metas: list[SegmentMeta], grid: Grid, opts: "ReportOptions") -> tuple[Context, Any, pd.DataFrame]:
    """The reducers' Context (and the membership and headers behind it) from the segments' metadata."""
    names: dict[int, str] = {}
    for m in metas:
        names.update(m.names)
    headers = headers_frame([m for m in metas if m.error is None])
    mem = membership(headers, grid.grid_ms, opts.member_ttl_ticks)
    span = max(mem.t_last - mem.t_first + 1, 0)
    ctx = Context(grid, opts.group_ttl_ticks, mem.t_first, mem.t_last,
                  _bin_ticks(span, opts.share_bins, grid.chunk_ticks), names, mem.barriers, mem.members_n,
                  opts.tolerance, opts.shift_threshold, opts.hold_ticks)
    return ctx, mem, headers


def _context(meta_dir: str, grid: Grid, opts: "ReportOptions") -> Context:
    ctx = _CONTEXTS.get(meta_dir)
    if ctx is None:
        metas = sorted(_load_pickles(meta_dir, ".ctx.pkl"), key=lambda m: m.uri)
        ctx = _CONTEXTS[meta_dir] = build_context(metas, grid, opts)[0]
    return ctx


def _put_parquet(uri: str, table: Any) -> None:
    import pyarrow.parquet as pq

    fs, path = filesystem(uri)
    tmp = f"{path}.tmp-{os.getpid()}"
    with fs.open(tmp, "wb") as fh:
        pq.write_table(table, fh, compression="zstd")
    fs.mv(tmp, path)


def _analyze_groups(meta_dir: str, ticks_dir: str, shares_dir: str, grid: Grid, opts: "ReportOptions"):
    """applyInArrow function: one (group, chunk) of series rows -> ticks and shares files + one aux row.

    The tick table grows with the length of the logs, so each task writes its
    part as a Parquet file (named after its group and chunk: a retried task
    overwrites its own file) instead of sending it back through the JVM.
    """

    def run(table: Any) -> Any:
        import pyarrow as pa

        from rgd.report.analyze import analyze_chunk

        empty = pa.table({"group_key": pa.array([], pa.int64()), "blob": pa.array([], pa.binary())})
        if not table.num_rows:
            return empty
        ctx = _context(meta_dir, grid, opts)
        g, c = table.column("group_key")[0].as_py(), table.column("chunk")[0].as_py()
        if grid.chunk_start(c) > ctx.t_last or grid.chunk_start(c + 1) <= ctx.t_first:
            return empty  # only lookback rows for a chunk past the data: no tick of it has figures
        cols = {name: table.column(name).to_pylist() for name in
                ("group_key", "chunk", "daemon_key", "order", "b0", "n", "dims", "blob")}
        rows = [SeriesRow(*vals) for vals in zip(cols["group_key"], cols["chunk"], cols["daemon_key"],
                                                 cols["order"], cols["b0"], cols["n"], cols["dims"], cols["blob"])]
        res = analyze_chunk(g, c, rows, ctx)
        name = f"part-{g & 0xFFFFFFFFFFFFFFFF:016x}-{c & 0xFFFFFFFF:08x}.parquet"
        if res.ticks is not None and res.ticks.num_rows:
            _put_parquet(f"{ticks_dir}/{name}", res.ticks)
        if res.shares is not None and len(res.shares):
            _put_parquet(f"{shares_dir}/{name}", pa.Table.from_pandas(res.shares, preserve_index=False))
        aux = {"small": res.small, "daemons": res.daemons}
        return pa.table({"group_key": pa.array([g], pa.int64()), "blob": pa.array([pickle.dumps(aux, protocol=5)])})

    return run


# -- helpers ---------------------------------------------------------------------------------


def _bin_ticks(span: int, bins: int, chunk: int) -> int:
    """Smallest divisor of `chunk` that is >= span / bins (bins never straddle chunks)."""
    want = max(1, math.ceil(span / max(bins, 1)))
    for d in range(want, chunk + 1):
        if chunk % d == 0:
            return d
    return chunk


def _sample_grid(segments: list[tuple[str, int]], limit: int = 32) -> tuple[int | None, int | None]:
    """(most common tick_ms, earliest tick bucket) from the head of each daemon's first segments.

    Bucketing and chunking happen inside the decode tasks, so both must be
    known before decoding; the earliest bucket only places the chunk origin
    (data before it is handled, just in an extra chunk).
    """
    from rgd.report.decode import R_NGROUPS, R_OK, R_PUB_MS, R_TICK_MS, decode_segment

    firsts: dict[str, tuple[int, str]] = {}
    for uri, _ in segments:
        p = parse_name(uri.rsplit("/", 1)[-1])
        if p is not None and (p.daemon not in firsts or p.first < firsts[p.daemon][0]):
            firsts[p.daemon] = (p.first, uri)
    seen: Counter[int] = Counter()
    earliest: int | None = None
    for _, uri in sorted(firsts.values())[:limit]:
        try:
            with _open(uri) as fh:
                head = fh.read(256 << 10)
        except Exception:
            continue
        r = decode_segment(head, uri).reports
        if not r.size:
            continue
        r = r[r[:, R_OK] == 1]
        # The tick is what reports WITH counts say: early reports and restatements carry a
        # fraction of a tick (their window) and, between ticks, can outnumber tick reports.
        counted = r[r[:, R_NGROUPS] > 0]
        seen.update(int(t) for t in (counted if counted.shape[0] else r)[:, R_TICK_MS].tolist() if t > 0)
        if r.shape[0]:
            earliest = int(r[:, R_PUB_MS].min()) if earliest is None else min(earliest, int(r[:, R_PUB_MS].min()))
    return (seen.most_common(1)[0][0] if seen else None), earliest


def _open(uri: str) -> Any:
    if not scheme(uri):
        return open(uri[len("file://"):] if uri.startswith("file://") else uri, "rb")
    fs, path = filesystem(uri)
    return fs.open(path, "rb")


def _write_parquet(df: pd.DataFrame, out_dir: str, name: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, root = filesystem(out_dir)
    fs.makedirs(root, exist_ok=True)
    with fs.open(f"{root.rstrip('/')}/{name}.parquet", "wb") as fh:
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), fh)


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        return None if math.isnan(f) else (f if math.isfinite(f) else ("inf" if f > 0 else "-inf"))
    if isinstance(x, np.bool_):
        return bool(x)
    return x


# -- the report --------------------------------------------------------------------------------


def run_report(path_or_uri: str, out_dir: str, master: str | None = None, progress: bool = True,
               *, spark: Any = None, options: ReportOptions | None = None) -> dict:
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
    final_log = _jvm_log_path(out_dir) if own_session else None
    starting = ThreadPoolExecutor(1, thread_name_prefix="rgd-spark-start") if own_session else None
    pending = starting.submit(spark_session, master, opts, progress, jvm_log) if starting else None
    try:
        with prog.stage("list", path_or_uri):
            segments = list_segments(path_or_uri)
            total_bytes = sum(s for _, s in segments)
            prog.say(f"{len(segments)} segments, {total_bytes / 1e6:.1f} MB")
            sampled_tick, earliest_ms = _sample_grid(segments)
        grid_ms = opts.tick_ms or sampled_tick or 1000
        lookback = max(opts.group_ttl_ticks, 1) + 1
        origin = earliest_ms // grid_ms if earliest_ms is not None else 0
        grid = Grid(grid_ms, opts.chunk_ticks, lookback, origin)
        with prog.stage("spark", f"{master or 'local[*]'} (Spark's own log: {final_log})" if own_session else ""):
            if pending is not None:
                spark = pending.result()
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


def ship_code(sc: Any, directory: str, *uris: str) -> dict:
    """Make rgd importable on executors that do not have it, then check they have the rest.

    Local masters skip this: their Python workers run on this machine, where
    rgd is installed.
    """
    from rgd.report.ship import check_executors, package_zip

    sc.addPyFile(str(package_zip(directory)))
    return check_executors(sc, *uris)


def _jvm_log_path(out_dir: str) -> str:
    """Where spark.log ends up: beside the report when out_dir is local; in the temp
    directory otherwise."""
    if "://" in out_dir and not out_dir.startswith("file://"):
        return os.path.join(tempfile.gettempdir(), f"rgd-report-spark-{os.getpid()}.log")
    return os.path.join(os.path.abspath(out_dir.removeprefix("file://")), "spark.log")


def _run(spark: Any, sc: Any, segments: list[tuple[str, int]], total_bytes: int, grid: Grid,
         opts: ReportOptions, out_dir: str, prog: Progress, t_start: float, source: str,
         executors: dict | None = None) -> dict:
    from rgd.report.analyze import stitch_convergence

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
    uri_of = (lambda p: fs.unstrip_protocol(p)) if "://" in out_dir else (lambda p: p)
    tasks = plan_decode_tasks(segments, sc.defaultParallelism)
    series = spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(
        _decode_partitions(grid, meta_dir, tasks), DECODED_SCHEMA)
    spark.conf.set("spark.sql.shuffle.partitions", str(max(2, min(400, 4 * sc.defaultParallelism))))
    out = series.groupBy("group_key", "chunk").applyInArrow(
        _analyze_groups(meta_dir, uri_of(ticks_dir), uri_of(shares_dir), grid, opts), AUX_SCHEMA)
    with prog.stage("decode+analyze",
                    f"{len(segments)} segments in {len(tasks)} decode tasks, then one task per (group, chunk)",
                    sc=sc):
        aux = [pickle.loads(r["blob"]) | {"group_key": r["group_key"]} for r in out.collect()]
    with prog.stage("merge", "damage, membership, receipts"):
        metas: list[SegmentMeta] = sorted(_load_pickles(meta_dir, ".meta.pkl"), key=lambda m: m.uri)
        fs.rm(work, recursive=True)
        ctx, mem, headers = build_context(metas, grid, opts)
        names = ctx.names
        segs = segments_table(metas, names)
        damage = damage_summary(segs, metas)
        good = [m for m in metas if m.error is None]
        grid_seen = choose_grid_ms(headers, grid.grid_ms)
        rec = merge_receipts(good, names)
        totals = totals_frame(good, names)
        _write_parquet(segs, out_dir, "segments")
        _write_parquet(rec.loss, out_dir, "loss")
        _write_parquet(rec.pairs.drop(columns=[c for c in ("delay_sum", "stale_sum") if c in rec.pairs]),
                       out_dir, "delay")
        _write_parquet(rec.ticks.assign(time_s=rec.ticks["bucket"].astype(float) * grid.grid_ms / 1000.0),
                       out_dir, "delay_ticks")
        _write_parquet(totals, out_dir, "totals")
        ev = mem.events.copy()
        ev["daemon"] = [names.get(int(k), f"#{k}") for k in ev["daemon"]]
        _write_parquet(ev, out_dir, "membership")
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
        daemons_pd["share_of_fair"] = daemons_pd["admitted_sum"] / daemons_pd["fair_sum"].where(daemons_pd["fair_sum"] > 0)
        _write_parquet(daemons_pd, out_dir, "daemons")
        per_group, chart_ticks, worst, conv_raw = _fold_small(
            [(names.get(a["group_key"], f"#{a['group_key']}"), a["small"]) for a in aux], opts)
        conv_pd = stitch_convergence(conv_raw, grid.grid_ms)
        _write_parquet(conv_pd, out_dir, "convergence")
        charted = _pick_charted(per_group, opts.max_groups_charted)
        chart_shares = shares[shares["group"].isin(charted)] if len(shares) else shares
        totals_by_group = totals.drop(columns=["daemon"]).groupby("group").sum() if len(totals) else pd.DataFrame()
        group_rows = int(sum(m.group_rows for m in good))
        summary = _summary(source, segments, total_bytes, grid, grid_seen, ctx.bin_ticks, opts, metas, good, damage,
                           headers, mem, rec, per_group, conv_pd, totals_by_group, daemons_pd, names, group_rows)
    if executors is not None:
        summary["executors"] = executors  # what the probe found on one executor (Python, libraries, rgd's zip)
    summary["timings_s"] = dict(prog.timings)
    with prog.stage("html"):
        from rgd.report.html import render_report

        html = render_report(summary, chart_ticks, chart_shares, worst, conv_pd, rec.ticks, daemons_pd, charted)
        with fs.open(f"{root}/report.html", "w", encoding="utf-8") as fh:
            fh.write(html)
    summary["timings_s"] = dict(prog.timings)
    summary["elapsed_s"] = round(time.monotonic() - t_start, 3)
    summary["group_rows_per_s"] = round(group_rows / summary["elapsed_s"], 1) if summary["elapsed_s"] else None
    with fs.open(f"{root}/summary.json", "w", encoding="utf-8") as fh:
        json.dump(_jsonable(summary), fh, indent=2, sort_keys=True)
    prog.say(f"done: {group_rows} group rows in {summary['elapsed_s']:.1f}s "
             f"({summary['group_rows_per_s']} rows/s); {out_dir}/report.html")
    return _jsonable(summary)


def _fold_small(small: list[tuple[str, dict]], opts: ReportOptions
                ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per (group, dim): the summary row; plus chart bins, worst ticks and raw convergence events."""
    acc: dict[tuple[str, str], dict] = {}
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
        def mean(k: str) -> float:
            n = t.get(f"{k}_n", t["ticks"])
            return t[f"{k}_sum"] / n if n else float("nan")

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
        worst = (worst.sort_values(["group", "dim", "score"], ascending=[True, True, False])
                 .groupby(["group", "dim"]).head(10).reset_index(drop=True))
    conv = pd.concat(cv, ignore_index=True) if cv else pd.DataFrame(
        columns=["group", "dim", "bucket", "kind", "converged", "ticks", "end_bucket", "open"])
    return per_group, chart, worst, conv


def _pick_charted(per_group: pd.DataFrame, limit: int) -> list[str]:
    """Groups worth a chart: the least fair or most overshooting first."""
    if per_group.empty:
        return []
    g = per_group.groupby("group").agg(fe=("fair_error_mean", "max"), ov=("overshoot_ratio_max", "max"))
    g = g.fillna(0).sort_values(["fe", "ov"], ascending=False)
    return sorted(g.index[:limit].tolist())


def _summary(source: str, segments: list, total_bytes: int, grid: Grid, grid_seen: int, bin_ticks: int,
             opts: ReportOptions, metas: list[SegmentMeta], good: list[SegmentMeta], damage: dict,
             headers: pd.DataFrame, mem: Any, rec: Any, per_group: pd.DataFrame, conv: pd.DataFrame,
             totals_by_group: pd.DataFrame, daemons_pd: pd.DataFrame, names: dict[int, str],
             group_rows: int) -> dict:
    groups: dict[str, Any] = {}
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
    for gname, trow in totals_by_group.iterrows() if len(totals_by_group) else []:
        g = groups.setdefault(gname, {"dims": {}})
        g["totals"] = {k: int(v) for k, v in trow.items()}
    loss = rec.loss
    lost = int(loss["lost"].sum()) if len(loss) else 0
    expected = int(loss["expected"].sum()) if len(loss) else 0
    # daemons with at least one lost report (all pairs are in loss.parquet)
    by_pub = {k: v for k, v in loss.groupby("publisher")["lost"].sum().items() if v} if len(loss) else {}
    by_recv = {k: v for k, v in loss.groupby("receiver")["lost"].sum().items() if v} if len(loss) else {}
    n_receipts = int(sum(m.receipts for m in good))
    delay_sum = float(rec.pairs["delay_sum"].sum()) if len(rec.pairs) else 0.0
    stale_n = float(rec.pairs["stale_n"].sum()) if len(rec.pairs) else 0.0
    daemons = sorted({names.get(int(k), f"#{k}") for k in headers["daemon"].unique()}) if len(headers) else []
    left = mem.events[mem.events["event"] == "leave"] if len(mem.events) else mem.events
    return {
        "source": source,
        "group_rows": group_rows,
        "input": {"segments": len(segments), "bytes": int(total_bytes),
                  "frames": int(sum(m.frames for m in metas)), "published_reports": int(sum(m.published for m in good)),
                  "group_rows": group_rows, "receipts": n_receipts},
        "grid_ms": grid.grid_ms, "tick_ms_most_common": grid_seen, "share_bin_ticks": bin_ticks,
        "options": asdict(opts),
        "span": {"first_bucket": mem.t_first, "last_bucket": mem.t_last,
                 "ticks": max(mem.t_last - mem.t_first + 1, 0),
                 "first_s": mem.t_first * grid.grid_ms / 1000.0, "last_s": mem.t_last * grid.grid_ms / 1000.0},
        "daemons": daemons,
        "membership_events": {e: int(n) for e, n in mem.events["event"].value_counts().items()} if len(mem.events) else {},
        "daemons_left": sorted({names.get(int(k), f"#{k}") for k in left["daemon"]}) if len(left) else [],
        "damage": damage,
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
