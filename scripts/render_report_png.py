"""Render report.html in headless Chromium: a PNG screenshot plus proof that the charts are there.

Usage: python scripts/render_report_png.py OUT_DIR/report.html [shot.png]

Two checks, both offline (the page has no external resource, and Chromium
runs with networking features off):
- `--dump-dom` after load: count the <svg>, <polyline> and <path> elements;
- `--screenshot`: the PNG of the report must be far larger than the PNG of an
  empty page of the same size (a blank or failed render compresses to almost
  nothing), so no image library is needed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--disable-dev-shm-usage"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(exe: str, args: list[str], profile: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, timeout=180)


def render(exe: str, html: Path, png: Path, width: int = 1280, height: int = 2000) -> dict:
    """Screenshot `html` into `png`; returns element counts and the size ratio against a blank page."""
    html, png = Path(html).resolve(), Path(png).resolve()
    with tempfile.TemporaryDirectory() as profile, tempfile.TemporaryDirectory() as tmp:
        url = html.as_uri()
        dom = _run(exe, ["--dump-dom", url], profile).stdout.decode("utf-8", "replace")
        _run(exe, [f"--screenshot={png}", f"--window-size={width},{height}", url], profile)
        blank_html = Path(tmp) / "blank.html"
        blank_html.write_text("<!doctype html><html><body></body></html>")
        blank_png = Path(tmp) / "blank.png"
        _run(exe, [f"--screenshot={blank_png}", f"--window-size={width},{height}", blank_html.as_uri()], profile)
        blank = blank_png.stat().st_size if blank_png.exists() else 0
    size = png.stat().st_size if png.exists() else 0
    return {
        "svg": len(re.findall(r"<svg\b", dom)),
        "polylines": len(re.findall(r"<polyline\b", dom)),
        "paths": len(re.findall(r"<path\b", dom)),
        "png_bytes": size,
        "blank_png_bytes": blank,
        "size_ratio": (size / blank) if blank else 0.0,
    }


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    exe = find_chromium()
    if exe is None:
        print("chromium not found (apt-get install chromium)", file=sys.stderr)
        return 2
    html = Path(argv[0])
    png = Path(argv[1]) if len(argv) > 1 else html.with_suffix(".png")
    result = render(exe, html, png)
    print(json.dumps(result, indent=2))
    ok = result["svg"] > 0 and result["polylines"] > 0 and result["size_ratio"] > 3
    print("OK" if ok else "FAILED: charts missing or blank render", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
