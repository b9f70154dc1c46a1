"""rgd_reports_lost_total counts reports peers published and we missed, nothing else.

A broker outage is not loss: no daemon publishes while it is down, so the
sequence numbers of those ticks must not turn up as gaps afterwards. Reports
that were published and did not reach us are counted, exactly. A report handed
to the client as the broker died may or may not have reached the topic: its
number stays used (reusing it could hide a report peers did fold), so a peer
counts it lost if it did not; those are at most the sender's failed publishes.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from rgd.config.file import load_config
from rgd.config.settings import Settings, validate
from rgd.daemon.wiring import Daemon
from rgd.transport.embedded_broker import start_or_join
from tests.support.live import wait_for, write_config


@pytest.fixture
def own_broker(tmp_path):
    b = start_or_join(tmp_path / "lost-broker")
    yield b
    b.stop()


async def start_pair(url: str, tmp_path: Path, topics: dict[str, str]) -> list[Daemon]:
    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 100}}, {"t/ns": "g"})
    out = []
    for name in ("a", "b"):
        s = validate(Settings(id=name, listen="127.0.0.1:0", pulsar_url=url, tick=0.2, ttl_ticks=30,
                              log_dir=str(tmp_path / f"log-{name}"), data_dir=str(tmp_path / "data"),
                              config=str(cfg), **topics))
        d = Daemon(s, load_config(cfg))
        await d.start()
        out.append(d)
    for d in out:
        await wait_for(lambda d=d: d.readiness()[0] and len(d.node.members()) == 2, 20)
    return out


def lost(d: Daemon) -> float:
    return d.metrics.reports_lost._value.get()


def failed(d: Daemon) -> float:
    return d.metrics.publish_errors._value.get()


async def test_a_broker_outage_is_not_counted_as_lost_reports(own_broker, tmp_path, topics) -> None:
    a, b = await start_pair(own_broker.url, tmp_path, topics)
    try:
        assert lost(a) == lost(b) == 0
        own_broker.process.send_signal(signal.SIGKILL)
        own_broker.process.wait()
        await wait_for(lambda: not a.connected and not b.connected, 30)
        seq_a, ticks_a = a.node.own.sequence, a.ticks
        await wait_for(lambda: a.ticks >= ticks_a + 10, 10)  # ten ticks without a broker
        assert a.node.own.sequence == seq_a  # nothing published, no number used
        restarted = start_or_join(tmp_path / "lost-broker", port=own_broker.port)
        try:
            await wait_for(lambda: a.connected and b.connected, 60)
            received = (a.metrics.reports_received._value.get(), b.metrics.reports_received._value.get())
            await wait_for(lambda: a.metrics.reports_received._value.get() >= received[0] + 5
                           and b.metrics.reports_received._value.get() >= received[1] + 5, 30)
            # Only a report in flight as the broker died can be missing: the ten ticks of the
            # outage used no number.
            assert lost(a) <= failed(b) and lost(b) <= failed(a), (lost(a), failed(b), lost(b), failed(a))
        finally:
            await a.stop()
            await b.stop()
            restarted.stop()
    finally:
        await a.stop()
        await b.stop()


async def test_reports_published_and_missed_are_counted_exactly(broker, tmp_path, topics) -> None:
    a, b = await start_pair(broker.url, tmp_path, topics)
    try:
        missed = 0
        deliver = a.inbox.put_nowait

        def drop_bs(msg) -> None:  # the topic loses every report of b's on its way to a
            nonlocal missed
            if msg.report.daemon_id == "b":
                missed += 1
            else:
                deliver(msg)

        # Dropped at delivery, not taken out of the inbox later: a folds reports many times
        # a tick (the react loop), so a thief polling the inbox would race it.
        a.inbox.put_nowait = drop_bs  # type: ignore[method-assign]
        await wait_for(lambda: missed >= 3, 10)  # three of b's reports dropped (a tick each)
        a.inbox.put_nowait = deliver  # type: ignore[method-assign]
        received = a.metrics.reports_received._value.get()
        await wait_for(lambda: a.metrics.reports_received._value.get() >= received + 3, 10)
        assert lost(a) == missed
    finally:
        await a.stop()
        await b.stop()
