"""rgd run's fixed mmap threshold: large buffers go back to the system when freed."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

# Counts the blocks malloc has mmapped (mallinfo2, glibc 2.33+) around one allocation in a
# fresh interpreter: 200 KB after a 1 MB block was freed (glibc's default then raises its
# threshold to 1 MB, so the 200 KB come from the heap and its freed space stays resident).
PROBE = r"""
import ctypes, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                              "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
from rgd.malloc_tuning import fix_mmap_threshold
fixed = fix_mmap_threshold() if sys.argv[1] == "fix" else False
big = bytearray(1 << 20)
del big
before = libc.mallinfo2().hblks
after_big_freed = bytearray(200_000)
print(fixed, libc.mallinfo2().hblks - before)
"""


def _probe(mode: str, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=environ,
                         check=True, timeout=60)
    return out.stdout.split()


def test_fixed_threshold_mmaps_what_the_default_keeps_in_the_heap() -> None:
    assert _probe("default") == ["False", "0"]
    assert _probe("fix") == ["True", "1"]


def test_an_operators_malloc_setting_is_kept() -> None:
    """glibc applied MALLOC_MMAP_THRESHOLD_ itself (here 1 MiB): rgd does not override it."""
    assert _probe("fix", MALLOC_MMAP_THRESHOLD_=str(1 << 20)) == ["False", "0"]


def test_rgd_run_and_the_cluster_process_set_it() -> None:
    """Both entry points call it before starting anything (the serving process only relays asks)."""
    import inspect

    from rgd import cli, cluster_process

    run_src = inspect.getsource(cli.cmd_run)
    assert run_src.index("fix_mmap_threshold()") < run_src.index("_run_loop(")
    main_src = inspect.getsource(cluster_process.main)
    assert main_src.index("fix_mmap_threshold()") < main_src.index("_run_loop(")


# Threads that each allocate (glibc gives a new thread its own arena while under the limit);
# malloc_stats() then prints one "Arena N:" block per arena to stderr.
ARENAS = r"""
import ctypes, sys, threading
from rgd.malloc_tuning import limit_arenas
limited = limit_arenas() if sys.argv[1] == "limit" else False
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
def work():
    for _ in range(100):
        libc.free(ctypes.c_void_p(libc.malloc(4096)))
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(limited, flush=True)
libc.malloc_stats()
"""


def _arenas(mode: str, **env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env
    out = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True, text=True, env=environ,
                         check=True, timeout=60)
    return out.stdout.strip(), out.stderr.count("Arena ")


def test_one_arena_for_every_thread_with_the_cluster_thread() -> None:
    """rgd run --cluster-thread: the cluster thread's allocations share the main arena instead
    of keeping free space of their own resident (rgd/malloc_tuning.py)."""
    flag, default = _arenas("default")
    assert flag == "False" and default > 1
    assert _arenas("limit") == ("True", 1)
    assert _arenas("limit", MALLOC_ARENA_MAX="2") == ("False", 2)  # an operator's setting is kept


def test_rgd_run_limits_arenas_before_the_cluster_thread_starts() -> None:
    import inspect

    from rgd import cli

    run_src = inspect.getsource(cli.cmd_run)
    assert run_src.index("limit_arenas()") < run_src.index("_run_loop(")
