"""Pulsar edges: the usage-report topic (non-persistent) and the config topic (persistent).

Thin async wrappers over the official client's `pulsar.asyncio`, so the rest of
the daemon sees bytes in and bytes out. Reconnection inside a session is the
client's job; the daemon's supervisor (daemon.py) recreates a session that
fails to open, with backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

import pulsar
import pulsar.asyncio as pulsar_aio

from rgd.config.settings import REPORT_COMPRESSIONS, Settings

log = logging.getLogger("rgd.transport")
# The C++ client logs through this logger at whatever level it allows; its INFO/DEBUG
# lines (every reconnect attempt) would drown the daemon's own log.
logging.getLogger("pulsar").setLevel(logging.WARNING)
CLOSE_TIMEOUT = 2.0  # seconds for each of the two close steps (PulsarSession.close)
# Receives asked for ahead of need, and messages between two (cumulative) acks: see
# PulsarSession.receive_report.
RECEIVE_AHEAD = 16
ACK_EVERY = 64
_UNCLOSED: list[Any] = []  # clients whose close hung (PulsarSession.close)


@dataclass(frozen=True)
class Received:
    data: bytes
    properties: dict[str, str]
    publish_timestamp_ms: int


def client_options(s: Settings) -> dict[str, Any]:
    """pulsar-client options from settings: auth token and TLS pass straight through."""
    opts: dict[str, Any] = {
        "operation_timeout_seconds": 10,
        "connection_timeout_ms": 3000,
        "logger": logging.getLogger("pulsar"),
    }
    token = s.pulsar_auth_token
    if s.pulsar_auth_token_file:
        with open(s.pulsar_auth_token_file) as fh:
            token = fh.read().strip()
    if token:
        opts["authentication"] = pulsar.AuthenticationToken(token)
    if s.pulsar_url.startswith("pulsar+ssl://") or s.pulsar_tls_trust_certs:
        opts["use_tls"] = s.pulsar_url.startswith("pulsar+ssl://")
        if s.pulsar_tls_trust_certs:
            opts["tls_trust_certs_file_path"] = s.pulsar_tls_trust_certs
        opts["tls_allow_insecure_connection"] = s.pulsar_tls_allow_insecure
        opts["tls_validate_hostname"] = s.pulsar_tls_validate_hostname
    return opts


class PulsarSession:
    """One client with the report producer, the report consumer and the config channel."""

    def __init__(self, url: str, settings: Settings, subscription: str) -> None:
        self.url = url
        self.settings = settings
        self.subscription = subscription
        self.client = pulsar_aio.Client(url, **client_options(settings))
        self.producer: pulsar_aio.Producer | None = None
        self.consumer: pulsar_aio.Consumer | None = None
        self.config_producer: pulsar_aio.Producer | None = None
        self.config_reader: pulsar_aio.Reader | None = None
        self._receiving: deque[asyncio.Future[pulsar.Message]] = deque()
        self._unacked = 0
        self._acking: set[asyncio.Future[None]] = set()

    async def open(self) -> None:
        s = self.settings
        send_timeout = max(1000, int(s.tick * 2000))
        self.consumer = await self.client.subscribe(
            s.topic, self.subscription, consumer_type=pulsar.ConsumerType.Exclusive,
            # The client's own buffer: 200 of 99 peers' 5 000-group reports are ~100 MB already.
            receiver_queue_size=200,
        )
        self.producer = await self.client.create_producer(
            s.topic, batching_enabled=False, send_timeout_millis=send_timeout,
            max_pending_messages=100, block_if_queue_full=False,
            compression_type=getattr(pulsar.CompressionType, REPORT_COMPRESSIONS[s.report_compression]),
        )
        self.config_reader = await self.client.create_reader(s.config_topic, pulsar.MessageId.earliest)
        self.config_producer = await self.client.create_producer(
            s.config_topic, batching_enabled=False, send_timeout_millis=10_000
        )

    @property
    def connected(self) -> bool:
        return self.producer is not None and self.producer.is_connected()

    async def publish_report(self, data: bytes, properties: dict[str, str] | None) -> None:
        assert self.producer is not None
        await self.producer.send(data, properties=properties or None)

    async def receive_report(self) -> Received:
        """The next report, in the order the broker delivered them.

        The client hands each message to the event loop through a callback that takes a
        loop iteration, and the task awaiting it another; with one receive at a time and
        an ack awaited after each, a message cost four iterations. At PIP-82's scale a
        busy loop's iterations take milliseconds (it folds reports in slices and answers
        asks), so the daemon took only ~45 of the 99 reports a second its peers sent and
        the rest waited in the client's queue. So RECEIVE_AHEAD receives are asked for
        ahead (the client fills them in the order asked, so they are taken in order), and
        the topic, non-persistent, is acknowledged cumulatively every ACK_EVERY messages,
        in the background (acks keep the broker's counters tidy; nothing is redelivered)."""
        assert self.consumer is not None
        while len(self._receiving) < RECEIVE_AHEAD:
            self._receiving.append(asyncio.ensure_future(self.consumer.receive()))
        msg = await self._receiving.popleft()
        self._unacked += 1
        if self._unacked >= ACK_EVERY:
            self._unacked = 0
            ack = asyncio.ensure_future(self.consumer.acknowledge_cumulative(msg))
            self._acking.add(ack)
            ack.add_done_callback(self._acked)
        return Received(msg.data(), dict(msg.properties()), msg.publish_timestamp())

    def _acked(self, ack: asyncio.Future[None]) -> None:
        self._acking.discard(ack)
        if not ack.cancelled() and ack.exception() is not None:
            log.debug("cumulative ack failed: %s", ack.exception())

    async def publish_config(self, data: bytes, key: str) -> None:
        assert self.config_producer is not None
        await self.config_producer.send(data, partition_key=key)

    async def read_config(self) -> bytes:
        assert self.config_reader is not None
        msg = await self.config_reader.read_next()
        data: bytes = msg.data()  # pulsar is untyped: Message.data() is the payload's bytes
        return data

    async def close(self) -> None:
        """Close everything within two CLOSE_TIMEOUTs: the producers, the consumer and the
        reader together, then the client. The client completes a close through a callback
        from its own threads, and one that never comes (a broker that stopped answering, a
        consumer closed with receives still pending) would otherwise hold a stopping daemon
        for ever (seen: a test's teardown hung in it for minutes). One bound per step, five
        steps in a row, let a stop take 2 s for the leaving report and 10 s here, past the
        10 s a supervisor (rgd up) waits after SIGTERM: a daemon was SIGKILLed once in CI."""
        hung = False
        for pending in (*self._receiving, *self._acking):
            if pending.done() and not pending.cancelled():
                pending.exception()  # retrieved: a failed receive is why we close, not news
            pending.cancel()
        self._receiving.clear()
        parts = [p for p in (self.producer, self.consumer, self.config_producer, self.config_reader) if p is not None]
        closes = [asyncio.ensure_future(p.close()) for p in parts]
        if closes:
            done, hanging = await asyncio.wait(closes, timeout=CLOSE_TIMEOUT)
            for c in done:
                c.exception()  # closing during an outage fails: nothing more to do
            for c in hanging:
                c.cancel()
            hung = bool(hanging)
        try:
            await asyncio.wait_for(self.client.close(), CLOSE_TIMEOUT)
        except TimeoutError:
            hung = True
        except Exception:  # closing during an outage: nothing more to do
            pass
        if hung:
            # A client whose close never completed still has its threads; if the garbage
            # collector freed it, its destructor could run on one of them and abort the
            # process (seen: "Fatal Python error: Aborted" while a client thread logged during
            # a collection). Keep it referenced: a bounded leak, once per hung close.
            _UNCLOSED.append(self.client)
            log.warning("pulsar client did not close within %.0f s; abandoned", CLOSE_TIMEOUT)


__all__ = ["CLOSE_TIMEOUT", "PulsarSession", "Received", "client_options"]
