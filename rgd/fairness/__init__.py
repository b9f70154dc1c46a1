"""The Spark fairness report (DESIGN.md section 3, `rgd report`): replay usage logs, measure fairness.

`run_report(path_or_uri, out_dir, master=None, progress=True) -> dict` decodes
every segment under `path_or_uri` in parallel, rebuilds each group's usage,
demand and limits per daemon and tick, and writes Parquet tables,
summary.json and a self-contained report.html to `out_dir`; it returns the
summary. Modules: decode (segment bytes -> columns), task (one segment),
series (dense per-group series), analyze (one group's chunk of ticks),
measures (the math), receipts (loss, delay, staleness), merge (driver side),
html (the page), ship (what executors need; rgd's code shipped to them),
job (the stages in order), progress (console lines), listing (segments and
the grid), spark_session (the session), executor (the Spark tasks),
writers (atomic output files), summary (summary.json), options
(ReportOptions).

PySpark is imported only when a report runs, so the daemon never needs it.
"""

from __future__ import annotations

from typing import Any


def run_report(path_or_uri: str, out_dir: str, master: str | None = None, progress: bool = True,
               **kwargs: Any) -> dict[str, Any]:
    """See rgd.fairness.job.run_report (keyword extras: spark=, options=ReportOptions(...))."""
    from rgd.fairness.job import run_report as _run

    return _run(path_or_uri, out_dir, master=master, progress=progress, **kwargs)


__all__ = ["run_report"]
