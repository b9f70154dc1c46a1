"""Copy closed segments to an archive (a directory or any fsspec URI), off the event loop.

Layout in the archive: `<uri>/<daemon>/<segment name>`, written as
`<name>.partial` and then moved into place, so a reader listing `*.seg` never
sees half a copy (on object stores the move is a copy; the final name still
appears only once the whole object exists).

Why a thread and not "bounded work per maintain() call": one upload of a
64 MiB segment to a remote store takes seconds, and even one such call would
stall the daemon's tick (and the brokers waiting on it). A single background
thread does the copies in order; the event loop only enqueues work and polls
finished results, so `maintain()` stays O(segments) with no I/O. All state
the lag figures read is owned by the loop's thread: the uploader reports
through a queue and never touches it, so reading the lag takes no lock (the
constraint Kafka's tier-lag proposal sets as well). `threaded=False` runs
the copies inline, bounded per poll, for tests and one-shot tools.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rgd.config.storage import filesystem


@dataclass(frozen=True, slots=True)
class UploadResult:
    name: str
    dest: str
    error: str | None  # None: archived
    seconds: float


class ArchiveTarget:
    """Where closed segments go; `uri` is a local directory or any fsspec URI."""

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None) -> None:
        self.uri = uri
        self.fs, root = filesystem(uri, **(storage_options or {}))
        self.root = root.rstrip("/") or "/"

    def dest(self, daemon: str, name: str) -> str:
        return f"{self.root}/{daemon}/{name}"

    def put(self, local: Path, daemon: str) -> str:
        """Copy one closed segment; returns the archived path."""
        dest = self.dest(daemon, local.name)
        self.fs.makedirs(f"{self.root}/{daemon}", exist_ok=True)
        tmp = dest + ".partial"
        self.fs.put_file(str(local), tmp)
        self.fs.mv(tmp, dest)
        return dest

    def exists(self, daemon: str, name: str) -> bool:
        return bool(self.fs.exists(self.dest(daemon, name)))


class Uploader:
    """Runs ArchiveTarget.put for submitted segments; results come back through `poll`."""

    def __init__(self, target: ArchiveTarget, daemon: str, *, threaded: bool = True,
                 max_inline_per_poll: int = 1) -> None:
        self.target = target
        self.daemon = daemon
        self.threaded = threaded
        self.max_inline_per_poll = max_inline_per_poll
        self._todo: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[UploadResult] = queue.SimpleQueue()
        self._inline: deque[Path] = deque()
        self._thread: threading.Thread | None = None
        self._pending = 0  # submitted, result not yet polled (loop thread only)

    @property
    def pending(self) -> int:
        return self._pending

    def submit(self, path: Path) -> None:
        self._pending += 1
        if not self.threaded:
            self._inline.append(path)
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"rgd-archive-{self.daemon}", daemon=True)
            self._thread.start()
        self._todo.put(path)

    def _upload(self, path: Path) -> UploadResult:
        t0 = time.monotonic()
        try:
            dest = self.target.put(path, self.daemon)
            return UploadResult(path.name, dest, None, time.monotonic() - t0)
        except Exception as exc:  # any storage error: reported, retried later by the log
            return UploadResult(path.name, self.target.dest(self.daemon, path.name),
                                f"{type(exc).__name__}: {exc}", time.monotonic() - t0)

    def _run(self) -> None:
        while True:
            path = self._todo.get()
            if path is None:
                return
            self._done.put(self._upload(path))

    def poll(self) -> list[UploadResult]:
        """Finished uploads since the last poll (inline mode: do up to N uploads now)."""
        out: list[UploadResult] = []
        if not self.threaded:
            for _ in range(min(self.max_inline_per_poll, len(self._inline))):
                out.append(self._upload(self._inline.popleft()))
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                break
        self._pending -= len(out)
        return out

    def wait_idle(self, timeout: float) -> bool:
        """Block until every submitted upload has finished (True) or `timeout` passed."""
        deadline = time.monotonic() + timeout
        if not self.threaded:
            while self._inline and time.monotonic() < deadline:
                self._done.put(self._upload(self._inline.popleft()))
            return not self._inline
        while self._done.qsize() < self._pending:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def stop(self, timeout: float) -> None:
        if self._thread is not None:
            self._todo.put(None)
            self._thread.join(timeout)
            self._thread = None


# -- lag figures (Kafka's UploadTierLag / DeleteTierLag) ------------------------------------


@dataclass(slots=True)
class ClosedState:
    """A closed local segment as the log tracks it."""

    path: Path
    first: int
    last: int
    size: int
    closed_at: float
    archived: bool = False
    in_flight: bool = False
    next_try: float = 0.0
    failures: int = 0

    @property
    def records(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class LagFigures:
    """Gauges for rgd/api/metrics.py; all zero when nothing is behind.

    unarchived_*: closed segments not yet copied to the archive (0 without one).
    undeleted_*: archived segments past the retention still on local disk.
    oldest_unarchived_age_s: seconds since the oldest unarchived segment closed.
    """

    unarchived_records: int = 0
    unarchived_bytes: int = 0
    unarchived_segments: int = 0
    undeleted_records: int = 0
    undeleted_bytes: int = 0
    oldest_unarchived_age_s: float = 0.0
    closed_segments: int = 0
    archive_failures: int = 0  # failed copies so far (each is retried)
    last_archive_error: str = ""


def compute_lag(segments: list[ClosedState], now: float, retention_s: float, archiving: bool,
                archive_failures: int = 0, last_error: str = "") -> LagFigures:
    """Pure: the lag figures of a set of closed segments at `now`."""
    un_r = un_b = un_n = del_r = del_b = 0
    oldest = 0.0
    for s in segments:
        if archiving and not s.archived:
            un_r += s.records
            un_b += s.size
            un_n += 1
            oldest = max(oldest, now - s.closed_at)
        elif s.archived and now - s.closed_at >= retention_s:
            del_r += s.records
            del_b += s.size
    return LagFigures(un_r, un_b, un_n, del_r, del_b, max(0.0, oldest), len(segments),
                      archive_failures, last_error)
