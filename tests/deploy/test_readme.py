"""The README's HTTP examples, run against a fresh daemon started as the README says.

The README shows a real transcript: each `curl` line is followed by `# STATUS [BODY]`.
Every answer must have that status and the same shape: the same keys, booleans,
strings and nulls, and numbers of the same kind (int or float). Numbers are not
compared by value (bucket levels and retry times depend on timing), nor are the
broker's address and the daemon id (the hostname).
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from rgd.transport.embedded_broker import free_port

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
VOLATILE = {"broker_url", "daemon"}  # strings that differ per run (the daemon id is the hostname)
ID_LISTS = {"members"}  # lists of daemon ids
ID_KEYED = {"daemons"}  # objects keyed by daemon id


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def _transcript() -> list[tuple[list[str], int, Any]]:
    """(curl argv, expected status, expected body or None) in README order."""
    lines = _blocks(_section("HTTP API"), "bash")[1].splitlines()
    steps = []
    for i, line in enumerate(lines):
        if line.startswith("curl "):
            status, _, body = lines[i + 1].removeprefix("# ").partition(" ")
            steps.append((shlex.split(line), int(status), json.loads(body) if body else None))
    return steps


def _request(argv: list[str], port: int) -> tuple[int, bytes]:
    method, data, url = None, None, None
    args = iter(argv[1:])
    for arg in args:
        if arg == "-s":
            continue
        if arg == "-X":
            method = next(args)
        elif arg == "-d":
            data = next(args).encode()
        else:
            url = arg
    assert url is not None and url.startswith("localhost:8080/"), argv
    req = urllib.request.Request(f"http://127.0.0.1:{port}" + url.removeprefix("localhost:8080"), data=data,
                                 method=method or ("POST" if data is not None else "GET"))
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def same_shape(expected: Any, actual: Any, where: str = "$", key: str = "") -> list[str]:
    """Where `actual` departs from the README's `expected` (empty: same shape)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected an object, got {actual!r}"]
        if key in ID_KEYED:
            if len(expected) != len(actual):
                return [f"{where}: {len(expected)} entries in the README, {len(actual)} here"]
            pairs = zip(expected.values(), actual.values())
            return [p for i, (e, a) in enumerate(pairs) for p in same_shape(e, a, f"{where}[{i}]")]
        if set(expected) != set(actual):
            return [f"{where}: keys {sorted(expected)} in the README, {sorted(actual)} here"]
        return [p for k in expected for p in same_shape(expected[k], actual[k], f"{where}.{k}", k)]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where}: expected {len(expected)} items, got {actual!r}"]
        if key in ID_LISTS:
            return [f"{where}: not a list of ids: {actual!r}"] if not all(isinstance(a, str) for a in actual) else []
        return [p for i, (e, a) in enumerate(zip(expected, actual)) for p in same_shape(e, a, f"{where}[{i}]")]
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        ok = type(actual) is type(expected)
        return [] if ok else [f"{where}: expected a {type(expected).__name__}, got {actual!r}"]
    if key in VOLATILE:
        return [] if type(actual) is type(expected) else [f"{where}: expected a string, got {actual!r}"]
    if actual == expected and type(actual) is type(expected):
        return []
    return [f"{where}: {expected!r} in the README, {actual!r} here"]


def test_same_shape_sees_differences() -> None:
    readme = {"allowed": True, "n": 10, "rate": 20.0, "group": "gold", "members": ["my-laptop"]}
    assert same_shape(readme, {"allowed": True, "n": 12, "rate": 22.0, "group": "gold", "members": ["vm"]}) == []
    assert same_shape(readme, {**readme, "allowed": False})
    assert same_shape(readme, {**readme, "n": 12.0})
    assert same_shape(readme, {**readme, "extra": 1})
    assert same_shape(readme, {**readme, "group": None})


def test_readme_http_examples_answer_as_shown(tmp_path: Path) -> None:
    config = _blocks(_section("Configuration file"), "yaml")[0]
    (tmp_path / "rgd.yaml").write_text(config)
    start = _blocks(_section("HTTP API"), "bash")[0].strip()
    assert start == ".venv/bin/rgd run --config rgd.yaml", start
    port = free_port()
    argv = [str(Path(sys.executable).parent / "rgd"), *shlex.split(start)[1:], "--listen", f"127.0.0.1:{port}"]
    daemon = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    problems: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if _request(["curl", "localhost:8080/readyz"], port)[0] == 200:
                    break
            except OSError:
                pass
            assert daemon.poll() is None and time.monotonic() < deadline, "the daemon never got ready"
            time.sleep(0.2)
        steps = _transcript()
        assert len(steps) >= 8
        for argv_, status, body in steps:
            time.sleep(2.0)  # a person typing: the bucket (1 s of the limit) is full again
            got_status, raw = _request(argv_, port)
            got = json.loads(raw) if raw else None
            if got_status != status:
                problems.append(f"{shlex.join(argv_)}: status {got_status}, README says {status} ({raw[:300]!r})")
            problems += [f"{shlex.join(argv_)}: {p}" for p in same_shape(body, got)]
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(30)
        log = daemon.stdout.read().decode(errors="replace")
    assert problems == [], "\n".join(problems)
    assert code == 0, log[-3000:]
