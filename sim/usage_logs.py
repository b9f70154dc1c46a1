"""The simulator's hook into rgd's usage log: every simulated daemon logs like a real one.

`UsageLogs` implements sim.engine.ReportLog with one `rgd.usage_log.UsageLog` per
daemon id, on the simulated clock (SIM_EPOCH + simulated seconds), so the Spark
fairness report can replay a simulated run exactly like a real cluster's logs:
published reports with their bytes untouched, receipts without payloads, and the
daemon's own tick accounting (rgd.usage_log.accounting), taken where the daemon
takes it: at each collect of the limiter, a final one when a daemon stops
gracefully or the run ends, none when it crashes. So the report's totals equal
what the simulated brokers were told, whatever the topic lost or duplicated.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.node import SIM_EPOCH, wall_ms

if TYPE_CHECKING:
    from sim.node import SimNode


class UsageLogUnavailable(RuntimeError):
    """rgd.usage_log cannot be imported (the log writer is not installed)."""


class UsageLogs:
    def __init__(self, directory: Path) -> None:
        try:
            from rgd.usage_log import UsageLog
            from rgd.usage_log.accounting import TickAccounting
        except ImportError as exc:  # pragma: no cover - depends on the tree
            raise UsageLogUnavailable(f"rgd.usage_log is not available: {exc}") from None
        self._factory = UsageLog
        self._accounting = TickAccounting
        self.directory = directory
        self.now = 0.0
        self.logs: dict[str, Any] = {}
        self.attached: dict[str, tuple[SimNode, Any]] = {}  # node id -> (node, its TickAccounting)

    def _clock(self) -> float:
        return SIM_EPOCH + self.now

    def _log(self, node_id: str) -> Any:
        log = self.logs.get(node_id)
        if log is None:
            log = self.logs[node_id] = self._factory(self.directory, node_id, clock=self._clock,
                                                     archive_threaded=False, accounting=True)
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

    def attach(self, node: SimNode) -> None:
        now = node.clock()
        accounting = self._accounting(node.node_id, node.incarnation, wall_ms(now))
        self.attached[node.node_id] = (node, accounting)

        def account(collected: Any) -> None:
            self._account(node, accounting, collected, final=False)

        node.limiter.on_collect = account

    def _account(self, node: SimNode, accounting: Any, collected: Any, final: bool) -> None:
        now = node.clock()
        self.now = now
        record, cumulative = accounting.record(collected, node.limiter.states, node.groups, wall_ms(now))
        self._log(node.node_id).append_accounting(record, cumulative, final, SIM_EPOCH + now)

    def detach(self, node: SimNode, graceful: bool) -> None:
        attached = self.attached.get(node.node_id)
        if attached is None or attached[0] is not node:
            return
        del self.attached[node.node_id]
        node.limiter.on_collect = None
        if graceful:  # what it admitted since its last tick: a crash loses it, a stop does not
            self._account(node, attached[1], node.limiter.collect(), final=True)

    def close(self) -> None:
        for node, _ in list(self.attached.values()):
            self.detach(node, graceful=True)
        for log in self.logs.values():
            log.close()
        self.logs.clear()


def open_logs(root: str | Path, scenario: str, strategy: str) -> UsageLogs:
    """Logs for one run under ROOT/SCENARIO/STRATEGY/."""
    return UsageLogs(Path(root) / scenario / strategy)
