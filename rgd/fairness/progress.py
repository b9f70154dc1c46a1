"""The report's console lines: one per stage, on stderr, with its duration.

A report runs for minutes and Spark draws its own progress bar only on a
terminal; these lines are what a log file or a CI run sees instead, and the
stage timings end up in summary.json.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    """One console line per stage (stderr), with its duration."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.t0 = time.monotonic()
        self.timings: dict[str, float] = {}
        # The JVM starts on another thread with file descriptor 2 pointed at spark.log for a
        # while (spark_session): progress keeps a handle on the real stderr of its own.
        self.out: TextIO = sys.stderr
        try:
            self.out = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
        except (AttributeError, OSError, ValueError):  # a stderr without a descriptor (tests)
            pass

    def say(self, msg: str) -> None:
        if self.enabled:
            print(f"[rgd report {time.monotonic() - self.t0:7.1f}s] {msg}", file=self.out, flush=True)

    @contextmanager
    def stage(self, name: str, detail: str = "", sc: Any = None) -> Iterator[None]:
        """Time a stage; with `sc`, report Spark's task counts every 5 s while it runs
        (Spark draws its own bar only on a terminal)."""
        self.say(f"{name} ... {detail}".rstrip())
        t = time.monotonic()
        stop = threading.Event()
        watcher = None
        if sc is not None and self.enabled and not sys.stderr.isatty():
            watcher = threading.Thread(target=self._watch, args=(sc, stop), daemon=True)
            watcher.start()
        try:
            yield
        finally:
            stop.set()
            if watcher is not None:
                watcher.join(2.0)
        self.timings[name] = round(time.monotonic() - t, 3)
        self.say(f"{name} done in {self.timings[name]:.1f}s")

    def _watch(self, sc: Any, stop: threading.Event) -> None:
        last = ""
        while not stop.wait(5.0):
            try:
                tracker = sc.statusTracker()
                parts = []
                for sid in sorted(tracker.getActiveStageIds()):
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks"
                                     f"{f' ({info.numActiveTasks} running)' if info.numActiveTasks else ''}")
                line = "; ".join(parts)
            except Exception:  # the tracker is best effort: never fail a report over progress lines
                return
            if line and line != last:
                self.say(line)
                last = line
