"""The report's settings, in one frozen value.

Separate from the job so the executors' task code can take it without
importing anything that starts Spark, and so summary.json can list it
(`dataclasses.asdict`) exactly as the run used it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReportOptions:
    tick_ms: int | None = None  # grid; None: the most common tick in the reports
    chunk_ticks: int = 3600  # ticks per reducer task (memory bound: daemons x chunk)
    group_ttl_ticks: int = 9  # like the daemon's (report_every + ttl_ticks)
    member_ttl_ticks: int = 3  # like the daemon's ttl_ticks
    share_bins: int = 100  # points per group in the stacked-share table and charts
    tolerance: float = 0.05  # convergence: fair error and overshoot ratio at most this ...
    hold_ticks: int = 3  # ... for this many ticks
    shift_threshold: float = 0.10  # a demand change: the fair split moved by this share of the quota
    max_groups_charted: int = 24
    driver_memory: str = "6g"
    spark_conf: tuple[tuple[str, str], ...] = ()  # extra Spark settings, applied last


__all__ = ["ReportOptions"]
