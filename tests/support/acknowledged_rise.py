"""Reads a rise and its acknowledgements out of usage logs, for the live and the simulated run alike.

The mechanism under test (docs/design/protocol.md, M4 and M13): a daemon whose demand rises
reports it at once asking for acknowledgements, and takes a larger share only once every
peer has acknowledged that report. Both the daemon and the simulator log every report they
publish (with its bytes) and every receipt (sender, sequence, when), in the same format, so
one reading of the logs tells in either run: which report announced the rise, when the
last acknowledgement of it reached the riser, and the limits the riser reported before and
after. It shares no code with rgd.cluster: it decodes frames and the wire format only.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

from rgd.usage_log import parse_name, read_segment
from rgd.wire.log_entry_pb2 import LogEntryMetadata
from rgd.wire.usage_report_pb2 import UsageReport

__all__ = ["Rise", "find_rise", "read_logs"]


@dataclass(frozen=True)
class Logged:
    """One daemon's log: its published reports (by sequence) and when each peer report reached it."""

    published: dict[int, UsageReport]
    received_us: dict[tuple[str, int], int]  # (publisher, sequence) -> receive time, Unix µs


@dataclass(frozen=True)
class Rise:
    report: UsageReport  # the riser's first report of the higher demand
    acked_at_ms: float  # when the last peer's acknowledgement of it reached the riser (Unix ms)
    limits_before: list[float]  # the group's limit in the riser's reports published before that
    limits_after: list[tuple[float, float]]  # (publish time ms, limit) of those published after


def read_logs(root: Path) -> dict[str, Logged]:
    """Every daemon's log under `root` (any depth), by daemon id."""
    logs: dict[str, Logged] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or parse_name(path.name) is None:
            continue
        frames, _ = read_segment(path)
        for f in frames:
            m = f.metadata
            log = logs.setdefault(m.daemon_id, Logged({}, {}))
            if m.kind == LogEntryMetadata.PUBLISHED:
                r = UsageReport()
                r.ParseFromString(f.payload)
                log.published[r.sequence] = r
            elif m.kind == LogEntryMetadata.RECEIPT:
                log.received_us.setdefault((m.publisher_id, m.publisher_sequence), m.receive_time_us)
    return logs


def _demand(r: UsageReport, group: str) -> float | None:
    for g in r.groups:
        if g.group == group:
            return float(g.publish.admitted_messages + g.publish.throttled_messages)
    return None


def _limit(r: UsageReport, group: str) -> float | None:
    for g in r.groups:
        if g.group == group:
            return g.publish.limit_messages
    return None


def find_rise(logs: dict[str, Logged], riser: str, group: str, after_ms: float, factor: float = 3.0) -> Rise:
    """The riser's first report published after `after_ms` whose demand for `group` is at least
    `factor` times the figure it reported before (the smallest since `after_ms`), and when every
    peer's acknowledgement of it (a report of theirs naming the riser's tag with that sequence or
    a later one) reached the riser."""
    own = logs[riser]
    ordered = [own.published[s] for s in sorted(own.published)]
    # The figure before: the smallest reported since the last report before `after_ms` (a rise
    # read over two reports, as when the load starts late on a busy machine, is still one rise).
    previous: float | None = None
    rise = None
    for r in ordered:
        d = _demand(r, group)
        if d is None:
            continue
        if r.publish_time_ms > after_ms and previous is not None and d >= factor * max(previous, 1.0):
            rise = r
            break
        previous = d if previous is None or r.publish_time_ms <= after_ms else min(previous, d)
    if rise is None:
        raise AssertionError(f"{riser} reported no rise of {group} after {after_ms}")
    tag = zlib.crc32(f"{riser}/{rise.incarnation}".encode())
    acked_at = 0.0
    for peer, log in logs.items():
        if peer == riser:
            continue
        acks = [r for s, r in sorted(log.published.items())
                if any(t == tag and q >= rise.sequence for t, q in zip(r.ack_members, r.ack_sequences))]
        arrivals = [own.received_us.get((peer, r.sequence)) for r in acks]
        heard = [a / 1000.0 for a in arrivals if a is not None]
        if not heard:
            raise AssertionError(f"no acknowledgement by {peer} of {riser}'s report {rise.sequence} reached {riser}")
        acked_at = max(acked_at, min(heard))
    before = [lim for r in ordered if r.publish_time_ms < acked_at and r.sequence >= rise.sequence
              and (lim := _limit(r, group)) is not None]
    after = [(float(r.publish_time_ms), lim) for r in ordered if r.publish_time_ms >= acked_at
             and (lim := _limit(r, group)) is not None]
    return Rise(rise, acked_at, before, after)
