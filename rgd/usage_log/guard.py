"""Keeps a failing usage log (full disk, I/O error) away from the limiter and the tick.

The log is a record of what happened, not part of deciding what happens: a
write that fails must not abort the tick that publishes reports, folds peers'
reports and recomputes limits. The guard runs every log call, turns an
`OSError` into a state ("failing", with the reason) instead of an exception,
and while failing drops appends (counted) and retries the log's housekeeping
once per tick, so writing resumes by itself when space returns. One log line
per state change, never a traceback per tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rgd.usage_log.log import UsageLog

log = logging.getLogger("rgd.usage_log")


@dataclass
class GuardState:
    failing: bool = False
    reason: str = ""  # the last error while failing, "" when healthy
    failures: int = 0  # transitions healthy -> failing
    dropped_records: int = 0  # appends skipped while failing


class LogGuard:
    """Every call the daemon makes on its `UsageLog`, with faults contained."""

    def __init__(self, usage_log: UsageLog, on_change: Callable[[GuardState], None] | None = None) -> None:
        self.usage_log = usage_log
        self.state = GuardState()
        self._on_change = on_change

    def _fail(self, what: str, exc: Exception) -> None:
        reason = f"{what}: {exc}"
        if not self.state.failing:
            self.state.failing = True
            self.state.failures += 1
            self.state.reason = reason
            log.error("usage log in %s failing (%s); the limiter keeps running, log records are dropped "
                      "until writing works again", self.usage_log.directory, reason)
            if self._on_change is not None:
                self._on_change(self.state)
        else:
            self.state.reason = reason

    def _recovered(self) -> None:
        if self.state.failing:
            self.state.failing = False
            log.warning("usage log in %s writing again after %d dropped records (was: %s)",
                        self.usage_log.directory, self.state.dropped_records, self.state.reason)
            self.state.reason = ""
            if self._on_change is not None:
                self._on_change(self.state)

    def _append(self, what: str, call: Callable[..., int], *args: Any) -> None:
        if self.state.failing:
            self.state.dropped_records += 1
            return
        try:
            call(*args)
        except (OSError, ValueError) as exc:  # ValueError: I/O on a handle a failed close left shut
            self.state.dropped_records += 1
            self._fail(what, exc)

    def append_published(self, report_bytes: bytes) -> None:
        self._append("append", self.usage_log.append_published, report_bytes)

    def append_receipt(self, report: Any, raw: bytes, receive_time: float) -> None:
        self._append("append", self.usage_log.append_receipt, report, raw, receive_time)

    def append_accounting(self, record: bytes, cumulative: tuple[int, int, int, int], final: bool = False) -> None:
        self._append("append", self.usage_log.append_accounting, record, cumulative, final)

    def maintain(self) -> None:
        """Once per tick: flush, roll, archive, retention; the retry while failing."""
        try:
            self.usage_log.maintain()
        except (OSError, ValueError) as exc:
            self._fail("maintain", exc)
            return
        self._recovered()


__all__ = ["GuardState", "LogGuard"]
