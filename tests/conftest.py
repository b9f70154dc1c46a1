"""Fixtures of every tier: a real pulsar-lite broker per test session, daemons on loopback.

Helpers (write_config, base_url, wait_for) are in tests/support/live.py; the fixtures
here are pytest's, so `pytest tests/unit` loads this file too (and starts nothing:
the broker starts only for a test that asks for it).

Every test gets its own report and config topics, so daemons of different
tests never hear each other even though they share the broker.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings as hypothesis_settings

from tests.support.live import wait_for

if TYPE_CHECKING:  # imported where used, so the unit tier does not load the daemon and Pulsar's client
    import aiohttp

    from rgd.daemon.wiring import Daemon
    from rgd.transport.embedded_broker import EmbeddedBroker

# Property tests draw the same examples on every run of the suite (derandomize): the suite
# is the gate every change must pass, and a property that fails on one draw in a thousand
# made a green tree red at random (once: a wrong model of the ten-message floor, found
# on CI only). Exploring is a separate, deliberate run with fresh draws:
#     HYPOTHESIS_PROFILE=explore .venv/bin/python -m pytest tests/test_batch_semantics.py ...
# and what it finds becomes an explicit example in the test.
hypothesis_settings.register_profile("gate", derandomize=True, print_blob=True)
hypothesis_settings.register_profile("explore", derandomize=False, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "gate"))


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedBroker:
    from rgd.transport.embedded_broker import start_or_join

    b = start_or_join(tmp_path_factory.mktemp("broker"))
    yield b
    b.stop()


@pytest.fixture
def topics() -> dict[str, str]:
    tag = uuid.uuid4().hex[:10]
    return {
        "topic": f"non-persistent://public/default/rgd-usage-{tag}",
        "config_topic": f"persistent://public/default/rgd-config-{tag}",
    }


DaemonFactory = Callable[..., Awaitable["Daemon"]]


@pytest.fixture
async def make_daemon(broker: EmbeddedBroker, topics: dict[str, str], tmp_path: Path) -> AsyncIterator[DaemonFactory]:
    from rgd.config.file import load_config
    from rgd.config.settings import Settings, validate
    from rgd.daemon.wiring import Daemon

    started: list[Daemon] = []

    async def factory(daemon_id: str = "d1", config: Path | None = None, ready: bool = True,
                      listen: str = "127.0.0.1:0", **overrides) -> Daemon:
        settings = Settings(
            id=daemon_id, listen=listen, pulsar_url=broker.url,
            log_dir=str(tmp_path / f"log-{daemon_id}"), data_dir=str(tmp_path / "data"),
            config=str(config or ""), **{**topics, **overrides},
        )
        validate(settings)
        d = Daemon(settings, load_config(config) if config else None)
        await d.start()
        started.append(d)
        if ready:
            await wait_for(lambda: d.readiness()[0], 15)
        return d

    yield factory
    for d in reversed(started):
        await d.stop()


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Asks per request, as the daemon's broker routes (/v1/acquire, /v1/usage) parsed them:
    what reached the daemon, counted on its side."""
    import rgd.api.broker

    counts: list[int] = []
    parse = rgd.api.broker.parse_body

    def counting(body: bytes):
        asks, is_batch = parse(body)
        counts.append(len(asks))
        return asks, is_batch

    monkeypatch.setattr(rgd.api.broker, "parse_body", counting)
    return counts


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        yield s
