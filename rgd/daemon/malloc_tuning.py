"""A fixed mmap threshold for glibc's malloc in `rgd run`'s processes.

Why: at PIP-82's scale a round of peers' reports arrives at once, every second (99 peers
ticking in step), and the Pulsar client holds each one decompressed until the daemon has
vetted it: ~19 MB of buffers of ~190 KB each, allocated on the client's threads and freed a
few hundred milliseconds later. glibc maps a block that size on its own, and unmaps it when
freed, only while it is above the mmap threshold (and the heap's top has no room), and it
raises the threshold to the size of every mapped block freed (up to 32 MB). After the first
round of full reports (~0.5 MB each) every later buffer comes from the heap, whose freed
space malloc keeps, fragmented, as resident memory. Setting the threshold turns the raising
off (and keeps the heap's trim threshold at its default), so those buffers stay mapped
blocks. bench/scale_probe.py, one process, reports as rgd sends them, two runs each: RSS at
most 150 / 150 MB at glibc's default, 144 / 145 MB with 64 KiB; acquire latency and loop
work within the runs' spread. Python's own allocator (objects under 512 bytes) is unaffected.

Only glibc has M_MMAP_THRESHOLD, and an operator who set glibc's MALLOC_MMAP_THRESHOLD_
keeps that choice.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
from collections.abc import Mapping

__all__ = ["ENV_OVERRIDE", "MMAP_THRESHOLD_BYTES", "fix_mmap_threshold"]

log = logging.getLogger("rgd.malloc_tuning")

M_MMAP_THRESHOLD = -3  # <malloc.h>
MMAP_THRESHOLD_BYTES = 64 * 1024
ENV_OVERRIDE = "MALLOC_MMAP_THRESHOLD_"  # glibc's tunable: when set, glibc already applied it


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES, environ: Mapping[str, str] = os.environ) -> bool:
    """Set glibc malloc's mmap threshold once, at a process's start; whether it was set."""
    if environ.get(ENV_OVERRIDE) or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, threshold))
    if not done:
        log.warning("mallopt(M_MMAP_THRESHOLD, %d) refused; malloc keeps its default", threshold)
    return done
