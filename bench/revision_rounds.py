"""A benchmark's measurement in this tree and in a baseline revision's, rounds alternating.

The in-process benchmarks (bench_own_reports.py, bench_limiter.py) judge a change beside the
code it replaces, in the same run: this machine's speed drifts by more than the changes they
measure from one minute to the next. Each round runs the script's hidden `--inner` mode in a
fresh interpreter that imports rgd from one tree (this repository, or the revision's `git
archive` in a temporary directory), the baseline's round first, and returns what it printed
as JSON on its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["REPO", "measure_rounds"]

REPO = Path(__file__).resolve().parents[1]
Measurement = dict[str, float]


def _run_tree(script: Path, tree: Path, inner_args: list[str]) -> Measurement:
    """The script's `--inner` measurement in a fresh interpreter importing rgd from `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(script), "--inner", *inner_args],
                         check=True, capture_output=True, text=True, env=env, cwd=tree, timeout=600)
    result: Measurement = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measure_rounds(script: Path, inner_args: list[str], rounds: int,
                   baseline: str | None) -> tuple[list[Measurement], list[Measurement]]:
    """(this tree's measurements, the baseline's: empty without one), `rounds` of each."""
    ours: list[Measurement] = []
    theirs: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="rgd-bench-baseline-") as tmp:
        base_tree = None
        if baseline:
            archive = subprocess.run(["git", "archive", baseline, "rgd"], check=True, capture_output=True,
                                     cwd=REPO).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            base_tree = Path(tmp)
        for _ in range(rounds):
            if base_tree is not None:
                theirs.append(_run_tree(script, base_tree, inner_args))
            ours.append(_run_tree(script, REPO, inner_args))
    return ours, theirs
