"""bench/profile_receive.py runs and prints its figures (a small size: the figures are the
benchmark's to judge, this only keeps the script from rotting)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "profile_receive.py"


def test_profile_receive_prints_phases_and_the_collector_with_and_without_pacing() -> None:
    for extra in ([], ["--gc-pacing"]):
        out = subprocess.run([sys.executable, str(BENCH), "--rounds", "4", "--peers", "3", "--groups", "60", "--gc",
                              *extra], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert "rounds 2..: least receive" in out.stdout
        assert "garbage collector, rounds 2..3: generation 0:" in out.stdout
        assert ("gc pacing after each tick" in out.stdout) == bool(extra)
