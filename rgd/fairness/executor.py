"""The report's Spark tasks: what runs in the executors' Python workers.

Spark pickles the task functions built here (closures over the grid, the
options and the work directories) and the workers import this module to run
them, from rgd's shipped zip on a cluster (rgd.fairness.ship). So nothing
here imports pyspark, and the driver-only modules (the session, the summary,
the page) stay out of its imports: an executor needs numpy, pandas, pyarrow
and rgd's decoder, nothing else.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from rgd.fairness.analyze import Context
from rgd.fairness.merge import Membership, SegmentMeta, headers_frame, membership
from rgd.fairness.options import ReportOptions
from rgd.fairness.series import Grid, SeriesRow
from rgd.fairness.writers import load_pickles, put_pickle, put_table

__all__ = [
    "AUX_SCHEMA", "DECODED_SCHEMA", "analyze_groups", "bin_ticks", "build_context", "decode_partitions",
    "plan_decode_tasks",
]

DECODED_SCHEMA = "group_key long, chunk long, daemon_key long, `order` long, b0 long, n long, dims long, blob binary"
AUX_SCHEMA = "group_key long, blob binary"

_SERIES_COLUMNS = ("group_key", "chunk", "daemon_key", "order", "b0", "n", "dims", "blob")


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


def decode_partitions(grid: Grid, meta_dir: str, tasks: list[list[tuple[int, str]]]
                      ) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """mapInArrow function: task ids -> series rows of their segments; each SegmentMeta goes to `meta_dir`.

    The metadata travels beside the data, not through it: the reducers need
    the whole cluster's membership before they start, Spark starts them only
    after every map task finished, and so each reducing worker reads the
    small `.ctx` files once (see `_context`), with no second pass over the
    decoded data and nothing cached.
    """

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from rgd.fairness.task import process_segment, segment_bytes

        names = list(_SERIES_COLUMNS)
        todo = [seg for batch in batches for t in batch.column("id").to_pylist() for seg in tasks[t]]
        for seg_id, uri in todo:
            rows: list[SeriesRow]
            try:
                with segment_bytes(uri) as data:
                    rows, meta = process_segment(data, uri, grid)  # never raises
            except Exception as exc:  # unreadable: reported, never fatal
                meta = SegmentMeta(uri=uri, size=0, error=f"cannot read: {type(exc).__name__}: {exc}")
                rows = []
            ctx_part = SegmentMeta(uri=meta.uri, size=meta.size, error=meta.error, names=meta.names,
                                   headers=meta.headers,
                                   accounting={"pub_ms": meta.accounting["pub_ms"]} if meta.accounting else {})
            put_pickle(f"{meta_dir}/{seg_id:07d}.ctx.pkl", ctx_part)
            put_pickle(f"{meta_dir}/{seg_id:07d}.meta.pkl", meta)
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


def build_context(metas: list[SegmentMeta], grid: Grid, opts: ReportOptions
                  ) -> tuple[Context, Membership, pd.DataFrame]:
    """The reducers' Context (and the membership and headers behind it) from the segments' metadata."""
    names: dict[int, str] = {}
    for m in metas:
        names.update(m.names)
    good = [m for m in metas if m.error is None]
    headers = headers_frame(good)
    # The span covers the tick accounting too: a daemon's last accounting (its stop) may come
    # after its last report, and those counts belong in the per-tick series.
    acct_ms = [m.accounting["pub_ms"] for m in good if m.accounting and len(m.accounting.get("pub_ms", ()))]
    extent = (int(min(a.min() for a in acct_ms)), int(max(a.max() for a in acct_ms))) if acct_ms else None
    mem = membership(headers, grid.grid_ms, opts.member_ttl_ticks, extent)
    span = max(mem.t_last - mem.t_first + 1, 0)
    ctx = Context(grid, opts.group_ttl_ticks, mem.t_first, mem.t_last,
                  bin_ticks(span, opts.share_bins, grid.chunk_ticks), names, mem.barriers, mem.members_n,
                  opts.tolerance, opts.shift_threshold, opts.hold_ticks)
    return ctx, mem, headers


def _context(meta_dir: str, grid: Grid, opts: ReportOptions) -> Context:
    """The Context for `meta_dir`, read once per worker process (workers are reused)."""
    ctx = _CONTEXTS.get(meta_dir)
    if ctx is None:
        metas = sorted(load_pickles(meta_dir, ".ctx.pkl"), key=lambda m: m.uri)
        ctx = _CONTEXTS[meta_dir] = build_context(metas, grid, opts)[0]
    return ctx


def analyze_groups(meta_dir: str, ticks_dir: str, shares_dir: str, grid: Grid, opts: ReportOptions
                   ) -> Callable[[Any], Any]:
    """applyInArrow function: one (group, chunk) of series rows -> ticks and shares files + one aux row.

    The tick table grows with the length of the logs, so each task writes its
    part as a Parquet file (named after its group and chunk: a retried task
    overwrites its own file) instead of sending it back through the JVM.
    """

    def run(table: Any) -> Any:
        import pyarrow as pa

        from rgd.fairness.analyze import analyze_chunk

        empty = pa.table({"group_key": pa.array([], pa.int64()), "blob": pa.array([], pa.binary())})
        if not table.num_rows:
            return empty
        ctx = _context(meta_dir, grid, opts)
        g, c = table.column("group_key")[0].as_py(), table.column("chunk")[0].as_py()
        if grid.chunk_start(c) > ctx.t_last or grid.chunk_start(c + 1) <= ctx.t_first:
            return empty  # only lookback rows for a chunk past the data: no tick of it has figures
        cols = {name: table.column(name).to_pylist() for name in _SERIES_COLUMNS}
        rows = [SeriesRow(*vals) for vals in zip(cols["group_key"], cols["chunk"], cols["daemon_key"],
                                                 cols["order"], cols["b0"], cols["n"], cols["dims"], cols["blob"])]
        res = analyze_chunk(g, c, rows, ctx)
        name = f"part-{g & 0xFFFFFFFFFFFFFFFF:016x}-{c & 0xFFFFFFFF:08x}.parquet"
        if res.ticks is not None and res.ticks.num_rows:
            put_table(f"{ticks_dir}/{name}", res.ticks)
        if res.shares is not None and len(res.shares):
            put_table(f"{shares_dir}/{name}", pa.Table.from_pandas(res.shares, preserve_index=False))
        aux = {"small": res.small, "daemons": res.daemons}
        return pa.table({"group_key": pa.array([g], pa.int64()), "blob": pa.array([pickle.dumps(aux, protocol=5)])})

    return run


def bin_ticks(span: int, bins: int, chunk: int) -> int:
    """Smallest divisor of `chunk` that is >= span / bins (bins never straddle chunks)."""
    want = max(1, math.ceil(span / max(bins, 1)))
    for d in range(want, chunk + 1):
        if chunk % d == 0:
            return d
    return chunk
