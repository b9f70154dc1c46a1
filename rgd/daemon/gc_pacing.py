"""Full garbage collections paced by the heap's growth, not by its churn.

Why: CPython starts a full (generation 2) collection when the objects promoted to the old
generation since the last one exceed a quarter of it. A daemon at PIP-82's scale replaces
tens of thousands of long-lived objects a second (every peer report refreshes usage-map
entries) while its heap stays the same size, so that rule fired every few seconds, and
each full collection walked the whole heap (about 200 000 objects: 120-190 ms measured
with bench/profile_receive.py) on the event loop that answers brokers. Those pauses were
the acquire latency's tail at scale.

What: after each tick, what is not frozen yet is collected (the short-lived cyclic garbage
of requests, tasks and exceptions is there) and every survivor is frozen (gc.freeze):
the cyclic collector stops walking it, while an object whose last reference goes is still
freed at once. Automatic collections then walk at most one tick of survivors. An object
frozen and later dropped inside a reference cycle is freed only by a full collection of
the frozen heap, which runs once the frozen heap has doubled since the last one: a steady
heap is never walked again, and a leak of cycles costs one full walk per doubling (each
object walked a bounded number of times) instead of growing without bound. The steady
state of a node creates no cycles (tests/unit/test_gc_pacing.py holds it to that).

Young collections are rarer too: once paced, a collection of the youngest generation runs
after YOUNG_THRESHOLD new container objects (CPython's default: 700). A peer's report folded
makes thousands of them, most gone again within the tick, and at PIP-82's scale the default
ran ~250 young and ~20 middle collections a tick, each walking survivors the tick's pacing
step walks again: bench/profile_receive.py --gc --gc-pacing, 41 -> 18 ms a tick of automatic
pauses (the longest 1.3 -> 7.8 ms, and at most one 12.5 ms middle collection in six ticks),
the node's CPU a tick 409 -> 368 ms. Live (bench/scale_probe.py, --cluster-thread, whose
serving thread every collection stops): collections 60-80 -> 45-47 ms a tick, acquire p99
within the runs' spread. What a young collection would have freed waits at most until the
next one or the tick's step: cyclic garbage only, which the steady state does not make.

Only `rgd run` paces the collector: it owns its process. A daemon embedded in another
process (the tests, the simulator) leaves that process's collector alone.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass

__all__ = ["YOUNG_THRESHOLD", "GcPacer", "GcPacingStats"]

log = logging.getLogger("rgd.gc_pacing")

# A full collection of the frozen heap runs once it holds this many times the objects it
# held after the last one (and at least MIN_FROZEN_FOR_FULL more: small heaps are cheap).
GROWTH_FOR_FULL = 2.0
MIN_FROZEN_FOR_FULL = 50_000
YOUNG_THRESHOLD = 10_000  # new container objects between two young collections, once paced


@dataclass
class GcPacingStats:
    frozen: int = 0  # objects in the frozen heap after the last pacing step
    full_collections: int = 0  # full collections of the frozen heap run by the pacer
    last_full_seconds: float = 0.0  # how long the last one took
    freed_by_full: int = 0  # unreachable objects the full collections found, in all


class GcPacer:
    """Call `start()` once the process has loaded what it keeps, then `after_tick()` at the
    end of every tick (between requests, never inside one)."""

    def __init__(self, growth: float = GROWTH_FOR_FULL, min_growth: int = MIN_FROZEN_FOR_FULL) -> None:
        self.growth = growth
        self.min_growth = min_growth
        self.stats = GcPacingStats()
        self._after_full = 0

    def start(self) -> None:
        """Freeze what is loaded so far (modules, the app, the clients): it lives as long as
        the process; and young collections from now on every YOUNG_THRESHOLD new objects."""
        gc.collect()
        gc.freeze()
        _, middle, old = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)
        self._after_full = gc.get_freeze_count()
        self.stats.frozen = self._after_full

    def after_tick(self) -> bool:
        """Collect what is not frozen (one tick's survivors: cheap) and freeze the rest; a full
        collection of the frozen heap when it has grown enough (returns whether one ran)."""
        gc.collect()
        gc.freeze()
        frozen = gc.get_freeze_count()
        full = frozen > max(self._after_full * self.growth, self._after_full + self.min_growth)
        if full:
            started = time.perf_counter()
            gc.unfreeze()
            freed = gc.collect()
            gc.freeze()
            self.stats.last_full_seconds = time.perf_counter() - started
            self.stats.full_collections += 1
            self.stats.freed_by_full += freed
            frozen = self._after_full = gc.get_freeze_count()
            log.debug("full garbage collection: %d objects kept, %d freed, %.0f ms", frozen, freed,
                      1000 * self.stats.last_full_seconds)
        self.stats.frozen = frozen
        return full
