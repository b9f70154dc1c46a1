"""Every file the report writes goes through `atomic_open`: a temp name, then a rename.

A reader (a dashboard polling out_dir, the driver collecting the executors'
metadata, a retried Spark task rewriting its own part file) must never see
half a file. On a local disk the rename is atomic; on an object store
fsspec's move is a copy and a delete, so a reader sees the old file, no
file, or the whole new one, never a torn one. The temp name carries the pid:
two tasks writing the same name (a speculative or retried task) never share
a temp file.

Runs on executors too (the decode and analysis tasks write their metadata
and Parquet parts here): imports are stdlib and rgd.config at module level,
pyarrow inside the functions.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from rgd.config.storage import filesystem

__all__ = ["atomic_open", "load_pickles", "put_pickle", "put_table", "write_frame", "write_text"]


@contextmanager
def atomic_open(fs: Any, path: str) -> Iterator[IO[bytes]]:
    """A binary handle on a temp file beside `path` in `fs`: renamed to `path` when the
    block ends without an error, removed when it does not."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with fs.open(tmp, "wb") as fh:
            yield fh
        fs.mv(tmp, path)
    except BaseException:
        try:
            if fs.exists(tmp):
                fs.rm(tmp)
        except Exception:  # cleaning up is best effort; the write's own error is the one to see
            pass
        raise


def put_pickle(uri: str, obj: Any) -> None:
    """A pickle at a local path or fsspec URI."""
    fs, path = filesystem(uri)
    with atomic_open(fs, path) as fh:
        fh.write(pickle.dumps(obj, protocol=5))


def load_pickles(uri_dir: str, suffix: str) -> list[Any]:
    """Every pickle under `uri_dir` whose name ends with `suffix`, in name order."""
    fs, path = filesystem(uri_dir)
    out = []
    for p in sorted(fs.find(path)):
        if p.endswith(suffix):
            with fs.open(p, "rb") as fh:
                out.append(pickle.loads(fh.read()))
    return out


def put_table(uri: str, table: Any, compression: str | None = "zstd") -> None:
    """An Arrow table as one Parquet file at a local path or fsspec URI (`compression`
    None: pyarrow's default)."""
    import pyarrow.parquet as pq

    fs, path = filesystem(uri)
    with atomic_open(fs, path) as fh:
        if compression is None:
            pq.write_table(table, fh)
        else:
            pq.write_table(table, fh, compression=compression)


def write_frame(df: Any, out_dir: str, name: str) -> None:
    """A pandas frame as `out_dir/name.parquet` (pyarrow's default compression), out_dir created if needed."""
    import pyarrow as pa

    fs, root = filesystem(out_dir)
    fs.makedirs(root, exist_ok=True)
    put_table(f"{out_dir.rstrip('/')}/{name}.parquet", pa.Table.from_pandas(df, preserve_index=False),
              compression=None)


def write_text(fs: Any, path: str, text: str) -> None:
    """A UTF-8 text file (report.html, summary.json) in `fs`: the same bytes a text-mode
    handle writes on POSIX ("\\n" stays "\\n")."""
    with atomic_open(fs, path) as fh:
        fh.write(text.encode("utf-8"))
