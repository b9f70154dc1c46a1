"""The simulator's hook into rgd's usage log: every simulated daemon logs like a real one.

`UsageLogs` implements sim.engine.ReportLog with one `rgd.usage_log.UsageLog` per
daemon id, on the simulated clock (SIM_EPOCH + simulated seconds), so the Spark
fairness report can replay a simulated run exactly like a real cluster's logs:
published reports with their bytes untouched, receipts without payloads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.node import SIM_EPOCH


class UsageLogUnavailable(RuntimeError):
    """rgd.usage_log cannot be imported (the log writer is not installed)."""


class UsageLogs:
    def __init__(self, directory: Path) -> None:
        try:
            from rgd.usage_log import UsageLog
        except ImportError as exc:  # pragma: no cover - depends on the tree
            raise UsageLogUnavailable(f"rgd.usage_log is not available: {exc}") from None
        self._factory = UsageLog
        self.directory = directory
        self.now = 0.0
        self.logs: dict[str, Any] = {}

    def _clock(self) -> float:
        return SIM_EPOCH + self.now

    def _log(self, node_id: str) -> Any:
        log = self.logs.get(node_id)
        if log is None:
            log = self.logs[node_id] = self._factory(self.directory, node_id, clock=self._clock,
                                                     archive_threaded=False)
        return log

    def published(self, node_id: str, data: bytes, now: float) -> None:
        self.now = now
        self._log(node_id).append_published(data, SIM_EPOCH + now)

    def received(self, node_id: str, report: Any, data: bytes, now: float) -> None:
        self.now = now
        self._log(node_id).append_receipt(report, data, SIM_EPOCH + now)

    def tick(self, node_id: str, now: float) -> None:
        self.now = now
        self._log(node_id).maintain()

    def close(self) -> None:
        for log in self.logs.values():
            log.close()
        self.logs.clear()


def open_logs(root: str | Path, scenario: str, strategy: str) -> UsageLogs:
    """Logs for one run under ROOT/SCENARIO/STRATEGY/."""
    return UsageLogs(Path(root) / scenario / strategy)
