"""The Spark session the report runs in, and where the JVM's console goes.

Spark's defaults suit a cluster, not the 2-core machines the report mostly
runs on, and its start-up WARN lines would interleave with the progress
lines; everything about configuring and starting the session lives here so
the job itself only asks for one.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rgd.fairness.options import ReportOptions

__all__ = ["jvm_log_path", "spark_session", "stderr_to", "worker_python"]


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
    extra: list[tuple[str, str]] = list(opts.spark_conf)
    for kv in os.environ.get("RGD_SPARK_CONF", "").split(";"):
        if "=" in kv:
            key, value = kv.split("=", 1)
            extra.append((key, value))
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
        with stderr_to(jvm_log):
            spark = b.getOrCreate()
    finally:
        if previous is None:
            del os.environ["PYSPARK_PYTHON"]
        else:
            os.environ["PYSPARK_PYTHON"] = previous
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def stderr_to(path: str | None) -> Iterator[None]:
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


def jvm_log_path(out_dir: str) -> str:
    """Where spark.log ends up: beside the report when out_dir is local; in the temp
    directory otherwise."""
    if "://" in out_dir and not out_dir.startswith("file://"):
        return os.path.join(tempfile.gettempdir(), f"rgd-report-spark-{os.getpid()}.log")
    return os.path.join(os.path.abspath(out_dir.removeprefix("file://")), "spark.log")
