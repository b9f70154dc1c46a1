"""Every example in README.md and docs/, run as a reader would type it, against a real daemon.

The convention (docs/contributing/examples.md, tests/support/doc_examples.py): `console`
blocks are typed in page order in one fresh directory per page, titled blocks are saved as
files first, `rgd run` starts the page's daemon (on a free loopback port: `localhost:8080`
in a command is that port), and every command's output must be what the page shows, up to
ports, the hostname and times. A second apart, as a person types: the tour's token buckets
are full again between commands, as they are for a reader.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rgd.transport.embedded_broker import free_port
from tests.support.doc_examples import Command, FileBlock, Page, compare_output, read_page

ROOT = Path(__file__).resolve().parents[2]
# The README, the site's pages, and the two pages the site includes (docs/simulator.md, docs/benchmarks.md).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "sim" / "README.md",
         ROOT / "bench" / "README.md"]
DAEMON = re.compile(r"^(\.venv/bin/)?rgd run\b")
TYPING_PAUSE = 1.0  # seconds between commands, a person's pace
KUBECTL = Path(sys.executable).parent / "kubectl"


def _pages() -> list[Page]:
    return [read_page(p) for p in PAGES]


RUNNABLE = [p for p in _pages() if p.steps]


def _to_test_port(text: str, port: int) -> str:
    """The page's daemon address (port 8080, the default) as the test's daemon's."""
    return re.sub(r"\b(localhost|127\.0\.0\.1):8080\b", f"127.0.0.1:{port}", text)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _start_daemon(cmd: Command, cwd: Path, env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["bash", "-c", f"exec {cmd.text}"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while not _ready(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.stdout.read().decode(errors="replace") if proc.poll() is not None else ""
            proc.kill()
            raise AssertionError(f"line {cmd.line}: `{cmd.text}` never got ready on port {port}: {out[-2000:]}")
        time.sleep(0.2)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> str:
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as the page tells the reader
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    return proc.stdout.read().decode(errors="replace") if proc.stdout else ""


@pytest.mark.parametrize("page", RUNNABLE, ids=[str(p.path.relative_to(ROOT)) for p in RUNNABLE])
def test_page_examples_answer_as_shown(page: Page, tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    port = free_port()
    env = {**os.environ, "RGD_LISTEN": f"127.0.0.1:{port}", "COLUMNS": "100"}
    env.pop("RGD_ID", None)
    hostname = socket.gethostname()
    daemon: subprocess.Popen[bytes] | None = None
    problems: list[str] = []
    try:
        for step in page.steps:
            if isinstance(step, FileBlock):
                (tmp_path / step.name).write_text(_to_test_port(step.content, port))
                continue
            if DAEMON.match(step.text) and not step.expected:  # with output shown, it exits: run below
                assert daemon is None, f"line {step.line}: one daemon per page"
                daemon = _start_daemon(step, tmp_path, env, port)
                continue
            time.sleep(TYPING_PAUSE)
            command = _to_test_port(step.text, port)
            run = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, timeout=120)
            printed = run.stdout.decode(errors="replace") + run.stderr.decode(errors="replace")
            problems += [f"{page.path.name}:{step.line}: `{step.text}`: {d}"
                         for d in compare_output(step.expected, printed, hostname)]
    finally:
        log = _stop(daemon) if daemon else ""
    assert problems == [], "\n".join(problems) + ("\n-- daemon log tail:\n" + log[-1500:] if log else "")


def test_every_shell_block_runs_or_says_why_not() -> None:
    unmarked = [f"{p.path.relative_to(ROOT)}:{line}" for p in _pages() for line in p.unmarked_shell]
    assert unmarked == [], ("a bash/sh block is neither a `console` example (run by this test) nor marked "
                            "`<!-- not-run: why -->`: " + ", ".join(unmarked))


def test_blocks_that_cannot_run_still_parse_and_render(tmp_path: Path) -> None:
    blocks = [(p, b) for p in _pages() for b in p.not_run]
    assert blocks, "no not-run block found: the reader's parse is broken"
    rendered: set[str] = set()
    for page, block in blocks:
        where = f"{page.path.relative_to(ROOT)}:{block.line}"
        assert block.why, f"{where}: say why the block cannot run"
        check = subprocess.run(["bash", "-n"], input=block.content.encode(), capture_output=True)
        assert check.returncode == 0, f"{where}: not valid shell: {check.stderr.decode()}"
        for directory in re.findall(r"kubectl (?:apply|kustomize|delete)[^\n]*?-k ([\w./-]+)", block.content):
            if directory in rendered:
                continue
            assert (ROOT / directory).is_dir(), f"{where}: kubectl -k {directory}: no such directory"
            render = subprocess.run([str(KUBECTL), "kustomize", str(ROOT / directory)], capture_output=True,
                                    timeout=120)
            assert render.returncode == 0 and b"kind: DaemonSet" in render.stdout, (
                f"{where}: kubectl kustomize {directory} failed: {render.stderr.decode()[-1000:]}")
            rendered.add(directory)
