"""The documentation site builds with `mkdocs build --strict`: every page in the nav, every
link and included file resolves (docs/contributing/tests.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert (site / "index.html").is_file() and (site / "getting-started" / "index.html").is_file()
    pages = {p.relative_to(ROOT / "docs").with_suffix("") for p in (ROOT / "docs").rglob("*.md")}
    for page in pages:  # every page is built (strict fails on pages missing from the nav only as info)
        built = site / page / "index.html" if page.name != "index" else site / page.parent / "index.html"
        assert built.is_file(), f"docs/{page}.md was not built"
