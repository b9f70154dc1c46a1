"""The usage topic's receiving end (rgd.transport.session.PulsarSession) on the real broker: with
receives asked for ahead and acks in the background, reports still arrive complete and in
the order sent, and a session closes promptly with receives pending."""

from __future__ import annotations

import asyncio
import time

import pulsar

from rgd.config.settings import Settings
from rgd.transport.embedded_broker import EmbeddedBroker
from rgd.transport.session import ACK_EVERY, CLOSE_TIMEOUT, RECEIVE_AHEAD, PulsarSession


async def test_reports_arrive_complete_and_in_order(broker: EmbeddedBroker, topics: dict[str, str]) -> None:
    settings = Settings(id="t", pulsar_url=broker.url, **topics)
    session = PulsarSession(broker.url, settings, "rgd-t")
    await session.open()
    sent = 2 * ACK_EVERY + 3 * RECEIVE_AHEAD + 5  # several cumulative acks, several refills ahead
    client = pulsar.Client(broker.url)
    try:
        producer = client.create_producer(topics["topic"], batching_enabled=False)
        # Slowly enough for a non-persistent topic (it drops what a consumer has no room for),
        # the receives in between, as the daemon's receive loop runs them.
        got = []

        async def receive_all() -> None:
            while len(got) < sent:
                got.append(await session.receive_report())

        receiving = asyncio.create_task(receive_all())
        for i in range(sent):
            await asyncio.to_thread(producer.send, f"report {i}".encode(), properties={"i": str(i)})
        await asyncio.wait_for(receiving, 30)
        assert [r.data.decode() for r in got] == [f"report {i}" for i in range(sent)]
        assert [r.properties["i"] for r in got] == [str(i) for i in range(sent)]
        producer.close()
    finally:
        client.close()
        started = time.monotonic()
        await session.close()  # RECEIVE_AHEAD receives pending: cancelled, not waited for
        assert time.monotonic() - started < 2 * CLOSE_TIMEOUT + 1.0
    assert not session._receiving
