"""Reloading the config file without stalling the event loop that answers acquires.

Change detection hashes the whole content (a 736 KB file costs about a
millisecond, the GIL released while hashing), so a file replaced by one of the
same size and mtime reloads, and a bad file is reported once, not every poll.
A change is taken only when two reads 0.1 s apart agree (a file being
rewritten in place is briefly empty, which would be a valid, limitless config).

Parsing runs in a separate worker process, not a thread: libyaml's parser is C
code that holds the GIL until the whole document is composed (about 0.3 s for
10,000 groups), so a thread would stall the loop just the same. The worker
returns the validated `ConfigDocument`; unpickling it costs the loop a few
milliseconds, and the daemon swaps it in with one assignment. The worker is
spawned (never forked: the Pulsar client runs threads) on the first change and
kept for the next.
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from rgd.config.file import ConfigDocument, ConfigError, parse_config

SETTLE_S = 0.1  # a changed file must read the same twice this far apart


class ConfigReloader:
    def __init__(self, path: str | Path, digest: str) -> None:
        self.path = Path(path)
        self.last_digest = digest  # of the last content seen, good or bad
        self._pool: ProcessPoolExecutor | None = None
        self.settle = time.sleep  # the wait between the two reads (tests step in here)

    def read_if_changed(self) -> bytes | None:
        """Blocking (run it in a thread): the content when its hash differs from the last seen
        and it held still for `SETTLE_S`.

        A file rewritten in place (truncate, then write) is briefly empty or cut short, and
        an empty file is a valid config with no groups: parsing that would lift every
        limit until the next poll. So a change counts only once two reads agree."""
        try:
            text = self.path.read_bytes()
            digest = hashlib.sha256(text).hexdigest()
            if digest == self.last_digest:
                return None
            self.settle(SETTLE_S)
            if hashlib.sha256(self.path.read_bytes()).hexdigest() != digest:
                return None  # still being written: the next poll looks again
        except OSError as exc:
            if self.last_digest == "unreadable":  # said once; wait for the file to come back
                return None
            self.last_digest = "unreadable"
            raise ConfigError(f"{self.path}: cannot read: {exc.strerror or exc}") from exc
        self.last_digest = digest
        return text

    async def poll(self) -> ConfigDocument | None:
        """The new document when the content changed, None otherwise; ConfigError when bad."""
        previous = self.last_digest
        text = await asyncio.to_thread(self.read_if_changed)
        if text is None:
            return None
        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, parse_config, text, str(self.path))
        except BrokenProcessPool as exc:
            # The worker died (killed, out of memory): a new one parses the same content next poll.
            self.close()
            self.last_digest = previous
            raise ConfigError(f"{self.path}: the parsing worker died ({exc}); trying again") from exc

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["ConfigReloader"]
