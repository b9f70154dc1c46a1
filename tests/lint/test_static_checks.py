"""The static checks, as CI runs them: ruff, mypy (strict on rgd/) and the import layers.

Each tool runs in a subprocess of this interpreter, from the repository root, with its
configuration from pyproject.toml ([tool.ruff], [tool.mypy], [tool.importlinter]); a
failure shows the tool's own report. The tools are in the `dev` extra.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Everything with Python in it; ruff's exclusions (the generated *_pb2 modules) are in pyproject.toml.
SOURCE_DIRS = ["rgd", "sim", "bench", "scripts", "tests"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _report(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def test_ruff_finds_nothing():
    proc = _run("-m", "ruff", "check", "--no-cache", *SOURCE_DIRS)
    assert proc.returncode == 0, _report(proc)


def test_mypy_strict_on_rgd_finds_nothing():
    # files, strictness and the per-module overrides: [tool.mypy] in pyproject.toml
    proc = _run("-m", "mypy")
    assert proc.returncode == 0, _report(proc)


def test_import_layers_are_kept():
    # `lint-imports` (import-linter's console script) has no `python -m` form: call what it calls.
    proc = _run("-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())")
    assert proc.returncode == 0, _report(proc)
