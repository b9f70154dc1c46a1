"""The Java client (clients/java, dev.rgd.client.RgdClient): built with javac alone, its unit
tests, the conformance list against a live daemon (the same list and judge as rgd.client's,
tests/support/conformance.py) and the docs' producer wrapper, compiled and run.

Needs a JDK (scripts/system-deps.sh installs openjdk-17-jdk-headless when javac is missing).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest

from rgd.devtools.java_client import compile_java_client, java_command
from tests.support.conformance import REPO, Harness, java_runner, load_cases, mismatches
from tests.support.live import write_config

DOC = REPO / "docs" / "clients" / "java.md"
UNIT_TESTS = 13  # the tests UnitTests.main runs: a test that disappears fails here


def _doc_example(out: Path) -> Path:
    """The docs' producer wrapper, as written, in a file named after its class."""
    blocks = re.findall(r"```java\n(.*?)```", DOC.read_text(), flags=re.S)
    code = next(b for b in blocks if "public final class RateLimitedSender" in b)
    path = out / "RateLimitedSender.java"
    path.write_text(code)
    return path


@pytest.fixture(scope="module")
def java_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """main, test and bench sources and the docs' example, compiled for Java 17 with every lint
    warning an error."""
    work = tmp_path_factory.mktemp("java")
    return compile_java_client(work / "classes", extra=(_doc_example(work),))


def test_unit_tests_pass(java_classes: Path) -> None:
    proc = subprocess.run(java_command(java_classes, "dev.rgd.client.UnitTests"), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == f"{UNIT_TESTS} passed, 0 failed"
    assert len([x for x in lines if x.startswith("ok ")]) == UNIT_TESTS


async def test_java_client_passes_every_conformance_case(make_daemon, tmp_path, seen, java_classes):
    doc = load_cases()
    harness = Harness(make_daemon, tmp_path, seen, doc["daemon"])
    await harness.start()
    proc = await asyncio.create_subprocess_exec(
        *java_command(java_classes, "dev.rgd.client.conformance.ConformanceRunner"),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=(tmp_path / "runner.err").open("wb"),
        limit=1 << 24)  # a result line holds every answer of its case: 2500 in the longest
    failures: list[str] = []
    try:
        runner = java_runner(proc)
        for case in doc["cases"]:
            result, requests = await harness.run(case, runner)
            failures += mismatches(case, result, requests)
        assert proc.stdin is not None
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 30) == 0, (tmp_path / "runner.err").read_text()[-3000:]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert not failures, "\n".join(failures)


async def test_docs_producer_wrapper_runs(make_daemon, tmp_path, seen, java_classes):
    config = write_config(tmp_path / "groups.yaml", {"gold": {"publishRateInMsgs": 1000, "publishRateInBytes": -1}},
                          namespaces={"acme/orders": "gold"})
    d = await make_daemon(config=config, strategy="static")
    proc = await asyncio.create_subprocess_exec(
        *java_command(java_classes, "RateLimitedSender", f"http://127.0.0.1:{d.bound_port}"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-3000:]
    match = re.fullmatch(r"50 of 50 sent; (\d+) HTTP request\(s\)", out.decode().strip())
    assert match, out.decode()
    assert sum(seen) == 50 and len(seen) == int(match.group(1))  # every ask reached the daemon, batched
    assert d.limiter.states[("gold", "publish")].total_admitted_messages == 50
