"""Pulsar edges: the usage-report topic (non-persistent) and the config topic (persistent).

Thin async wrappers over the official client's `pulsar.asyncio`, so the rest of
the daemon sees bytes in and bytes out. Reconnection inside a session is the
client's job; the daemon's supervisor (daemon.py) recreates a session that
fails to open, with backoff.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import pulsar
import pulsar.asyncio as pulsar_aio

from rgd.settings import REPORT_COMPRESSIONS, Settings

log = logging.getLogger("rgd.transport")
# The C++ client logs through this logger at whatever level it allows; its INFO/DEBUG
# lines (every reconnect attempt) would drown the daemon's own log.
logging.getLogger("pulsar").setLevel(logging.WARNING)
CLOSE_TIMEOUT = 2.0  # seconds per close step (PulsarSession.close)
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
        assert self.consumer is not None
        msg = await self.consumer.receive()
        # Non-persistent topic: acks are meaningless but keep the broker's counters tidy.
        try:
            await self.consumer.acknowledge(msg)
        except pulsar_aio.PulsarException:
            pass
        return Received(msg.data(), dict(msg.properties()), msg.publish_timestamp())

    async def publish_config(self, data: bytes, key: str) -> None:
        assert self.config_producer is not None
        await self.config_producer.send(data, partition_key=key)

    async def read_config(self) -> bytes:
        assert self.config_reader is not None
        msg = await self.config_reader.read_next()
        return msg.data()

    async def close(self) -> None:
        """Close everything, each step bounded by CLOSE_TIMEOUT: the client completes a close
        through a callback from its own threads, and one that never comes (a broker that
        stopped answering, a consumer closed with a receive still pending) would otherwise
        hold a stopping daemon for ever (seen: a test's teardown hung in it for minutes)."""
        hung = False
        for closer in (self.producer, self.consumer, self.config_producer, self.config_reader, self.client):
            if closer is not None:
                try:
                    await asyncio.wait_for(closer.close(), CLOSE_TIMEOUT)
                except asyncio.TimeoutError:
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
