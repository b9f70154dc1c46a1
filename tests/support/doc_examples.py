"""The documentation's examples, read from the pages: the convention docs/contributing/examples.md describes.

A page's runnable examples are its fenced `console` blocks: `$ command` lines (a line
ending in `\\` continues on the next), each followed by the output it prints. A fenced
block with a `title="NAME"` (any language) is a file the reader saves as NAME before the
commands that follow. The blocks of one page run in order, in one fresh directory, as one
reader would type them; `rgd run` with no output under it (the daemon, which runs until
Ctrl-C) is started in the background and waited for until /readyz answers 200. The page's
daemon is on port 8080; the test rewrites that address, in commands and saved files, to
the free port its daemon listens on.

Output is compared after normalising only what differs from one run to the next:
- ports: `HOST:PORT` becomes `HOST:<port>` (the test's daemon listens on a free port, the
  embedded broker on another), on both sides;
- hostnames: the machine's hostname (the daemon id by default) is read as `my-laptop`;
- times: the values of JSON keys that measure time or grow with it (TIME_KEYS) are compared
  by JSON type only; in plain text, durations (`12 ms`, `1.5 s`) and UTC stamps.
Everything else must match: an expected output that parses as JSON is compared as JSON
(same keys, same values), any other output line by line.

Blocks that cannot run in a test (kubectl against a cluster) are written as `bash` blocks
preceded by `<!-- not-run: why -->`; the test checks they parse (`bash -n`) and that every
`kubectl ... -k DIR` names a directory kustomize renders. A `text` block after
`<!-- output-of: COMMAND (...) -->` is a sample of a long run's output whose figures are
measured: the test that runs COMMAND compares its lines by `shape_of`.

Pure functions only: tests/deploy/test_doc_examples.py runs the pages, tests/unit/
test_doc_examples_reading.py checks this module on small inputs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "HOSTNAME_SHOWN", "NOT_RUN", "OUTPUT_OF", "TIME_KEYS", "Command", "FileBlock", "NotRunBlock", "Page",
    "compare_output", "normalise_text", "output_sample", "read_page", "shape_of",
]

HOSTNAME_SHOWN = "my-laptop"  # how the pages write the machine's hostname (the default daemon id)
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(?P<why>[^>]*?)\s*-->\s*$")
# A `text` block of a long command's output whose figures are measurements (rgd up's
# summary): the test that runs the command holds its lines to the sample's shape (shape_of).
OUTPUT_OF = re.compile(r"<!--\s*output-of:\s*(?P<command>[^(>]*?)\s*(\(|-->)")

# JSON keys whose values measure time or grow with it: compared by JSON type only.
TIME_KEYS = frozenset({
    "report_age_seconds",  # seconds since a peer's last report
    "reports",  # reports received so far: one a tick
    "ticks",  # ticks since the start
    "retry_after_ms",  # when a denied ask will pass, from the bucket's level at that instant
    "seconds_left",  # /readyz: until the lease ends, counted from the last acknowledgement
})

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>.*)$")
_TITLE = re.compile(r'title="(?P<title>[^"]+)"')
_PORT = re.compile(r"\b(127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1\]):\d{2,5}\b")
_DURATION = re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s)\b")
_UTC_STAMP = re.compile(r"\b\d{8}T\d{6}Z\b")


@dataclass(frozen=True)
class Command:
    """A `$ command` line of a console block and the output shown under it."""

    line: int  # 1-based line of the `$` in the page
    text: str  # the command, continuation lines joined as the shell joins them
    expected: str  # the output lines shown under it, joined by newlines


@dataclass(frozen=True)
class FileBlock:
    """A fenced block with `title="NAME"`: a file the reader saves before what follows."""

    line: int
    name: str
    content: str


@dataclass(frozen=True)
class NotRunBlock:
    """A shell block marked `<!-- not-run: why -->`."""

    line: int
    why: str
    content: str


@dataclass
class Page:
    path: Path
    steps: list[Command | FileBlock] = field(default_factory=list)
    not_run: list[NotRunBlock] = field(default_factory=list)
    unmarked_shell: list[int] = field(default_factory=list)  # lines of shell blocks neither console nor marked


def _commands(block: list[str], first_line: int) -> list[Command]:
    out: list[Command] = []
    i = 0
    while i < len(block):
        line = block[i]
        if not line.startswith("$ "):
            if out or line.strip():
                raise ValueError(f"line {first_line + i}: a console block starts with '$ command', got {line!r}")
            i += 1
            continue
        start = i
        parts = [line[2:]]
        while parts[-1].endswith("\\") and i + 1 < len(block):
            i += 1
            parts.append(block[i].removeprefix("> "))
        i += 1
        output: list[str] = []
        while i < len(block) and not block[i].startswith("$ "):
            output.append(block[i])
            i += 1
        text = "\n".join(parts)
        out.append(Command(first_line + start, text, "\n".join(output).rstrip("\n")))
    return out


def read_page(path: Path, text: str | None = None) -> Page:
    """Every example of one Markdown page, in page order."""
    lines = (path.read_text() if text is None else text).splitlines()
    page = Page(path)
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m["indent"]), m["fence"], m["info"].strip()
        lang = info.split()[0] if info else ""
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        body = [ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[i + 1:j]]
        before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marked = NOT_RUN.search(before)
        title = _TITLE.search(info)
        if lang == "console":
            if marked:
                page.not_run.append(NotRunBlock(i + 1, marked["why"], "\n".join(
                    ln[2:] for ln in body if ln.startswith("$ "))))
            else:
                page.steps.extend(_commands(body, i + 2))
        elif title:
            page.steps.append(FileBlock(i + 1, title["title"], "\n".join(body) + "\n"))
        elif lang in ("bash", "sh", "shell"):
            if marked:
                page.not_run.append(NotRunBlock(i + 1, marked["why"], "\n".join(body)))
            else:
                page.unmarked_shell.append(i + 1)
        i = j + 1
    return page


def normalise_text(text: str, hostname: str) -> str:
    """Ports, the hostname, durations and UTC stamps made the same on both sides."""
    if hostname:
        text = re.sub(rf"\b{re.escape(hostname)}\b", HOSTNAME_SHOWN, text)
    text = _PORT.sub(lambda m: f"{m[1]}:<port>", text)
    text = _UTC_STAMP.sub("<utc>", text)
    return _DURATION.sub("<duration>", text)


def _json_diff(expected: Any, actual: Any, where: str, key: str = "") -> list[str]:
    if key in TIME_KEYS:
        same = type(expected) is type(actual) or (
            isinstance(expected, (int, float)) and isinstance(actual, (int, float))
            and not isinstance(expected, bool) and not isinstance(actual, bool))
        return [] if same else [f"{where}: expected {type(expected).__name__}, got {actual!r}"]
    if isinstance(expected, dict) and isinstance(actual, dict):
        if list(expected) != list(actual):
            return [f"{where}: keys {list(expected)} on the page, {list(actual)} here"]
        return [d for k in expected for d in _json_diff(expected[k], actual[k], f"{where}.{k}", k)]
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in _json_diff(e, a, f"{where}[{i}]", key)]
    if expected == actual and type(expected) is type(actual):
        return []
    return [f"{where}: {json.dumps(expected)[:200]} on the page, {json.dumps(actual)[:200]} here"]


def _as_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON


_NOT_JSON = object()


def compare_output(expected: str, actual: str, hostname: str) -> list[str]:
    """Where `actual` (what the command printed) departs from `expected` (what the page
    shows); empty when they agree up to the normalisation above."""
    expected_n = normalise_text(expected, hostname).strip("\n")
    actual_n = normalise_text(actual, hostname).strip("\n")
    want = _as_json(expected_n) if expected_n.lstrip().startswith(("{", "[")) else _NOT_JSON
    if want is not _NOT_JSON:
        got = _as_json(actual_n)
        if got is _NOT_JSON:
            return [f"the page shows JSON, the command printed: {actual_n[:300]!r}"]
        return _json_diff(want, got, "$")
    want_lines, got_lines = expected_n.splitlines(), actual_n.splitlines()
    diffs: list[str] = []
    for n, (w, g) in enumerate(zip(want_lines, got_lines), 1):
        if w.rstrip() != g.rstrip():
            want_json, got_json = _as_json(w), _as_json(g)
            if want_json is not _NOT_JSON and got_json is not _NOT_JSON and w.lstrip().startswith(("{", "[")):
                diffs += [f"line {n}: {d}" for d in _json_diff(want_json, got_json, "$")]
            else:
                diffs.append(f"line {n}: {w!r} on the page, {g!r} here")
    if len(want_lines) != len(got_lines):
        diffs.append(f"{len(want_lines)} lines on the page, {len(got_lines)} here: {actual_n[-500:]!r}")
    return diffs


def output_sample(text: str, command: str) -> str:
    """The `text` block marked `<!-- output-of: COMMAND ... -->` in a page."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = OUTPUT_OF.search(line)
        if m and m["command"] == command:
            start = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```")) + 1
            end = next(j for j in range(start, len(lines)) if lines[j].startswith("```"))
            return "\n".join(lines[start:end])
    raise LookupError(f"no block marked output-of: {command}")


def shape_of(text: str) -> list[str]:
    """Lines with every number and absolute path replaced: what a measured sample and a
    real run must share (the same lines, words and units; the figures may differ)."""
    text = _UTC_STAMP.sub("<utc>", text)
    text = re.sub(r"(?<![\w.])/\S+", "<path>", text)
    return [re.sub(r"\d+(?:\.\d+)?", "<n>", line).rstrip() for line in text.splitlines()]
