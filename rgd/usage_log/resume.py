"""What a same-id restart resumes from, read back from its own usage log.

Peers keep counting a member's last group entries until they evict it (see
rgd.cluster.node.Resume), so a daemon restarted with the same id can resume near its
old share if it knows what those entries were, and which peers to wait for. The
usage log already holds both, durably and without a new file: every report the
daemon published (its exact bytes) and one receipt per report it received. Reading
the newest segments back at start-up costs a few milliseconds; nothing is written
for it, so a crash loses nothing a graceful stop would have kept.
"""

from __future__ import annotations

import os
from pathlib import Path

from rgd.cluster.node import Resume
from rgd.cluster.report_builder import peer_usage
from rgd.quota.model import PeerUsage
from rgd.usage_log.frame import PUBLISHED, RECEIPT
from rgd.usage_log.segment import parse_name, read_segment, safe_daemon
from rgd.wire.usage_report_pb2 import UsageReport


def resume_from_log(directory: str | os.PathLike[str], daemon_id: str, wall_now: float, clock_now: float,
                    window_s: float, refresh_reports: int, ttl_s: float) -> Resume | None:
    """The Resume our predecessor left in the usage log at `directory`, or None (no log,
    nothing published within `window_s`, or a damaged log: a restart from the floor is
    always safe).

    window_s: how far back to look (peers drop an unconfirmed entry after the safety TTL,
      so nothing older can still be counted for us).
    refresh_reports: K + 1 (rgd.cluster.map_keeper): peers drop our entry for a group after that
      many consecutive tick reports of ours without it, so such a group is not resumed.
    ttl_s: the peers we heard within this long before our last report are the members to
      wait for (a member silent longer had been evicted).
    clock_now / wall_now: the daemon's clock and time.time() now, to place the
      predecessor's last report on the daemon's clock.
    """
    path = Path(directory)
    if not path.is_dir():
        return None
    safe = safe_daemon(daemon_id)
    segments = [s for s in (parse_name(n) for n in os.listdir(path)) if s is not None and s.daemon == safe]
    since_us = (wall_now - window_s) * 1e6
    published: list[UsageReport] = []  # newest first
    heard: dict[str, float] = {}  # peer -> newest receipt (wall seconds)
    for seg in sorted(segments, key=lambda s: s.first, reverse=True):
        frames, _ = read_segment(path / seg.name)
        older = False
        for frame in reversed(frames):
            meta = frame.metadata
            if meta.write_time_us < since_us:
                older = True
                break
            if meta.kind == PUBLISHED:
                report = UsageReport()
                try:
                    report.ParseFromString(frame.payload)
                except Exception:  # a damaged entry: resume without it
                    continue
                if report.daemon_id == daemon_id:
                    published.append(report)
            elif meta.kind == RECEIPT and meta.publisher_id != daemon_id:
                heard.setdefault(meta.publisher_id, meta.receive_time_us / 1e6)
        if older:
            break
    if not published:
        return None
    newest = published[0]
    ended_wall = newest.publish_time_ms / 1000.0
    entries: dict[str, PeerUsage] = {}
    ticks_without: dict[str, int] = {}
    seen_ticks = 0  # tick reports (not restatements) newer than the one being read
    incarnation = newest.incarnation
    for report in published:
        if report.incarnation != incarnation or report.leaving:
            if report.incarnation != incarnation:
                break  # an older incarnation's entries were replaced by the newest one's
            continue
        for g in report.groups:
            if g.group not in entries:
                entries[g.group] = peer_usage(g, report.tick_ms / 1000.0)
                ticks_without[g.group] = seen_ticks
        if not report.restatement:
            seen_ticks += 1
    entries = {g: u for g, u in entries.items() if ticks_without[g] < refresh_reports}
    members = frozenset(p for p, at in heard.items() if at >= ended_wall - ttl_s)
    return Resume(members, entries, clock_now - (wall_now - ended_wall), bool(newest.leaving))


__all__ = ["resume_from_log"]
