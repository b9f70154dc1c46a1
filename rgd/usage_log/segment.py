"""Segment files: naming, the append-only writer, the reader that survives damage.

Names (sortable: daemon, then first log index, zero-padded)::

    <daemon>-<first:020d>.open                  the segment being written
    <daemon>-<first:020d>-<last:020d>.seg       a closed, fsynced segment

A closed name carries its first and last log index, so the record counts the
lag figures need, and the next log index after a restart, come from names
alone, without reading segments back (Kafka derives its tier lag from base
offsets the same way).

Damage model. A crash can leave a torn tail: the last frame(s) partly
written. A disk or copy fault can damage bytes anywhere. The reader decodes
frame after frame; when one fails (bad magic, length out of bounds, CRC) it
scans forward to the next offset where a whole frame decodes and CRC-checks,
and counts the region it skipped. Bytes after the last good frame are the
tail. Frames lost in a skipped region are counted exactly from the gap in
the continuous log index around it.
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rgd.usage_log.frame import Frame, FrameError, decode_frame, next_magic

OPEN_SUFFIX = ".open"
CLOSED_SUFFIX = ".seg"
_CLOSED_RE = re.compile(r"^(?P<daemon>.+)-(?P<first>\d{20})-(?P<last>\d{20})\.seg$")
_OPEN_RE = re.compile(r"^(?P<daemon>.+)-(?P<first>\d{20})\.open$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_PROBLEMS = 50  # messages kept per scan; counters keep counting past it


def safe_daemon(daemon_id: str) -> str:
    """The daemon id as it appears in file names (anything outside [A-Za-z0-9._-] -> '_')."""
    return _UNSAFE.sub("_", daemon_id) or "_"


def open_name(daemon: str, first: int) -> str:
    return f"{safe_daemon(daemon)}-{first:020d}{OPEN_SUFFIX}"


def closed_name(daemon: str, first: int, last: int) -> str:
    return f"{safe_daemon(daemon)}-{first:020d}-{last:020d}{CLOSED_SUFFIX}"


@dataclass(frozen=True, slots=True)
class SegmentName:
    daemon: str  # as in the file name (safe form)
    first: int
    last: int | None  # None while open
    name: str

    @property
    def closed(self) -> bool:
        return self.last is not None

    @property
    def records(self) -> int:
        """Records written to a closed segment (from its index range)."""
        return 0 if self.last is None else self.last - self.first + 1


def parse_name(name: str) -> SegmentName | None:
    """Parse a segment file name; None for anything else in the directory."""
    m = _CLOSED_RE.match(name)
    if m:
        first, last = int(m["first"]), int(m["last"])
        return SegmentName(m["daemon"], first, last, name) if last >= first else None
    m = _OPEN_RE.match(name)
    if m:
        return SegmentName(m["daemon"], int(m["first"]), None, name)
    return None


# -- reading --------------------------------------------------------------------------------


@dataclass(slots=True)
class ScanStats:
    """What a scan of one segment found; `problems` name the file and offset of each."""

    name: str = "<buffer>"
    size: int = 0
    frames: int = 0
    corrupt_regions: int = 0
    bytes_skipped: int = 0
    frames_lost: int = 0  # from log-index gaps around skipped regions
    tail_bytes: int = 0  # bytes after the last good frame (torn tail)
    first_index: int | None = None
    last_index: int | None = None
    last_end: int = 0  # offset just past the last good frame
    problems: list[str] = field(default_factory=list)

    @property
    def damaged(self) -> bool:
        return bool(self.corrupt_regions or self.tail_bytes)

    def note(self, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"{self.name}: {message}")


def _next_good(buf: bytes, start: int) -> Frame | None:
    """The first whole, CRC-valid frame whose magic is at or after `start`."""
    pos = next_magic(buf, start)
    while pos >= 0:
        try:
            return decode_frame(buf, pos)
        except FrameError:
            pos = next_magic(buf, pos + 1)
    return None


def iter_frames(buf: bytes, stats: ScanStats | None = None) -> Iterator[Frame]:
    """Every intact frame of `buf` in order; damage is counted in `stats`, never raised."""
    st = stats if stats is not None else ScanStats()
    st.size = len(buf)
    pos = 0
    prev_index: int | None = None
    n = len(buf)
    while pos < n:
        try:
            frame = decode_frame(buf, pos)
        except FrameError as exc:
            found = _next_good(buf, pos + 1)
            if found is None:
                st.tail_bytes = n - pos
                st.note(f"torn tail of {n - pos} bytes at offset {pos} ({exc.args[0]})")
                return
            frame = found
            st.corrupt_regions += 1
            st.bytes_skipped += frame.offset - pos
            st.note(f"corrupt region of {frame.offset - pos} bytes at offset {pos} ({exc.args[0]}); "
                    f"resynced at offset {frame.offset}")
        index = frame.metadata.log_index
        if prev_index is not None and index > prev_index + 1:
            st.frames_lost += index - prev_index - 1
        prev_index = index
        if st.first_index is None:
            st.first_index = index
        st.last_index = index
        st.frames += 1
        st.last_end = frame.end
        pos = frame.end
        yield frame


def scan_bytes(buf: bytes, name: str = "<buffer>") -> tuple[list[Frame], ScanStats]:
    stats = ScanStats(name=name)
    return list(iter_frames(buf, stats)), stats


def read_segment(path: str | os.PathLike[str]) -> tuple[list[Frame], ScanStats]:
    """All intact frames of one segment file plus what was damaged."""
    with open(path, "rb") as fh:
        return scan_bytes(fh.read(), name=str(path))


def last_good_frame(path: Path) -> Frame | None:
    """The last intact frame of a file, found from the end (cheap on a 64 MiB segment).

    A crash tears only the tail, so recovery needs the last frame that decodes,
    not a full scan: search backwards for a magic whose frame CRC-checks.
    """
    size = path.stat().st_size
    if size == 0:
        return None
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        pos = mm.rfind(b"\xabRGL")
        while pos >= 0:
            try:
                return decode_frame(mm, pos)
            except FrameError:
                pos = mm.rfind(b"\xabRGL", 0, pos)
    return None


# -- writing --------------------------------------------------------------------------------


def fsync_dir(directory: Path) -> None:
    """Make a rename durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class ClosedSegment:
    path: Path
    first: int
    last: int
    size: int
    closed_at: float  # the log's clock

    @property
    def records(self) -> int:
        return self.last - self.first + 1


class SegmentWriter:
    """Appends frames to `<daemon>-<first>.open` through a buffer; `close` fsyncs and renames.

    Appends only copy into the buffer (cheap enough for the daemon's event
    loop); `flush` hands the buffer to the kernel once per tick; the fsync
    happens once, on close, when the segment becomes immutable.
    """

    def __init__(self, directory: Path, daemon_id: str, first_index: int, created: float,
                 buffer_size: int = 1 << 20) -> None:
        self.directory = directory
        self.daemon_id = daemon_id
        self.first_index = first_index
        self.next_index = first_index
        self.created = created
        self.first_write: float | None = None  # clock time of the first record (age roll)
        self.path = directory / open_name(daemon_id, first_index)
        self._fh = open(self.path, "ab", buffering=buffer_size)  # noqa: SIM115 - the segment's, closed by close()
        self.size = self._fh.tell()
        self._done: tuple[ClosedSegment | None] | None = None  # close()'s result once it succeeded

    @property
    def records(self) -> int:
        return self.next_index - self.first_index

    def append(self, frame: bytes, now: float) -> None:
        self._fh.write(frame)
        self.size += len(frame)
        self.next_index += 1
        if self.first_write is None:
            self.first_write = now

    def flush(self) -> None:
        self._fh.flush()

    @property
    def closed(self) -> bool:
        """The handle is shut: a close ran (perhaps failed half way, to be called again)."""
        return self._fh.closed

    def close(self, now: float) -> ClosedSegment | None:
        """Flush, fsync and rename to the closed name; an empty segment is left open, named.

        Safe to call again after it raised (a full disk fails the flush, the fsync or
        the rename): each step that already succeeded is not repeated."""
        if self._done is not None:
            return self._done[0]
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
        if self.records == 0:
            self._done = (None,)
            return None
        last = self.next_index - 1
        final = self.directory / closed_name(self.daemon_id, self.first_index, last)
        os.replace(self.path, final)
        fsync_dir(self.directory)
        self._done = (ClosedSegment(final, self.first_index, last, self.size, now),)
        return self._done[0]

    def abandon(self) -> None:
        """Close the file handle without renaming (used when the segment is empty)."""
        if not self._fh.closed:
            self._fh.flush()
            self._fh.close()
