"""The README is what a newcomer reads first: short, the two commands where .ci/run reads them,
a tour that runs (tests/deploy/test_doc_examples.py runs it against a real daemon), and links
into the docs that resolve."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _ci_command(n: int) -> str:
    """The line after `# N. `, read as .ci/run reads it (its own awk)."""
    awk = f'index($0, "# {n}. ") == 1 {{ getline; print; exit }}'
    return subprocess.run(["awk", awk, str(ROOT / "README.md")], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_readme_reads_in_ten_minutes() -> None:
    assert len(README.splitlines()) <= 300
    headings = re.findall(r"^## (.+)$", README, flags=re.M)
    for needed in ("When to use it rather than Pulsar's built-in resource groups", "How data flows",
                   "Two commands", "A five-minute tour", "Where next"):
        assert needed in headings, needed


def test_the_two_commands_are_where_ci_reads_them() -> None:
    showcase, suite = _ci_command(1), _ci_command(2)
    assert showcase.startswith("python3 -m venv .venv && ") and "--duration 60" in showcase
    assert ".venv/bin/rgd up --daemons 3" in showcase
    assert suite.startswith("python3 -m venv .venv && ") and suite.endswith("-m pytest -q -p no:cacheprovider")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "--duration 60/--duration 20" in ci  # the shortening .ci/run applies to command 1


def test_the_tour_is_a_run_of_console_blocks() -> None:
    from tests.support.doc_examples import Command, read_page

    page = read_page(ROOT / "README.md")
    commands = [s for s in page.steps if isinstance(s, Command)]
    assert commands[0].text == ".venv/bin/rgd run --config rgd.yaml"
    assert sum(c.text.startswith("curl ") for c in commands) >= 8
    assert page.unmarked_shell == []


def test_readme_links_resolve() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert missing == [], missing
