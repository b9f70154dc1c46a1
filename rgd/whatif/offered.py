"""Each daemon's offered load per group, kind and second, rebuilt from its logged tick counts (pure).

Offered load is what the brokers asked for: admitted + throttled (a broker that asks
for every batch shows the daemon its whole demand; DESIGN.md section 2). Counts are
spread over whole seconds of wall time in proportion to how much of each second the
tick covered, so logs of any tick length replay on the simulator's 1-second ticks.

An ACCOUNTING frame (a log of an rgd with tick accounting) holds every group and kind the
daemon's limiter knew, with exact counts: nothing is absent, nothing is filled in. In a
log of an older rgd, a group absent from a daemon's tick report was suppressed
(rgd/cluster/suppression.py):
the daemon leaves a group out only while none of its figures moved by more than the
tolerance since it last sent them, and reports a group that went idle at once. So an
absent group is taken as unchanged since its last report, at that report's rates, for as
long as the daemon keeps publishing; those counts are estimates, kept apart in `filled`.
A daemon's run (a span) ends with its leaving report, a new incarnation, or a silence
longer than MAX_SILENT_TICKS of its ticks (it crashed or lost the broker); nothing is
carried across the end of a span.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rgd.whatif.logged import KindCounts, TickCounts

__all__ = ["ADMITTED_BYTES", "ADMITTED_MESSAGES", "MAX_SILENT_TICKS", "THROTTLED_BYTES", "THROTTLED_MESSAGES",
           "OfferedLoad", "Span", "rebuild"]

# Rows of a counts array [4, seconds]
ADMITTED_MESSAGES, ADMITTED_BYTES, THROTTLED_MESSAGES, THROTTLED_BYTES = range(4)
# A daemon publishes a tick report every tick (an empty one when every group is suppressed or idle),
# so a gap of more than this many ticks between two of its reports means it was not running.
MAX_SILENT_TICKS = 2.5

Key = tuple[str, str, str]  # (group, daemon, kind)


@dataclass(frozen=True, slots=True)
class Span:
    """A daemon running from second `start` to second `end` (inclusive); `graceful`: it ended
    with a leaving report (peers evict it at once) rather than going silent."""

    start: int
    end: int
    graceful: bool


@dataclass
class OfferedLoad:
    start_ms: int  # wall time of second 0 (Unix ms, a whole second)
    seconds: int
    counts: dict[Key, np.ndarray] = field(default_factory=dict)  # [4, seconds]: the rows above
    filled: dict[Key, np.ndarray] = field(default_factory=dict)  # the part of `counts` carried over suppressed ticks
    reported: dict[Key, np.ndarray] = field(default_factory=dict)  # [4]: sums of the logged counts alone
    quotas: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)  # (group, kind) -> [2, seconds]; -1
    spans: dict[str, list[Span]] = field(default_factory=dict)
    suppressed_entries: int = 0  # (daemon, tick, group, kind) filled in (logs without tick accounting only)
    logged_entries: int = 0
    accounted_ticks: int = 0  # ticks read from ACCOUNTING frames (exact counts)

    @property
    def groups(self) -> list[str]:
        return sorted({g for g, _, _ in self.counts})

    @property
    def daemons(self) -> list[str]:
        return sorted(self.spans)

    def kinds(self, group: str) -> list[str]:
        return sorted({k for g, _, k in self.counts if g == group})

    def total(self, group: str, kind: str, row: int, filled: bool = False) -> float:
        src = self.filled if filled else self.counts
        return float(sum(a[row].sum() for (g, _, k), a in src.items() if g == group and k == kind))


def _spread(row: np.ndarray, t0: int, start_ms: int, end_ms: int, value: float) -> None:
    """Add `value` to the seconds [start_ms, end_ms) covers, in proportion to the overlap."""
    if value == 0 or end_ms <= start_ms:
        return
    length = end_ms - start_ms
    first = (start_ms - t0) // 1000
    last = (end_ms - 1 - t0) // 1000
    for s in range(max(first, 0), min(last, row.size - 1) + 1):
        lo = max(start_ms, t0 + 1000 * s)
        hi = min(end_ms, t0 + 1000 * (s + 1))
        row[s] += value * (hi - lo) / length


def _merge_parts(ticks: Sequence[TickCounts]) -> dict[str, list[TickCounts]]:
    """Per daemon, its ticks in order, a tick report split over several messages (same daemon,
    incarnation and publish time: rgd.cluster.node's continuations) joined into one."""
    by: dict[tuple[str, int, int], TickCounts] = {}
    for t in ticks:
        key = (t.daemon, t.incarnation, t.end_ms)
        old = by.get(key)
        if old is None:
            by[key] = TickCounts(t.daemon, t.incarnation, t.sequence, t.end_ms, t.tick_ms, t.leaving,
                                 {g: dict(k) for g, k in t.groups.items()}, t.accounted)
        else:
            for g, kinds in t.groups.items():
                old.groups.setdefault(g, {}).update(kinds)
            if t.leaving and not old.leaving:
                by[key] = TickCounts(old.daemon, old.incarnation, old.sequence, old.end_ms, old.tick_ms, True,
                                     old.groups, old.accounted)
    out: dict[str, list[TickCounts]] = {}
    for t in sorted(by.values(), key=lambda t: (t.end_ms, t.sequence)):
        out.setdefault(t.daemon, []).append(t)
    return out


def _values(c: KindCounts) -> tuple[int, int, int, int]:
    return c.admitted_messages, c.admitted_bytes, c.throttled_messages, c.throttled_bytes


def rebuild(ticks: Sequence[TickCounts]) -> OfferedLoad:
    """The offered load (and what was admitted and throttled) per group, daemon, kind and second."""
    if not ticks:
        raise ValueError("no tick reports")
    t0 = min(t.start_ms for t in ticks) // 1000 * 1000
    t1 = max(t.end_ms for t in ticks)
    n = max(1, math.ceil((t1 - t0) / 1000))
    load = OfferedLoad(start_ms=t0, seconds=n)
    quota_seen: list[tuple[int, int, int, str, str, float, float]] = []  # (end, start, end, group, kind, qm, qb)

    def arrays(key: Key) -> tuple[np.ndarray, np.ndarray]:
        if key not in load.counts:
            load.counts[key] = np.zeros((4, n))
            load.filled[key] = np.zeros((4, n))
            load.reported[key] = np.zeros(4)
        return load.counts[key], load.filled[key]

    def second(ms: int) -> int:
        return min(n - 1, max(0, (ms - t0) // 1000))

    for daemon, seq in _merge_parts(ticks).items():
        spans: list[Span] = []
        carried: dict[tuple[str, str], tuple[KindCounts, int]] = {}  # (group, kind) -> (counts, their tick_ms)
        span_start: int | None = None
        prev: TickCounts | None = None
        for t in seq:
            if prev is None or t.incarnation != prev.incarnation or prev.leaving \
                    or t.start_ms - prev.end_ms > MAX_SILENT_TICKS * prev.tick_ms:
                if prev is not None and span_start is not None:
                    spans.append(Span(span_start, second(prev.end_ms - 1), prev.leaving))
                carried.clear()
                span_start = second(t.start_ms)  # its first tick report covers its first tick
            load.accounted_ticks += t.accounted
            for group, kinds in t.groups.items():
                for kind, c in kinds.items():
                    if not t.accounted:  # an accounting frame's absent group admitted nothing: none carried
                        carried[(group, kind)] = (c, t.tick_ms)
                    counts, _ = arrays((group, daemon, kind))
                    load.reported[(group, daemon, kind)] += _values(c)
                    load.logged_entries += 1
                    quota_seen.append((t.end_ms, t.start_ms, t.end_ms, group, kind, c.quota_messages, c.quota_bytes))
                    for row, v in enumerate(_values(c)):
                        _spread(counts[row], t0, t.start_ms, t.end_ms, float(v))
            if t.accounted:
                carried.clear()
            for (group, kind), (c, tick_ms) in list(carried.items()):
                if group in t.groups:
                    if kind not in t.groups[group]:  # left out of a reported group: idle (and unlimited)
                        del carried[(group, kind)]
                    continue
                values = _values(c)
                if not any(values):  # reported idle: nothing to carry
                    del carried[(group, kind)]
                    continue
                counts, filled = arrays((group, daemon, kind))
                load.suppressed_entries += 1
                scale = t.tick_ms / tick_ms  # the same rates over this tick's length
                for row, v in enumerate(values):
                    _spread(counts[row], t0, t.start_ms, t.end_ms, v * scale)
                    _spread(filled[row], t0, t.start_ms, t.end_ms, v * scale)
            prev = t
        if prev is not None and span_start is not None:
            spans.append(Span(span_start, second(prev.end_ms - 1), prev.leaving))
        load.spans[daemon] = spans
    _paint_quotas(load, quota_seen)
    return load


def _paint_quotas(load: OfferedLoad, seen: list[tuple[int, int, int, str, str, float, float]]) -> None:
    """Each (group, kind)'s quota per second: the one the latest report covering that second carried,
    then carried forward over seconds no report covers (and back before the first)."""
    n, t0 = load.seconds, load.start_ms
    for _, start, end, group, kind, qm, qb in sorted(seen):
        q = load.quotas.setdefault((group, kind), np.full((2, n), np.nan))
        lo = max(0, (start - t0) // 1000)
        hi = min(n, max(lo + 1, -(-(end - t0) // 1000)))
        q[0, lo:hi], q[1, lo:hi] = qm, qb
    for q in load.quotas.values():
        for row in q:
            known = np.flatnonzero(~np.isnan(row))
            idx = np.maximum.accumulate(np.where(~np.isnan(row), np.arange(n), -1))
            idx[idx < 0] = known[0]
            row[:] = row[idx]
