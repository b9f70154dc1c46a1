"""What the usage logs say each daemon counted, tick by tick (the input of `rgd whatif`).

A log written by an rgd with tick accounting (docs/tick-accounting.md) holds an
ACCOUNTING frame for every collect of the limiter: every group and kind it knows, with
exactly what it admitted and throttled since the previous one, whether the tick's
report was then published, suppressed, split or lost. Those frames are the counts; the
published reports of such a log are marked `accounted` and are not read again (their
counts are in the frames).

A log of an older rgd has only the reports each daemon published (and receipts, which
carry no counts). A tick report's group entry counts that group's admitted and
throttled messages and bytes over the tick (`tick_ms`); restatements (early reports,
the tick's restatement of early-reported groups, announcements to a new member) repeat
counts already logged and are left out, as the fairness report leaves them out.
PIP-82 suppression (rgd/cluster/suppression.py) leaves a group out of a tick report
when none of its figures moved by more than the tolerance since it was last sent:
that tick's counts never reach such a log, and `rgd.whatif.offered` fills them in.

`tick_counts` is the one place that turns a logged frame into counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from rgd.config.groups import KINDS
from rgd.fairness.listing import list_segments, open_uri
from rgd.usage_log.segment import ScanStats, iter_frames
from rgd.wire.log_entry_pb2 import LogEntryMetadata
from rgd.wire.usage_report_pb2 import UsageReport

__all__ = ["KindCounts", "LogReadError", "ReadStats", "TickCounts", "read_ticks", "tick_counts"]

DEFAULT_TICK_MS = 1000  # a report that does not say its tick length (tick_ms 0) covers the default tick


class LogReadError(ValueError):
    """The logs cannot be replayed (nothing there, or no tick report in them); the message says why."""


@dataclass(frozen=True, slots=True)
class KindCounts:
    """One kind of one group over one tick on one daemon, and the quota that daemon knew (-1: unlimited)."""

    admitted_messages: int
    admitted_bytes: int
    throttled_messages: int
    throttled_bytes: int
    quota_messages: float
    quota_bytes: float


@dataclass(frozen=True, slots=True)
class TickCounts:
    """One daemon's counts for one tick: the groups its report carried (suppressed ones are absent), or,
    `accounted`, every group and kind its limiter knew (an ACCOUNTING frame: nothing is absent)."""

    daemon: str
    incarnation: int
    sequence: int
    end_ms: int  # when the tick ended: the report's publish time
    tick_ms: int
    leaving: bool
    groups: dict[str, dict[str, KindCounts]] = field(default_factory=dict)  # group -> kind -> counts
    accounted: bool = False  # from an ACCOUNTING frame: exact, complete counts (no suppression to fill)

    @property
    def start_ms(self) -> int:
        return self.end_ms - self.tick_ms


def tick_counts(meta: LogEntryMetadata, payload: bytes) -> TickCounts | None:
    """The counts of one logged frame, or None if it adds none: a receipt, a restatement, a published
    report whose counts are in the log's ACCOUNTING frames (`accounted`), a payload that does not
    parse. Kinds absent from an entry are idle and unlimited (see usage_report.proto).

    An ACCOUNTING frame's span ends at its collect (`publish_time_ms`); the final frame of a
    clean stop ends its incarnation as a leaving report does."""
    accounting = meta.kind == LogEntryMetadata.ACCOUNTING
    if not accounting and (meta.kind != LogEntryMetadata.PUBLISHED or meta.accounted):
        return None
    try:
        report = UsageReport.FromString(payload)
    except Exception:  # a damaged payload: the frame's CRC held, the bytes are not a report
        return None
    if report.restatement and not accounting:
        return None
    groups: dict[str, dict[str, KindCounts]] = {}
    for entry in report.groups:
        kinds = groups.setdefault(entry.group, {})
        for kind in KINDS:
            if not entry.HasField(kind):
                continue
            k = getattr(entry, kind)
            kinds[kind] = KindCounts(k.admitted_messages, k.admitted_bytes, k.throttled_messages,
                                     k.throttled_bytes, k.quota_messages, k.quota_bytes)
    return TickCounts(report.daemon_id, report.incarnation, report.sequence, report.publish_time_ms,
                      report.tick_ms or DEFAULT_TICK_MS, report.leaving or (accounting and meta.final), groups,
                      accounting)


@dataclass(slots=True)
class ReadStats:
    segments: int = 0
    frames: int = 0
    reports: int = 0  # tick reports and accounting frames read (duplicates across copies of a segment counted once)
    accounting_frames: int = 0  # of them, ACCOUNTING frames (exact counts)
    duplicates: int = 0
    damaged_segments: int = 0


def _frames(uri: str, stats: ReadStats) -> Iterator[tuple[LogEntryMetadata, bytes]]:
    scan = ScanStats(name=uri)
    with open_uri(uri) as fh:
        data = fh.read()
    for frame in iter_frames(data, scan):
        yield frame.metadata, frame.payload
    stats.frames += scan.frames
    stats.damaged_segments += scan.damaged


def read_ticks(path_or_uri: str) -> tuple[list[TickCounts], ReadStats]:
    """Every tick report or accounting frame under a log directory, archive or fsspec URI (s3://, gs://),
    in publish order.

    A report found twice (a segment both in a log directory and its archive) counts once."""
    try:
        segments = list_segments(path_or_uri)
    except FileNotFoundError as exc:
        raise LogReadError(str(exc)) from None
    if not segments:
        raise LogReadError(f"{path_or_uri}: no usage log segments there (rgd's DAEMON-INDEX.seg and .open files)")
    stats = ReadStats(segments=len(segments))
    seen: set[tuple[str, int, int, bool]] = set()  # accounting frames number their own sequence
    out: list[TickCounts] = []
    for uri, _ in segments:
        for meta, payload in _frames(uri, stats):
            ticks = tick_counts(meta, payload)
            if ticks is None:
                continue
            key = (ticks.daemon, ticks.incarnation, ticks.sequence, ticks.accounted)
            if key in seen:
                stats.duplicates += 1
                continue
            seen.add(key)
            out.append(ticks)
    if not out:
        raise LogReadError(f"{path_or_uri}: {len(segments)} segment(s) but no tick report in them")
    stats.reports = len(out)
    stats.accounting_frames = sum(t.accounted for t in out)
    out.sort(key=lambda t: (t.end_ms, t.daemon, t.sequence))
    return out, stats
