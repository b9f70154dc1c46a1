"""rgd.client against clients/conformance/cases.json on a live daemon (real broker, real HTTP
on loopback). The Java client runs the same list: tests/integration/test_java_client.py."""

from __future__ import annotations

from tests.support.conformance import Harness, load_cases, mismatches, run_python_case


async def test_python_client_passes_every_conformance_case(make_daemon, tmp_path, seen):
    doc = load_cases()
    harness = Harness(make_daemon, tmp_path, seen, doc["daemon"])
    await harness.start()
    failures: list[str] = []
    for case in doc["cases"]:
        result, requests = await harness.run(case, run_python_case)
        failures += mismatches(case, result, requests)
    assert not failures, "\n".join(failures)
