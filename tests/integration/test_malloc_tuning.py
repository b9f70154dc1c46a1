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
from rgd.daemon.malloc_tuning import fix_mmap_threshold
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

    from rgd import cli
    from rgd.daemon import cluster_process

    run_src = inspect.getsource(cli.cmd_run)
    assert run_src.index("fix_mmap_threshold()") < run_src.index("run_loop(")
    main_src = inspect.getsource(cluster_process.main)
    assert main_src.index("fix_mmap_threshold()") < main_src.index("run_loop(")
