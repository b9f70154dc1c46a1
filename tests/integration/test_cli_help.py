"""Every command's --help answers (the README sends people there), as a user would call it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rgd.config.settings import FIELDS, HELP, env_name

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def _help(*argv: str) -> str:
    proc = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == "", proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("command, expected", [
    ([], ["run", "up", "report", "whatif", "--log-level"]),
    (["up"], ["--daemons", "--duration", "--quota", "--workdir", "--no-report"]),
    (["report"], ["PATH_OR_URI", "--out", "--master"]),
    (["whatif"], ["LOGS", "--out", "--set", "GROUP.FIELD=VALUE", "--strategy", "publishRateInMsgs",
                  "replicationDispatchRateInBytes", "suppression", "Exit code 2"]),
])
def test_rgd_help(command: list[str], expected: list[str]) -> None:
    out = _help(str(BIN / "rgd"), *command)
    for word in expected:
        assert word in out, word


def test_rgd_run_help_lists_every_setting() -> None:
    out = _help(str(BIN / "rgd"), "run")
    flat = " ".join(out.split())
    for name in FIELDS:
        assert "--" + name.replace("_", "-") in out, name
        assert env_name(name) in out, name
        assert " ".join(HELP.get(name, "").split()) in flat, name  # verbatim, a literal % included


def test_sim_help() -> None:
    out = _help(sys.executable, "-m", "sim")
    for word in ("SCENARIO", "--strategy", "--out"):
        assert word in out, word


def test_sim_fuzz_help() -> None:
    out = _help(sys.executable, "-m", "sim", "fuzz")
    for word in ("--count", "--seed", "--strategy", "--out", "--jobs", "--hindsight"):
        assert word in out, word
    assert "fuzz" in _help(sys.executable, "-m", "sim")
