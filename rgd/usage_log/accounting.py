"""A daemon's own tick accounting: every admitted and throttled message in its log exactly once.

The reports a daemon publishes are not an account of what it admitted: PIP-82's
suppression leaves out groups whose usage barely moved, early reports and
restatements repeat counts, a split report's parts may be lost, and a replay of
published reports alone summed a third of the truth. So each time the limiter's
tick counters are collected (which resets them) the same counts go into the
usage log as an ACCOUNTING frame (proto/rgd/v1/log_entry.proto), whatever is then
published or suppressed: every group and kind the limiter knows, with the
limits in force at that instant. Between two collects every ask is counted in
exactly one of them, so the frames' sum is what the brokers were told.

The record is a UsageReport-shaped message (never sent): the fairness report
decodes it with the same code as a published report. Its metadata carries the
incarnation's running totals, so a frame lost to corruption shows as a gap in
the record's sequence and its counts are the difference of the totals around
it; the last frame of a clean stop says `final`, so a log that ends without it
ended in a crash, having lost at most what was admitted after its last frame.
"""

from __future__ import annotations

from collections.abc import Mapping

from rgd.cluster.report_builder import group_entries
from rgd.config.groups import KINDS, ResourceGroup
from rgd.limiting.limiter import Collected, KindState
from rgd.wire.usage_report_pb2 import UsageReport

__all__ = ["Cumulative", "TickAccounting"]

Cumulative = tuple[int, int, int, int]  # admitted messages, admitted bytes, throttled messages, throttled bytes


class TickAccounting:
    """One incarnation's accounting: each collect of the limiter becomes one record."""

    def __init__(self, daemon_id: str, incarnation: int, started_ms: int) -> None:
        self.daemon_id = daemon_id
        self.incarnation = incarnation
        self.sequence = 0
        self.cumulative: Cumulative = (0, 0, 0, 0)
        self._last_ms = started_ms  # the counts of the first record run from the start

    def record(self, collected: Mapping[tuple[str, str], Collected], states: Mapping[tuple[str, str], KindState],
               groups: Mapping[str, ResourceGroup], now_ms: int) -> tuple[bytes, Cumulative]:
        """The record of one collect (its bytes) and the running totals with it.

        Reads `states` only by key, for the limits (a collect holds every key the limiter
        had): it may run in another thread while the limiter goes on, and a limit set
        meanwhile is a limit of the next instant, no count changes."""
        self.sequence += 1
        report = UsageReport(daemon_id=self.daemon_id, sequence=self.sequence, publish_time_ms=now_ms,
                             tick_ms=max(1, min(now_ms - self._last_ms, 2**32 - 1)), incarnation=self.incarnation,
                             complete=True)
        self._last_ms = now_ms
        adm_m, adm_b, thr_m, thr_b = self.cumulative
        for entry in group_entries(collected, states, groups, sorted({g for g, _ in collected})).values():
            for kind in (getattr(entry, k) for k in KINDS):
                adm_m += kind.admitted_messages
                adm_b += kind.admitted_bytes
                thr_m += kind.throttled_messages
                thr_b += kind.throttled_bytes
            report.groups.append(entry)
        self.cumulative = (adm_m, adm_b, thr_m, thr_b)
        return report.SerializeToString(), self.cumulative
