"""The local limiter: one pair of token buckets (messages, bytes) per group and kind.

The tighter of the two wins and a request is all-or-nothing: a denied request
takes nothing from either bucket. Each (group, kind) also counts what it
admitted and throttled since the last `collect()`; that is the usage and demand
the daemon reports to its peers each tick.

The hot path (`acquire`) is plain attribute access and float math on purpose:
the benchmark holds it to >= 80 % of a do-nothing aiohttp handler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from rgd.groups import KINDS, ResourceGroup
from rgd.token_bucket import INF, TokenBucket

# Reasons a request was throttled (metric label `reason`).
REASON_MESSAGES = "message_rate"  # the message bucket of this daemon's share was short
REASON_BYTES = "byte_rate"
REASON_DEBT = "debt"  # the bucket is paying back usage charged after the fact


def rate_of(configured: float) -> float:
    """Config uses -1 for unlimited; buckets use INF."""
    return INF if configured < 0 else configured


def capped_retry(wait: float, until_recompute: float, short_m: float, short_b: float, quota_m: float,
                 quota_b: float) -> float:
    """Retry-After: no later than the next recomputation of the limit (the share may grow
    then, and a client told to wait for the debt at today's share would come back late),
    unless even the group's full quota needs longer to pay the shortfall.
    quota_* < 0 means unlimited (no shortfall there)."""
    if wait <= until_recompute:
        return wait
    at_full = max(short_m / quota_m if quota_m > 0 else (0.0 if short_m <= 0 else INF),
                  short_b / quota_b if quota_b > 0 else (0.0 if short_b <= 0 else INF))
    return min(wait, max(until_recompute, at_full))


class Decision(NamedTuple):
    allowed: bool
    retry_after_s: float
    remaining_messages: float  # INF when unlimited
    remaining_bytes: float
    reason: str | None


_new_decision = tuple.__new__  # Decision(...) without the Python-level __new__ frame


@dataclass(slots=True)
class TickCounters:
    """What one (group, kind) saw since the last collect: usage and demand."""

    admitted_messages: int = 0
    admitted_bytes: int = 0
    throttled_messages: int = 0
    throttled_bytes: int = 0

    @property
    def idle(self) -> bool:
        return not (self.admitted_messages or self.admitted_bytes
                    or self.throttled_messages or self.throttled_bytes)


@dataclass(slots=True)
class KindState:
    messages: TokenBucket
    bytes: TokenBucket
    tick: TickCounters = field(default_factory=TickCounters)
    # Cumulative, for /metrics (never reset).
    total_admitted_messages: int = 0
    total_admitted_bytes: int = 0
    total_throttled_messages: int = 0
    total_throttled_bytes: int = 0
    throttled_events: dict[str, int] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=set)
    topics: set[str] = field(default_factory=set)

    @property
    def limit(self) -> tuple[float, float]:
        return self.messages.rate, self.bytes.rate


# (group, kind) -> (messages/s, bytes/s) a new state starts with.
InitialLimits = Callable[[ResourceGroup, str], tuple[float, float]]


def full_quota(group: ResourceGroup, kind: str) -> tuple[float, float]:
    """A lone daemon's limit is the whole quota."""
    msgs, nbytes = group.rates(kind)
    return rate_of(msgs), rate_of(nbytes)


class Limiter:
    def __init__(
        self,
        clock: Callable[[], float],
        burst_seconds: float = 1.0,
        max_debt_seconds: float = 10.0,
        initial_limits: InitialLimits = full_quota,
        start_seconds: float | None = None,
    ) -> None:
        self.clock = clock
        self.burst_seconds = burst_seconds
        # A new (group, kind) starts with this many seconds of its limit in the bucket
        # (None: a full bucket). Every daemon that starts a group's bucket full can spend
        # it on top of its share, so a new group split over the cluster would admit up to
        # twice its quota in its first second; `start_seconds` bounds that to this fraction.
        self.start_seconds = start_seconds
        self.max_debt_seconds = max_debt_seconds
        self.initial_limits = initial_limits
        self.states: dict[tuple[str, str], KindState] = {}
        self.recompute_at = INF  # when limits are next recomputed (caps Retry-After); INF: unknown
        self.limit_changes = 0  # set_limit calls that changed a limit (limits move between ticks too)

    # -- state ---------------------------------------------------------------------------

    def state(self, group: ResourceGroup, kind: str, now: float | None = None) -> KindState:
        key = (group.name, kind)
        st = self.states.get(key)
        if st is None:
            now = self.clock() if now is None else now
            msgs, nbytes = self.initial_limits(group, kind)
            st = KindState(
                TokenBucket.new(msgs, now, self.burst_seconds, self.max_debt_seconds),
                TokenBucket.new(nbytes, now, self.burst_seconds, self.max_debt_seconds),
            )
            if self.start_seconds is not None:
                for b in (st.messages, st.bytes):
                    if b.rate != INF:
                        b.tokens = min(b.tokens, b.rate * self.start_seconds)
            self.states[key] = st
        return st

    def set_limit(self, group: ResourceGroup, kind: str, messages: float, nbytes: float) -> None:
        """Apply a new local limit (INF = unlimited) without losing bucket state."""
        now = self.clock()
        st = self.state(group, kind, now)
        if st.messages.rate != messages or st.bytes.rate != nbytes:
            self.limit_changes += 1
        st.messages.set_rate(messages, now)
        st.bytes.set_rate(nbytes, now)

    def forget(self, group_name: str) -> None:
        """Drop a deleted group's buckets."""
        for kind in KINDS:
            self.states.pop((group_name, kind), None)

    def limit_in_force(self, group: ResourceGroup, kind: str) -> tuple[float, float]:
        """(messages/s, bytes/s) this daemon enforces now (INF = unlimited): the bucket's
        rate, or for a (group, kind) not asked for yet the rate its first ask will get.
        The one source of /v1/quota, /stats and rgd_local_limit, so they cannot disagree."""
        st = self.states.get((group.name, kind))
        return st.limit if st is not None else self.initial_limits(group, kind)

    # -- hot path ------------------------------------------------------------------------

    def acquire(
        self, group: ResourceGroup, kind: str, messages: int, nbytes: int, namespace: str,
        topic: str | None = None, now: float | None = None,
    ) -> Decision:
        if now is None:
            now = self.clock()
        st = self.states.get((group.name, kind))
        if st is None:
            st = self.state(group, kind, now)
        mb, bb = st.messages, st.bytes
        # TokenBucket.refill/shortfall/take, with their no-op and common cases inlined
        # (a batch of 100 asks shares one `now`, so only the first ask refills): the
        # same state changes and results as calling them, in fewer Python calls.
        # tests/test_limiter.py checks this against the plain TokenBucket methods.
        if now > mb.updated:
            mb.refill(now)
        if now > bb.updated:
            bb.refill(now)
        short_m = 0.0 if messages <= mb.tokens and mb.rate > 0 else mb.shortfall(messages)
        short_b = 0.0 if nbytes <= bb.tokens and bb.rate > 0 else bb.shortfall(nbytes)
        tick = st.tick
        st.namespaces.add(namespace)
        if topic is not None:
            st.topics.add(topic)
        if short_m == 0.0 and short_b == 0.0:
            if mb.rate != INF:
                mb.tokens -= messages
            if bb.rate != INF:
                bb.tokens -= nbytes
            tick.admitted_messages += messages
            tick.admitted_bytes += nbytes
            st.total_admitted_messages += messages
            st.total_admitted_bytes += nbytes
            return _new_decision(Decision, (True, 0.0, mb.tokens, bb.tokens, None))
        wait_m = mb.wait_seconds(short_m)
        wait_b = bb.wait_seconds(short_b)
        if wait_m >= wait_b:
            reason = REASON_DEBT if mb.tokens < 0 else REASON_MESSAGES
        else:
            reason = REASON_DEBT if bb.tokens < 0 else REASON_BYTES
        tick.throttled_messages += messages
        tick.throttled_bytes += nbytes
        st.total_throttled_messages += messages
        st.total_throttled_bytes += nbytes
        st.throttled_events[reason] = st.throttled_events.get(reason, 0) + 1
        wait = max(wait_m, wait_b)
        if now + wait > self.recompute_at:
            wait = capped_retry(wait, max(0.0, self.recompute_at - now), short_m, short_b, *group.rates(kind))
        return Decision(False, wait, mb.tokens, bb.tokens, reason)

    def record_usage(
        self, group: ResourceGroup, kind: str, messages: int, nbytes: int, namespace: str,
        topic: str | None = None,
    ) -> KindState:
        """Charge usage that already happened (dispatch): counted as admitted, never denied."""
        now = self.clock()
        st = self.state(group, kind, now)
        st.messages.charge(messages, now)
        st.bytes.charge(nbytes, now)
        st.tick.admitted_messages += messages
        st.tick.admitted_bytes += nbytes
        st.total_admitted_messages += messages
        st.total_admitted_bytes += nbytes
        st.namespaces.add(namespace)
        if topic is not None:
            st.topics.add(topic)
        return st

    # -- tick ----------------------------------------------------------------------------

    def collect(self) -> dict[tuple[str, str], "Collected"]:
        """Usage and demand since the last collect, with the namespaces and topics seen;
        resets all three."""
        out: dict[tuple[str, str], Collected] = {}
        for key, st in self.states.items():
            out[key] = Collected(st.tick, frozenset(st.namespaces), len(st.topics))
            st.tick = TickCounters()
            st.namespaces = set()
            st.topics = set()
        return out


class Collected(NamedTuple):
    counters: TickCounters
    namespaces: frozenset[str]
    topics: int
