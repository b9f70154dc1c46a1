"""The examples of docs/operating/{shadow-mode,replication-rates,fairness-gauges}.md, run
against a real daemon (real broker, real HTTP): each `$ curl` line of a console block is
sent to a daemon started with the page's YAML config, and its output is compared with the
lines under it (JSON by value; /metrics piped through grep line by line). The fairness
page's worked example is checked against the gauges' code."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import orjson
import pytest
import yaml

from rgd.api.fairness_gauges import fairness
from tests.support.live import base_url

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operating"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def blocks(page: str, lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall((DOCS / page).read_text()) if kind == lang]


def console_examples(page: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for every `$ ` line of the page's console blocks."""
    out: list[tuple[str, list[str]]] = []
    for block in blocks(page, "console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            else:
                out[-1][1].append(line)
    return out


async def run_command(http, daemon, command: str) -> list[str]:
    """`curl -s [-X M] URL [-d BODY] [| grep [-E] PATTERN]...` against `daemon`."""
    stages = [shlex.split(s) for s in command.split(" | ")]
    curl = stages[0]
    assert curl[:2] == ["curl", "-s"], command
    args, method, body = curl[2:], "GET", None
    url = next(a for a in args if a.startswith("localhost:"))
    if "-d" in args:
        body, method = args[args.index("-d") + 1].encode(), "POST"
    path = url.removeprefix("localhost:8080")
    async with http.request(method, base_url(daemon) + path, data=body) as r:
        text = await r.text()
    lines = text.splitlines()
    for stage in stages[1:]:
        assert stage[0] == "grep", command
        if stage[1] == "-E":
            pattern = re.compile(stage[2])
            lines = [ln for ln in lines if pattern.search(ln)]
        else:
            lines = [ln for ln in lines if stage[1] in ln]
    return lines


def same(expected: list[str], got: list[str]) -> bool:
    if len(expected) == 1 and expected[0].startswith("{"):
        return len(got) == 1 and orjson.loads(expected[0]) == orjson.loads(got[0])
    return expected == got


async def run_page(page: str, make_daemon, http, tmp_path: Path, **overrides) -> None:
    [config_text] = blocks(page, "yaml")
    doc = yaml.safe_load(config_text)
    config = tmp_path / "groups.yaml"
    config.write_text(config_text)
    settings = {**doc.get("daemon", {}), **overrides}
    daemon = await make_daemon("docs", config=config, strategy="static", **settings)
    examples = console_examples(page)
    assert examples
    for command, expected in examples:
        got = await run_command(http, daemon, command)
        assert same(expected, got), f"{page}: {command}\n expected {expected}\n got      {got}"


async def test_shadow_mode_page(make_daemon, http, tmp_path):
    await run_page("shadow-mode.md", make_daemon, http, tmp_path)


async def test_replication_rates_page(make_daemon, http, tmp_path):
    await run_page("replication-rates.md", make_daemon, http, tmp_path)


def test_fairness_page_worked_example():
    table = [ln for ln in (DOCS / "fairness-gauges.md").read_text().splitlines()
             if re.match(r"^\| [\d.]+, [\d.]+ \|", ln)]
    assert len(table) == 4
    for row in table:
        cells = [c.strip() for c in row.strip("|").split("|")]
        admitted, demand = ([float(v) for v in cells[i].split(",")] for i in (0, 1))
        quota, jain, error, utilization = map(float, cells[2:])
        got = fairness(admitted, demand, quota)
        assert got == pytest.approx((jain, error, utilization), abs=5e-4), row
