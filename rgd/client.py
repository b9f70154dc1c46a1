"""`rgd.client`: the asyncio client brokers, proxies and producers ask rgd with.

Why auto-batching: one HTTP request costs the daemon about as much CPU as
deciding a few hundred asks inside a batch (bench/bench_batch.py), so a broker
that asks once per message is capped by HTTP, not by rate limiting. `acquire`
looks like one ask, but concurrent calls within a short window (default
0.5 ms) travel as one `{"requests": [...]}` POST, at most 1000 asks each, over
kept-alive connections (TCP or the node-local unix socket). With `max_inflight`
(4) requests out, further asks wait for the first answer instead of their
window, so batches grow with the load rather than the number of requests.

What it promises when the daemon cannot answer (connection refused, timeout,
5xx): an explicit policy, never a hang or an exception per message.
`on_unreachable="closed"` denies, except a bounded local fallback: each
(namespace, kind) may pass up to `fallback_rate` (messages/s, bytes/s), or its own
rate in `fallback_rates`, from a local token bucket; `"open"` admits everything.
Answers say where they came from (`Answer.source`).

`Retry-After`: a denied answer carries the daemon's wait; the client then
answers that (namespace, kind)'s asks of at least that size itself, denied,
until the wait is over (at most `max_hold`, 1 s: a config change may lift a
zero rate's "24 days" sooner), instead of asking again (a smaller ask may fit
sooner, so it still goes to the daemon). Held asks never reach the daemon, so
its demand count (what the quota split is computed from) misses them:
`max_hold=0` sends every ask. A non-2xx answer to the whole request with a
`Retry-After` header pauses all sending for that long (answers by the policy).

`usage` (usage that already happened, never denied) and `quota` (the limits in
force, for a broker that enforces in-process) are one request per call; they raise
`RgdUnreachableError` when the daemon cannot answer.

The Java client (clients/java, `dev.rgd.client.RgdClient`) has the same semantics:
clients/conformance/cases.json holds both to them against a live daemon.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from typing import Literal, NamedTuple, TypeVar
from urllib.parse import urlencode

import aiohttp
import msgspec

from rgd.api.requests import MAX_BATCH, MAX_BYTES, MAX_MESSAGES, MAX_NAME, MAX_TOPIC, Ask, Batch, namespace_ok
from rgd.config.groups import KINDS
from rgd.config.settings import UNIX_PREFIX
from rgd.limiting.token_bucket import TokenBucket

# The local fallback's bucket, in seconds of `fallback_rate`. Not the daemon's 0.1 s: that
# bounds what a group's daemons save between them, and a client cut off from its daemon has
# no cluster to line up with; a second's allowance keeps small fallback rates (3 msg/s)
# usable as whole messages.
FALLBACK_BURST_SECONDS = 1.0

__all__ = [
    "SOURCE_DAEMON",
    "SOURCE_FALLBACK",
    "SOURCE_RETRY_AFTER",
    "Answer",
    "Client",
    "ClientStats",
    "KindQuota",
    "Quota",
    "Rates",
    "RgdRequestError",
    "RgdUnreachableError",
    "UsageRecorded",
]

SOURCE_DAEMON = "daemon"  # the daemon decided
SOURCE_RETRY_AFTER = "retry_after"  # denied locally: inside the daemon's Retry-After for this (namespace, kind)
SOURCE_FALLBACK = "fallback"  # the daemon is unreachable: the policy decided
REASON_UNREACHABLE = "unreachable"


class Answer(NamedTuple):
    allowed: bool
    retry_after_s: float = 0.0  # when denied: how long until this ask may fit
    remaining_messages: int | None = None  # None: unlimited or not known
    remaining_bytes: int | None = None
    reason: str | None = None  # why denied (the daemon's reason, or "unreachable")
    group: str | None = None
    source: str = SOURCE_DAEMON


_T = TypeVar("_T")
_new_answer = tuple.__new__  # Answer(...) without the Python-level __new__ frame: once per call


class RgdRequestError(RuntimeError):
    """The daemon refused the request as malformed (4xx other than 429): a bug on the
    client's side, raised to every caller whose ask was in that request."""


class RgdUnreachableError(ConnectionError):
    """`usage` or `quota` could not reach the daemon (connection refused, timeout, 5xx, an
    answer that is not rgd's). `acquire` never raises it: its policy answers instead."""


class UsageRecorded(msgspec.Struct, frozen=True):
    """The daemon's answer to `usage`: asks charged to a group, and asks whose namespace has none."""

    recorded: int
    ungrouped: int


class Rates(msgspec.Struct, frozen=True):
    """Per second; None = unlimited."""

    messages_per_second: float | None = None
    bytes_per_second: float | None = None


class KindQuota(msgspec.Struct, frozen=True):
    """One kind's limits: the local one in force on this daemon, and the group's cluster-wide quota."""

    local: Rates
    cluster: Rates


class Quota(msgspec.Struct, frozen=True):
    """`GET /v1/quota`: a namespace's group and, per kind, its limits (none when unlimited)."""

    namespace: str
    group: str | None
    unlimited: bool
    publish: KindQuota | None = None
    dispatch: KindQuota | None = None
    replication: KindQuota | None = None


class _Result(msgspec.Struct, gc=False):
    allowed: bool
    group: str | None = None
    remaining_messages: int | None = None
    remaining_bytes: int | None = None
    retry_after_ms: int | None = None
    reason: str | None = None
    unlimited: bool = False


class _Results(msgspec.Struct, gc=False):
    results: list[_Result]


_decode_results = msgspec.json.Decoder(_Results).decode
_encode = msgspec.json.Encoder().encode


class ClientStats(msgspec.Struct):
    requests: int = 0  # HTTP requests sent
    asks: int = 0  # asks sent in them
    retry_after_answers: int = 0  # answered locally inside a Retry-After
    fallback_answers: int = 0  # answered by the unreachable policy
    errors: int = 0  # requests that failed (connection, timeout, 5xx)


class _Hold(NamedTuple):
    until: float
    messages: int
    nbytes: int


class Client:
    """One client per daemon; share it among all tasks of a process.

    `url`: `http://127.0.0.1:8080` or `unix:/run/rgd/rgd.sock`.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8080",
        *,
        window: float = 0.0005,
        max_batch: int = MAX_BATCH,
        timeout: float = 2.0,
        connections: int = 8,
        max_inflight: int = 4,
        on_unreachable: Literal["open", "closed"] = "closed",
        fallback_rate: tuple[float, float] = (0.0, math.inf),
        fallback_rates: Mapping[tuple[str, str], tuple[float, float]] | None = None,
        unreachable_backoff: float = 0.5,
        max_hold: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 <= window <= 1.0:
            raise ValueError(f"window: {window} is out of range (0..1 s)")
        if not 1 <= max_inflight <= connections:
            raise ValueError(f"max_inflight: {max_inflight} is out of range (1..connections={connections})")
        if not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch: {max_batch} is out of range (1..{MAX_BATCH})")
        if on_unreachable not in ("open", "closed"):
            raise ValueError(f"on_unreachable: expected 'open' or 'closed', got {on_unreachable!r}")
        if len(fallback_rate) != 2 or min(fallback_rate) < 0:
            raise ValueError(f"fallback_rate: expected (messages/s, bytes/s) >= 0, got {fallback_rate!r}")
        for (ns, kind), rate in (fallback_rates or {}).items():
            _check(ns, kind, 0, 0, None)
            if len(rate) != 2 or min(rate) < 0:
                raise ValueError(f"fallback_rates[{ns!r}, {kind!r}]: expected (messages/s, bytes/s) >= 0, got {rate!r}")
        if url.startswith(UNIX_PREFIX):
            self._socket_path: str | None = url[len(UNIX_PREFIX):]
            self._base = "http://localhost"
        elif url.startswith(("http://", "https://")):
            self._socket_path = None
            self._base = url.rstrip("/")
        else:
            raise ValueError(f"url: expected http://HOST:PORT or unix:/path, got {url!r}")
        self._endpoint = self._base + "/v1/acquire"
        self.url = url
        self.window = window
        self.max_batch = max_batch
        self.timeout = timeout
        self.connections = connections
        self.max_inflight = max_inflight  # requests out at once before asks wait for an answer (full batches excepted)
        self.on_unreachable = on_unreachable
        self.fallback_rate = fallback_rate
        self.fallback_rates = dict(fallback_rates or {})  # (namespace, kind) -> its own fallback rate
        self.unreachable_backoff = unreachable_backoff
        self.max_hold = max_hold  # a zero rate says "retry in 24 days"; a config change may lift it sooner
        self.clock = clock
        self.stats = ClientStats()
        self._session: aiohttp.ClientSession | None = None
        self._asks: list[Ask] = []
        self._futures: list[asyncio.Future[Answer]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._holds: dict[tuple[str, str], _Hold] = {}
        self._paused_until = 0.0  # no request before this (unreachable, or a request-level Retry-After)
        self._fallback: dict[tuple[str, str], tuple[TokenBucket, TokenBucket]] = {}
        self._closed = False

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Send what is pending, wait for the answers, close the connections."""
        self._closed = True
        while self._asks or self._inflight:
            self._flush(force=True)
            await asyncio.gather(*list(self._inflight), return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- asking ----------------------------------------------------------------------------

    async def acquire(self, namespace: str, kind: str = "publish", messages: int = 1, bytes: int = 0,
                      topic: str | None = None) -> Answer:
        """May `messages` messages of `bytes` bytes pass now? Checked here first, so one
        bad ask raises ValueError at its caller instead of failing the whole batch."""
        if self._closed:
            raise RuntimeError("client is closed")
        _check(namespace, kind, messages, bytes, topic)
        now = self.clock()
        if self._holds:
            hold = self._holds.get((namespace, kind))
            if hold is not None:
                if now < hold.until and messages >= hold.messages and bytes >= hold.nbytes:
                    self.stats.retry_after_answers += 1
                    return Answer(False, hold.until - now, reason="retry_after", source=SOURCE_RETRY_AFTER)
                if now >= hold.until:
                    del self._holds[(namespace, kind)]
        if now < self._paused_until:
            return self._by_policy(namespace, kind, messages, bytes, now)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._asks.append(Ask(namespace, kind, messages, bytes, topic))
        self._futures.append(future)
        if len(self._asks) >= self.max_batch:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.window, self._flush)
        return await future

    def _flush(self, force: bool = False) -> None:
        """Send the pending asks: when their window is over, unless `max_inflight`
        requests are out (then the first answer to come back sends them: under load
        batches grow to fill a round trip instead of multiplying small requests,
        each of which costs both processes far more than an ask); a full batch goes
        at once."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._asks:
            return
        if not force and len(self._inflight) >= self.max_inflight and len(self._asks) < self.max_batch:
            return  # _sent() sends them
        asks, futures = self._asks, self._futures
        self._asks, self._futures = [], []
        task = asyncio.get_running_loop().create_task(self._send(asks, futures))
        self._inflight.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if self._asks and self._timer is None:  # their window is over: they were waiting for this
            self._flush()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector: aiohttp.BaseConnector
            if self._socket_path is not None:
                connector = aiohttp.UnixConnector(self._socket_path, limit=self.connections)
            else:
                connector = aiohttp.TCPConnector(limit=self.connections)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers={"Content-Type": "application/json"})
        return self._session

    async def _send(self, asks: list[Ask], futures: list[asyncio.Future[Answer]]) -> None:
        self.stats.requests += 1
        self.stats.asks += len(asks)
        try:
            async with self._get_session().post(self._endpoint, data=_encode(Batch(asks))) as resp:
                body = await resp.read()
                status, retry_header = resp.status, resp.headers.get("Retry-After")
        except (TimeoutError, aiohttp.ClientError, OSError):
            self._unreachable(asks, futures, self.unreachable_backoff)
            return
        if status == 200:
            try:
                results = _decode_results(body).results
            except msgspec.DecodeError:
                results = []
            if len(results) == len(asks):
                self._answer(asks, futures, results)
                return
            self._unreachable(asks, futures, self.unreachable_backoff)  # not rgd's answer: treat as down
            return
        if retry_header is not None or status >= 500:
            self._unreachable(asks, futures, _retry_after_seconds(retry_header, self.unreachable_backoff))
            return
        error = RgdRequestError(f"rgd answered {status}: {body[:300].decode(errors='replace')}")
        for f in futures:
            if not f.done():
                f.set_exception(error)

    def _answer(self, asks: list[Ask], futures: list[asyncio.Future[Answer]], results: list[_Result]) -> None:
        now = self.clock()
        for ask, future, r in zip(asks, futures, results):
            if future.done():
                continue
            if r.allowed:
                future.set_result(_new_answer(Answer, (True, 0.0, r.remaining_messages, r.remaining_bytes, None,
                                                       r.group, SOURCE_DAEMON)))
                continue
            wait = (r.retry_after_ms or 0) / 1000
            if r.group is not None and wait > 0 and self.max_hold > 0:
                # the latest denial is held: an ask at least that big cannot fit before its wait is over
                self._holds[(ask.namespace, ask.kind)] = _Hold(now + min(wait, self.max_hold), ask.messages,
                                                               ask.nbytes)
            future.set_result(Answer(False, wait, r.remaining_messages, r.remaining_bytes, r.reason, r.group))

    # -- the daemon is unreachable -----------------------------------------------------------

    def _unreachable(self, asks: list[Ask], futures: list[asyncio.Future[Answer]], pause: float) -> None:
        self.stats.errors += 1
        now = self.clock()
        self._paused_until = max(self._paused_until, now + pause)
        for ask, future in zip(asks, futures):
            if not future.done():
                future.set_result(self._by_policy(ask.namespace, ask.kind, ask.messages, ask.nbytes, now))

    def _by_policy(self, namespace: str, kind: str, messages: int, nbytes: int, now: float) -> Answer:
        self.stats.fallback_answers += 1
        if self.on_unreachable == "open":
            return Answer(True, reason=None, source=SOURCE_FALLBACK)
        buckets = self._fallback.get((namespace, kind))
        if buckets is None:
            rate = self.fallback_rates.get((namespace, kind), self.fallback_rate)
            buckets = self._fallback[(namespace, kind)] = (
                TokenBucket.new(rate[0], now, FALLBACK_BURST_SECONDS),
                TokenBucket.new(rate[1], now, FALLBACK_BURST_SECONDS))
        mb, bb = buckets
        mb.refill(now)
        bb.refill(now)
        short_m, short_b = mb.shortfall(messages), bb.shortfall(nbytes)
        if short_m == 0 and short_b == 0:
            mb.take(messages)
            bb.take(nbytes)
            return Answer(True, reason=None, source=SOURCE_FALLBACK)
        wait = max(mb.wait_seconds(short_m), bb.wait_seconds(short_b), self._paused_until - now)
        return Answer(False, wait, reason=REASON_UNREACHABLE, source=SOURCE_FALLBACK)

    # -- usage and quota: one request per call -------------------------------------------------

    async def usage(self, namespace: str, kind: str = "dispatch", messages: int = 1, bytes: int = 0,
                    topic: str | None = None) -> UsageRecorded:
        """Record usage that already happened (dispatch is charged after the fact, as Pulsar
        does): never denied; later asks of the group pay the debt."""
        if self._closed:
            raise RuntimeError("client is closed")
        _check(namespace, kind, messages, bytes, topic)
        body = _encode(Ask(namespace, kind, messages, bytes, topic))
        return _decoded(await self._call("POST", "/v1/usage", body), UsageRecorded)

    async def quota(self, namespace: str, topic: str | None = None) -> Quota:
        """The limits in force now for `namespace`'s group (or the topic's own), for a broker
        that enforces in-process."""
        if self._closed:
            raise RuntimeError("client is closed")
        _check(namespace, "publish", 0, 0, topic)
        query = {"namespace": namespace} if topic is None else {"namespace": namespace, "topic": topic}
        return _decoded(await self._call("GET", "/v1/quota?" + urlencode(query)), Quota)

    async def _call(self, method: str, path: str, body: bytes | None = None) -> bytes:
        """One request's 200 body; RgdRequestError for a 4xx (not 429), RgdUnreachableError
        for the rest of what is not an answer."""
        url = self._base + path
        try:
            async with self._get_session().request(method, url, data=body) as resp:
                data = await resp.read()
                status, retry_header = resp.status, resp.headers.get("Retry-After")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise RgdUnreachableError(f"rgd at {url} is unreachable: {exc!r}") from exc
        if status >= 500 or (status != 200 and retry_header is not None):
            raise RgdUnreachableError(f"rgd answered {status}")
        if status != 200:
            raise RgdRequestError(f"rgd answered {status}: {data[:300].decode(errors='replace')}")
        return data


def _decoded(data: bytes, kind: type[_T]) -> _T:
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise RgdUnreachableError(f"not rgd's answer: {exc}") from exc


def _retry_after_seconds(header: str | None, default: float) -> float:
    """Retry-After in seconds (the daemon sends whole seconds; an HTTP date counts as the default)."""
    if header is None:
        return default
    try:
        return max(0.0, float(header))
    except ValueError:
        return default


def _check(namespace: str, kind: str, messages: int, nbytes: int, topic: str | None) -> None:
    if type(namespace) is not str or len(namespace) > MAX_NAME or not namespace or not namespace_ok(namespace):
        raise ValueError(f"namespace: expected 'tenant/namespace', got {namespace!r}")
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    if type(messages) is not int or not 0 <= messages <= MAX_MESSAGES:
        raise ValueError(f"messages: expected an integer 0..{MAX_MESSAGES}, got {messages!r}")
    if type(nbytes) is not int or not 0 <= nbytes <= MAX_BYTES:
        raise ValueError(f"bytes: expected an integer 0..{MAX_BYTES}, got {nbytes!r}")
    if topic is not None and (type(topic) is not str or len(topic) > MAX_TOPIC):
        raise ValueError(f"topic: expected a topic name of at most {MAX_TOPIC} characters")
