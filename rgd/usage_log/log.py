"""The `UsageLog` facade the daemon calls: append, maintain once per tick, lag, close.

Life of a segment: open (appends, flushed once per tick) -> closed (rolled by
size or age: flushed, fsynced, renamed with its index range) -> archived (a
background copy finished, recorded in `<daemon>.archived`) -> deleted (the
retention passed since it closed). Without an archive nothing is deleted: the
local log is then the only copy.

Restart: a `.open` left by a crash is recovered from its end (the last frame
that CRC-checks), its torn tail truncated, and it is closed like any other
segment; the next log index is one past the highest index found in names and
recovered frames, so the index stays continuous across restarts. Closed
segments not in the manifest are queued for archiving again.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rgd.usage_log.archive import ArchiveTarget, ClosedState, LagFigures, Uploader, compute_lag
from rgd.usage_log.frame import ACCOUNTING, PUBLISHED, RECEIPT, encode_frame
from rgd.usage_log.segment import (
    SegmentWriter,
    closed_name,
    fsync_dir,
    last_good_frame,
    parse_name,
    safe_daemon,
)
from rgd.wire.log_entry_pb2 import LogEntryMetadata

MiB = 1024 * 1024
RETRY_BASE_S = 5.0
RETRY_MAX_S = 300.0


class LogLockedError(RuntimeError):
    """Another process is writing this daemon's log in the same directory."""


class UsageLog:
    """Append-only usage log of one daemon (DESIGN.md section 6)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        daemon_id: str,
        *,
        segment_max_bytes: int = 64 * MiB,
        segment_max_age_s: float = 300.0,
        archive_uri: str | None = None,
        retention_s: float = 3600.0,
        keep_receipt_payloads: bool = False,
        clock: Callable[[], float] = time.time,
        archive_threaded: bool = True,
        archive_storage_options: dict[str, Any] | None = None,
        accounting: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.daemon_id = daemon_id
        self.safe_id = safe_daemon(daemon_id)
        self.segment_max_bytes = segment_max_bytes
        self.segment_max_age_s = segment_max_age_s
        self.retention_s = retention_s
        self.keep_receipt_payloads = keep_receipt_payloads
        # The writer logs its tick accounting (append_accounting): published reports are then
        # marked `accounted`, and a replay takes the counts from the accounting frames alone.
        self.accounting = accounting
        self.clock = clock
        self.archive_failures = 0
        self.last_archive_error = ""
        self.recovered_tail_bytes = 0  # torn-tail bytes truncated when this log opened
        self._lock_fh = self._take_lock()
        self._manifest = self.directory / f"{self.safe_id}.archived"
        self._closed: dict[str, ClosedState] = {}
        self.target = ArchiveTarget(archive_uri, archive_storage_options) if archive_uri else None
        self.uploader = (Uploader(self.target, self.safe_id, threaded=archive_threaded)
                         if self.target else None)
        next_index = self._recover()
        self._writer = self._new_writer(next_index)
        self._closed_flag = False

    # -- startup ----------------------------------------------------------------------------

    def _take_lock(self) -> Any:
        fh = open(self.directory / f"{self.safe_id}.lock", "a+")  # noqa: SIM115 - held (locked) while the log is open
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            fh.close()
            raise LogLockedError(f"usage log of {self.daemon_id!r} in {self.directory} is in use") from exc
        return fh

    def _recover(self) -> int:
        """Load closed segments, repair `.open` leftovers; return the next log index."""
        archived = set()
        if self._manifest.exists():
            archived = {ln.strip() for ln in self._manifest.read_text().splitlines() if ln.strip()}
        next_index = 0
        opens = []
        for entry in sorted(os.listdir(self.directory)):
            parsed = parse_name(entry)
            if parsed is None or parsed.daemon != self.safe_id:
                continue
            if parsed.closed:
                path = self.directory / entry
                st = path.stat()
                self._closed[entry] = ClosedState(path, parsed.first, parsed.last or 0, st.st_size,
                                                  st.st_mtime, archived=entry in archived)
                next_index = max(next_index, (parsed.last or 0) + 1)
            else:
                opens.append(parsed)
                next_index = max(next_index, parsed.first)
        for parsed in opens:
            next_index = max(next_index, self._recover_open(self.directory / parsed.name, parsed.first))
        self._write_manifest()
        return next_index

    def _recover_open(self, path: Path, first: int) -> int:
        """Truncate a torn tail, close the segment; returns the index after its last frame."""
        size = path.stat().st_size
        frame = last_good_frame(path)
        end = frame.end if frame is not None else 0
        if end < size:
            self.recovered_tail_bytes += size - end
            with open(path, "r+b") as fh:
                fh.truncate(end)
                os.fsync(fh.fileno())
        if frame is None:
            path.unlink()  # nothing intact; its first index is kept by the caller
            return first
        last = frame.metadata.log_index
        final = self.directory / closed_name(self.daemon_id, first, last)
        os.replace(path, final)
        fsync_dir(self.directory)
        self._closed[final.name] = ClosedState(final, first, last, end, self.clock())
        return last + 1

    def _new_writer(self, first_index: int) -> SegmentWriter:
        return SegmentWriter(self.directory, self.daemon_id, first_index, self.clock())

    # -- appends (event loop, per report) ---------------------------------------------------

    @property
    def next_index(self) -> int:
        return self._writer.next_index

    def _append(self, meta: LogEntryMetadata, payload: bytes, now: float) -> int:
        if self._closed_flag:
            raise RuntimeError("usage log is closed")
        index = self._writer.next_index
        meta.log_index = index
        meta.daemon_id = self.daemon_id
        self._writer.append(encode_frame(meta, payload), now)
        if self._writer.size >= self.segment_max_bytes:
            self.roll()
        return index

    def append_published(self, report_bytes: bytes, write_time: float | None = None) -> int:
        """Log a report this daemon published: the exact bytes that went on the topic."""
        now = self.clock() if write_time is None else write_time
        meta = LogEntryMetadata(kind=PUBLISHED, write_time_us=int(now * 1e6), accounted=self.accounting)
        return self._append(meta, bytes(report_bytes), now)

    def append_accounting(self, record: bytes, cumulative: tuple[int, int, int, int], final: bool = False,
                          write_time: float | None = None) -> int:
        """Log one tick's accounting (rgd.usage_log.accounting) and hand it to the OS at once.

        `cumulative`: admitted messages, admitted bytes, throttled messages, throttled bytes
        of this incarnation so far. Flushed here, not at the tick's end: once written, a
        SIGKILL of the process can no longer lose it (the page cache keeps it), so a crash
        loses at most what was admitted after this frame."""
        now = self.clock() if write_time is None else write_time
        adm_m, adm_b, thr_m, thr_b = cumulative
        meta = LogEntryMetadata(kind=ACCOUNTING, write_time_us=int(now * 1e6), cumulative_admitted_messages=adm_m,
                                cumulative_admitted_bytes=adm_b, cumulative_throttled_messages=thr_m,
                                cumulative_throttled_bytes=thr_b, final=final)
        index = self._append(meta, bytes(record), now)
        self._writer.flush()
        return index

    def append_receipt(self, report: Any, raw: bytes, receive_time: float) -> int:
        """Log a report received from the topic (payload only with keep_receipt_payloads)."""
        now = self.clock()
        keep = self.keep_receipt_payloads
        meta = LogEntryMetadata(
            kind=RECEIPT, write_time_us=int(now * 1e6), receive_time_us=int(receive_time * 1e6),
            publisher_id=report.daemon_id, publisher_sequence=report.sequence,
            publisher_incarnation=report.incarnation, publish_time_ms=report.publish_time_ms,
            payload_kept=keep,
        )
        return self._append(meta, bytes(raw) if keep else b"", now)

    # -- housekeeping (event loop, once per tick) -------------------------------------------

    def roll(self) -> None:
        """Close the open segment (fsync + rename) and start the next one; no-op when empty."""
        now = self.clock()
        closed = self._writer.close(now)
        if closed is None:
            self._writer = self._new_writer(self._writer.first_index)
            return
        self._closed[closed.path.name] = ClosedState(closed.path, closed.first, closed.last,
                                                     closed.size, closed.closed_at)
        self._writer = self._new_writer(closed.last + 1)

    def maintain(self) -> None:
        """Flush, roll by age, collect finished copies, queue new ones, apply the retention."""
        now = self.clock()
        if self._writer.closed:  # a roll failed half way (full disk): finish it first
            self.roll()
        w = self._writer
        w.flush()
        if w.first_write is not None and now - w.first_write >= self.segment_max_age_s:
            self.roll()
        if self.uploader is not None:
            for st in self._closed.values():
                if not st.archived and not st.in_flight and st.next_try <= now:
                    st.in_flight = True
                    self.uploader.submit(st.path)
            self._collect_uploads(now)
        self._apply_retention(now)

    def _collect_uploads(self, now: float) -> None:
        assert self.uploader is not None
        done = []
        for res in self.uploader.poll():
            st = self._closed.get(res.name)
            if st is None:
                continue
            st.in_flight = False
            if res.error is None:
                st.archived = True
                done.append(res.name)
            else:
                st.failures += 1
                st.next_try = now + min(RETRY_MAX_S, RETRY_BASE_S * 2 ** (st.failures - 1))
                self.archive_failures += 1
                self.last_archive_error = f"{res.name}: {res.error}"
        if done:
            with open(self._manifest, "a") as fh:
                fh.writelines(f"{n}\n" for n in done)

    def _apply_retention(self, now: float) -> None:
        expired = [n for n, st in self._closed.items()
                   if st.archived and now - st.closed_at >= self.retention_s]
        for name in expired:
            try:
                self._closed[name].path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:  # try again next tick; the lag figure shows it
                self.last_archive_error = f"{name}: delete failed: {exc}"
                continue
            del self._closed[name]
        if expired:
            self._write_manifest()

    def _write_manifest(self) -> None:
        names = sorted(n for n, st in self._closed.items() if st.archived)
        tmp = self._manifest.with_suffix(".tmp")
        tmp.write_text("".join(f"{n}\n" for n in names))
        os.replace(tmp, self._manifest)

    def lag(self) -> LagFigures:
        """Tier-lag gauges; computed from in-memory state, no I/O, no lock."""
        return compute_lag(list(self._closed.values()), self.clock(), self.retention_s,
                           self.uploader is not None, self.archive_failures, self.last_archive_error)

    def wait_archived(self, timeout: float = 30.0) -> bool:
        """Archive every closed segment now (tests, shutdown); True when none is left."""
        if self.uploader is None:
            return True
        deadline = time.monotonic() + timeout
        while True:
            self.maintain()
            if all(st.archived for st in self._closed.values()):
                return True
            if time.monotonic() >= deadline:
                return False
            self.uploader.wait_idle(max(0.0, min(1.0, deadline - time.monotonic())))

    def close(self, archive_timeout: float = 5.0) -> None:
        """Close the open segment; give pending copies `archive_timeout` seconds, then stop.

        Copies that do not finish are retried by the next process that opens the log.
        """
        if self._closed_flag:
            return
        self.roll()
        if self.uploader is not None:
            if archive_timeout > 0:
                self.wait_archived(archive_timeout)
            self.uploader.stop(timeout=1.0)
        self._writer.abandon()
        if self._closed:
            # The empty `.open` is only needed to carry the next index when no closed segment does.
            self._writer.path.unlink(missing_ok=True)
        self._closed_flag = True
        self._lock_fh.close()

    def __enter__(self) -> UsageLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
