"""docs/operating/fairness-gauges.md's worked example, checked against the gauges' code.

The console examples of docs/operating/{shadow-mode,replication-rates}.md are run against a
real daemon, with every other page's, by tests/deploy/test_doc_examples.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rgd.api.fairness_gauges import fairness

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operating"


def test_fairness_page_worked_example() -> None:
    table = [ln for ln in (DOCS / "fairness-gauges.md").read_text().splitlines()
             if re.match(r"^\| [\d.]+, [\d.]+ \|", ln)]
    assert len(table) == 4
    for row in table:
        cells = [c.strip() for c in row.strip("|").split("|")]
        admitted, demand = ([float(v) for v in cells[i].split(",")] for i in (0, 1))
        quota, jain, error, utilization = map(float, cells[2:])
        got = fairness(admitted, demand, quota)
        assert got == pytest.approx((jain, error, utilization), abs=5e-4), row
