"""Helpers for tests against live daemons: a groups file, a daemon's URL, polling with a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from rgd.daemon.wiring import Daemon

__all__ = ["base_url", "wait_for", "wait_until_sync", "write_config"]


def write_config(path: Path, groups: dict, namespaces: dict | None = None, tenants: dict | None = None) -> Path:
    doc = {"resourcegroups": groups, "namespaces": namespaces or {}, "tenants": tenants or {}}
    path.write_text(yaml.safe_dump(doc))
    return path


def base_url(d: Daemon) -> str:
    return f"http://127.0.0.1:{d.bound_port}"


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> None:
    """Poll `predicate` on the running loop until it holds; fail after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


def wait_until_sync(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05,
                    what: str = "condition") -> None:
    """`wait_for` for code without an event loop (threads, subprocesses)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(interval)
