"""The local limiter: one pair of token buckets (messages, bytes) per group and kind.

The tighter of the two wins and a request is all-or-nothing: a denied request
takes nothing from either bucket. Each (group, kind) also counts what it
admitted and throttled since the last `collect()`; that is the usage and demand
the daemon reports to its peers each tick.

The hot path (`acquire`) is plain attribute access and float math on purpose:
the benchmark holds it to >= 80 % of a do-nothing aiohttp handler.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import attrgetter, sub
from typing import NamedTuple, Protocol

from rgd.config.groups import KINDS, ResourceGroup
from rgd.limiting.second_window import WINDOW_SECONDS, SecondWindow
from rgd.limiting.token_bucket import DEFAULT_BURST_SECONDS, INF, TokenBucket
from rgd.limiting.window_turns import Layout, Turns, turns_for

# Reasons a request was throttled (metric label `reason`).
REASON_MESSAGES = "message_rate"  # the message bucket of this daemon's share was short
REASON_BYTES = "byte_rate"
REASON_DEBT = "debt"  # the bucket is paying back usage charged after the fact
# A bucket holds at least this many messages (in bytes: this many of the (group, kind)'s
# mean message), up to BURST_FLOOR_MAX_SECONDS of its limit; see bucket_seconds.
BURST_FLOOR_MESSAGES = 10.0
BURST_FLOOR_MAX_SECONDS = 1.0


def bucket_seconds(burst_seconds: float, rate: float, unit: float) -> float:
    """The size of a bucket of `rate` units/s, in seconds of it: `burst_seconds`, but at
    least BURST_FLOOR_MESSAGES messages of `unit` units each (1 for messages, the mean
    message for bytes; 0 when not known yet), and for that floor never more than
    BURST_FLOOR_MAX_SECONDS.

    Why a floor in messages: 0.1 s of a 10 msg/s share is one message, and arrivals are
    never that even. Two messages 50 ms apart would find the second denied although the
    daemon admits less than its share; a Poisson stream at 80 % of such a limit loses
    about half its messages. Ten messages of room lose about 2 %. The bound on what the
    cluster saves stays 0.1 s of the quota for shares of 100 messages/s and more; below
    that a daemon saves at most ten messages (or a second of its share, as before the
    bucket shrank, where that is smaller), and `window_cap` keeps it from spending them
    on top of its rate within a second."""
    if rate == INF or rate <= 0 or unit <= 0:
        return burst_seconds
    return max(burst_seconds, min(BURST_FLOOR_MAX_SECONDS, BURST_FLOOR_MESSAGES * unit / rate))


def window_cap(burst_seconds: float, rate: float, unit: float) -> float:
    """The most a bucket of `rate` units/s admits in any 1-second window (INF: no cap), for a
    bucket the ten-message floor made larger than `burst_seconds`: what a bucket of
    `burst_seconds` admits at most in one (1 + `burst_seconds` seconds of its rate), or the
    rate plus one message of `unit` where that is more (rgd.limiting.second_window says why)."""
    if bucket_seconds(burst_seconds, rate, unit) <= burst_seconds:
        return INF
    return max(rate * (WINDOW_SECONDS + burst_seconds), rate * WINDOW_SECONDS + unit)


class Place(NamedTuple):
    """Where this daemon's turns lie among a group's members in one kind, in each dimension
    (rgd.limiting.window_turns.Layout's fields; flat, so it crosses the limiter link as a tuple)."""

    members: int
    before_messages: float
    circumference_messages: float
    points_messages: int
    before_bytes: float
    circumference_bytes: float
    points_bytes: int

    def layout(self, dimension: str) -> Layout:
        if dimension == "messages":
            return Layout(self.before_messages, self.circumference_messages, self.points_messages)
        return Layout(self.before_bytes, self.circumference_bytes, self.points_bytes)


def window_turns(burst_seconds: float, rate: float, unit: float, quota: float, place: Place | None,
                 dimension: str, wall_offset: float) -> Turns | None:
    """The turns a windowed bucket's cap takes (None: the fixed `window_cap`): for a member
    whose place in the group is known, in a limited dimension with a known message."""
    if place is None or rate == INF or quota <= 0 or quota == INF or unit <= 0:
        return None
    return turns_for(rate, unit, burst_seconds, quota, place.members, place.layout(dimension), wall_offset)


def _mean_message(st: KindState) -> float:
    """A bucket's mean message in bytes, from all it counted (0 before it counted any)."""
    counted = st.total_admitted_messages + st.total_throttled_messages
    return (st.total_admitted_bytes + st.total_throttled_bytes) / counted if counted else 0.0


def largest_bucket_seconds(burst_seconds: float) -> float:
    """The most bucket_seconds gives for any rate and message size: what a daemon can have
    saved, in seconds of its limit (peers' reports are vetted against it)."""
    return max(burst_seconds, BURST_FLOOR_MAX_SECONDS)


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
    at_full = max(_at_full(short_m, quota_m), _at_full(short_b, quota_b))
    return min(wait, max(until_recompute, at_full))


def _at_full(shortfall: float, quota: float) -> float:
    """Seconds the group's whole quota needs to pay `shortfall`. An unlimited dimension
    (quota < 0) needs none, even while this daemon's share of it reads 0 (a strategy that
    starts from nothing); a zero quota never pays."""
    if shortfall <= 0 or quota < 0:
        return 0.0
    return shortfall / quota if quota > 0 else INF


class Decision(NamedTuple):
    allowed: bool
    retry_after_s: float
    remaining_messages: float  # INF when unlimited
    remaining_bytes: float
    reason: str | None


_new_decision = tuple.__new__  # Decision(...) without the Python-level __new__ frame


class AskLike(Protocol):
    """What `acquire_batch` reads of an ask (rgd.api.requests.Ask has these)."""

    namespace: str
    messages: int
    nbytes: int
    topic: str | None


class BatchOutcome(NamedTuple):
    """One (group, kind)'s answers to a batch, in ask order: the first `admitted`
    asks passed in one step, with what each left in the buckets (None: unlimited
    bucket); the asks after them were decided one by one (`rest`)."""

    admitted: int
    remaining_messages: list[int] | None
    remaining_bytes: list[int] | None
    rest: list[Decision]


# Below this a float holds every integer, so subtracting whole asks is exact: the
# batch step can count in ints and still leave the bits the one-by-one path leaves.
_EXACT = float(2**53)
_UNLIMITED_TOKENS = 1 << 62  # an unlimited bucket's INF, as an int above any batch's sum (1000 x 2**40 bytes)
_messages_of = attrgetter("messages")
_nbytes_of = attrgetter("nbytes")
_namespace_of = attrgetter("namespace")
_topic_of = attrgetter("topic")


@dataclass(slots=True)
class TickCounters:
    """What one (group, kind) saw since the last collect: usage and demand."""

    admitted_messages: int = 0
    admitted_bytes: int = 0
    throttled_messages: int = 0
    throttled_bytes: int = 0
    events: int = 0  # asks and usage records (what total_events adds up)
    # Shadow mode: what would have been throttled and was admitted (counted in admitted_* too).
    shadow_throttled_messages: int = 0
    shadow_throttled_bytes: int = 0

    @property
    def idle(self) -> bool:
        return not (self.admitted_messages or self.admitted_bytes
                    or self.throttled_messages or self.throttled_bytes)


@dataclass(slots=True)
class KindState:
    messages: TokenBucket
    bytes: TokenBucket
    tick: TickCounters = field(default_factory=TickCounters)
    born: float = 0.0  # clock reading it was made at: its counters count from then
    # Cumulative, for /metrics (never reset).
    total_admitted_messages: int = 0
    total_admitted_bytes: int = 0
    total_throttled_messages: int = 0
    total_throttled_bytes: int = 0
    total_events: int = 0  # asks and usage records: the granularity of the counts (early reports)
    # None until first needed: most buckets are never denied and see no topic names, and
    # at PIP-82's scale an empty dict and an empty set were ~280 bytes of the ~1 KB a bucket
    # took (10 000 buckets; twice with --cluster-thread, whose two halves each hold them).
    throttled_events: dict[str, int] | None = None
    namespaces: set[str] = field(default_factory=set)
    topics: set[str] | None = None
    place: Place | None = None  # where set_limit last put us among the group's members
    # Shadow mode (cumulative): asks that would have been throttled, by reason, and their volume.
    shadow_events: dict[str, int] | None = None
    total_shadow_throttled_messages: int = 0
    total_shadow_throttled_bytes: int = 0
    # Usage recorded after the fact (`record_usage`): when the latest record came, and where the
    # time covered by the records since the node last marked the bucket begins (None: none since).
    last_recorded: float | None = None
    recorded_from: float | None = None

    @property
    def limit(self) -> tuple[float, float]:
        return self.messages.rate, self.bytes.rate

    @property
    def recorded_span(self) -> float:
        """How long the usage recorded since the bucket's mark took to happen (0: none recorded).

        Why: an ask is counted when it happens, a record after the fact (dispatch, /v1/usage), and
        a broker records what it did since its previous record. So each record covers the time
        since the one before it (the first, since the bucket's birth), and a window holding records
        is at least as long as what they cover: a second's usage recorded at once and measured over
        the fifth of a tick since the mark would read as five times its rate, a rise that is not
        one (rgd.cluster.node measures every window so, `_span`)."""
        if self.recorded_from is None or self.last_recorded is None:
            return 0.0
        return self.last_recorded - self.recorded_from


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
        burst_seconds: float = DEFAULT_BURST_SECONDS,
        max_debt_seconds: float = 10.0,
        initial_limits: InitialLimits = full_quota,
        start_seconds: float | None = None,
        wall_offset: float = 0.0,
    ) -> None:
        self.clock = clock
        # Wall-clock seconds minus `clock` seconds: windows take turns by wall-clock second,
        # the same second at every daemon (rgd.limiting.window_turns).
        self.wall_offset = wall_offset
        self.burst_seconds = burst_seconds
        # A new (group, kind) starts with this many seconds of its limit in the bucket
        # (None: a full bucket). Every daemon that starts a group's bucket full can spend
        # it on top of its share, so a new group split over the cluster would admit up to
        # twice its quota in its first second; `start_seconds` bounds that to this fraction.
        self.start_seconds = start_seconds
        self.max_debt_seconds = max_debt_seconds
        self.initial_limits = initial_limits
        self.states: dict[tuple[str, str], KindState] = {}
        # For readers of the cumulative counters (early reports snapshot them 20 times a tick):
        # `states_version` moves whenever a state is created or dropped (the set of keys, in
        # order, is as it was while it stays), and `counted` holds the keys whose totals moved
        # since the reader last took it (`take_counted`), so a snapshot rereads those alone.
        # None until the first take: a limiter nobody snapshots (the serving half of
        # --cluster-process) keeps no such set.
        self.states_version = 0
        self.counted: set[tuple[str, str]] | None = None
        self.recompute_at = INF  # when limits are next recomputed (caps Retry-After); INF: unknown
        # The clock reading from which nothing of a limited rate is admitted: the end of the
        # lease the node computed the limits in force under (rgd.cluster.node, which closes them
        # itself a react interval before it when it recomputes in time). The limiter refuses on
        # its own clock, so a late recompute (a stalled loop, a react that waits for the broker)
        # cannot stretch a share past the lease its peers keep it for. It moves with every
        # recompute; INF: no lease (unguarded, or limits already closed).
        self.lease_until = INF
        self.limit_changes = 0  # set_limit calls that changed a limit (limits move between ticks too)
        self.shadow_all = False  # `rgd run --shadow`: every group in shadow mode (see shadows)
        # Called with what each `collect` took, before anything can ask again: the daemon logs
        # it as its tick accounting (rgd.usage_log.accounting), whatever the tick then reports.
        self.on_collect: Callable[[dict[tuple[str, str], Collected]], None] | None = None

    def shadows(self, group: ResourceGroup) -> bool:
        """Whether asks of `group` are decided and counted but never denied (shadow mode)."""
        return self.shadow_all or group.shadow_mode

    # -- state ---------------------------------------------------------------------------

    def state(self, group: ResourceGroup, kind: str, now: float | None = None) -> KindState:
        key = (group.name, kind)
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = self._new_state(group, kind, self.clock() if now is None else now)
            self.states_version += 1
        return st

    def _new_state(self, group: ResourceGroup, kind: str, now: float) -> KindState:
        msgs, nbytes = self.initial_limits(group, kind)
        st = KindState(
            TokenBucket.new(msgs, now, bucket_seconds(self.burst_seconds, msgs, 1.0), self.max_debt_seconds),
            TokenBucket.new(nbytes, now, self.burst_seconds, self.max_debt_seconds),
            born=now,
        )
        st.messages.cap_window(window_cap(self.burst_seconds, msgs, 1.0))  # bytes: no mean message yet
        if self.start_seconds is not None:
            for b in (st.messages, st.bytes):
                if b.rate != INF:
                    b.tokens = min(b.tokens, b.rate * self.start_seconds)
        return st

    def take_counted(self) -> set[tuple[str, str]]:
        """The keys whose cumulative counters moved since the last call (see `counted`); the
        first call starts the tracking (and returns nothing: read every state then)."""
        counted, self.counted = self.counted, set()
        return counted or set()

    def set_limit(self, group: ResourceGroup, kind: str, messages: float, nbytes: float,
                  place: Place | None = None) -> None:
        """Apply a new local limit (INF = unlimited) without losing bucket state. `place`:
        where we stand among the group's members, for the windows to take turns (None: a
        window's cap is the rate plus one message, as for a daemon without peers)."""
        now = self.clock()
        st = self.state(group, kind, now)
        if st.messages.rate != messages or st.bytes.rate != nbytes:
            self.limit_changes += 1
        # Sized before the rate changes, so set_rate clamps saved tokens to the new capacity.
        mean_bytes = _mean_message(st)
        st.messages.refill(now)
        st.bytes.refill(now)
        mb, bb, burst = st.messages, st.bytes, self.burst_seconds
        mb.burst_seconds = bucket_seconds(burst, messages, 1.0)
        bb.burst_seconds = bucket_seconds(burst, nbytes, mean_bytes)
        # A bucket of `burst` has no window (window_cap is INF): only one the floor made
        # larger, or one that had a window to drop, is looked at. A recompute sets every
        # limit, and at PIP-82's scale most of them are large shares.
        st.place = place
        windowed_m = mb.burst_seconds > burst or mb.window is not None
        windowed_b = bb.burst_seconds > burst or bb.window is not None
        if windowed_m or windowed_b:
            quota_m, quota_b = (rate_of(q) for q in group.rates(kind))
            if windowed_m:
                mb.cap_window(window_cap(burst, messages, 1.0),
                              window_turns(burst, messages, 1.0, quota_m, place, "messages", self.wall_offset), now)
            if windowed_b:
                bb.cap_window(window_cap(burst, nbytes, mean_bytes),
                              window_turns(burst, nbytes, mean_bytes, quota_b, place, "bytes", self.wall_offset), now)
        st.messages.set_rate(messages, now)
        st.bytes.set_rate(nbytes, now)

    def forget(self, group_name: str) -> None:
        """Drop a deleted group's buckets."""
        for kind in KINDS:
            if self.states.pop((group_name, kind), None) is not None:
                self.states_version += 1

    def takes_turns(self, group: ResourceGroup, kind: str, messages: float, nbytes: float) -> bool:
        """Whether a limit of (`messages`, `nbytes`) gives the bucket of (group, kind) a
        1-second window in some dimension (`bucket_seconds` above the burst, as `set_limit`
        sizes it): the only buckets whose caps take turns, so the only limits `set_limit`
        reads a Place for. Why ask: laying out a place reads every member's entry, a cost a
        recompute need not pay for the large shares that are most of them at PIP-82's size."""
        st = self.states.get((group.name, kind))
        burst = self.burst_seconds
        return (bucket_seconds(burst, messages, 1.0) > burst
                or bucket_seconds(burst, nbytes, _mean_message(st) if st is not None else 0.0) > burst)

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
        key = (group.name, kind)
        st = self.states.get(key)
        if st is None:
            st = self.state(group, kind, now)
        if self.counted is not None:
            self.counted.add(key)
        mb, bb = st.messages, st.bytes
        # TokenBucket.refill/shortfall/take, with their no-op and common cases inlined
        # (a batch of 100 asks shares one `now`, so only the first ask refills): the
        # same state changes and results as calling them, in fewer Python calls.
        # tests/unit/test_limiter.py checks this against the plain TokenBucket methods.
        if now > mb.updated:
            mb.refill(now)
        if now > bb.updated:
            bb.refill(now)
        short_m = 0.0 if messages <= mb.tokens and mb.rate > 0 else mb.shortfall(messages)
        short_b = 0.0 if nbytes <= bb.tokens and bb.rate > 0 else bb.shortfall(nbytes)
        win_m, win_b = mb.window, bb.window  # None but at small shares (rgd.limiting.second_window)
        tick = st.tick
        st.namespaces.add(namespace)
        st.total_events += 1
        tick.events += 1
        if topic is not None:
            _add_topic(st, topic)
        # SecondWindow.fits with its common case (fits before expiring, within the second's
        # turn: a window without turns has an infinite turn cap and second) inlined.
        # Past the lease, as under the closed limits the node sets at its next recompute (rate 0
        # where limited): only an ask of nothing limited passes.
        leased = now < self.lease_until or not ((messages and mb.rate != INF) or (nbytes and bb.rate != INF))
        if (short_m == 0.0 and short_b == 0.0 and leased
                and (win_m is None or (win_m.total + messages <= win_m.cap and now < win_m.until
                                       and win_m.in_turn + messages <= win_m.turn_cap)
                     or win_m.fits(messages, now))
                and (win_b is None or (win_b.total + nbytes <= win_b.cap and now < win_b.until
                                       and win_b.in_turn + nbytes <= win_b.turn_cap)
                     or win_b.fits(nbytes, now))):
            if mb.rate != INF:
                mb.tokens -= messages
            if bb.rate != INF:
                bb.tokens -= nbytes
            if win_m is not None:
                win_m.add(messages, now)
            if win_b is not None:
                win_b.add(nbytes, now)
            tick.admitted_messages += messages
            tick.admitted_bytes += nbytes
            st.total_admitted_messages += messages
            st.total_admitted_bytes += nbytes
            return _new_decision(Decision, (True, 0.0, mb.tokens, bb.tokens, None))
        if not leased:  # what a bucket of rate 0 says: all of it short, never paid at this limit
            short_m = float(messages) if mb.rate != INF else 0.0
            short_b = float(nbytes) if bb.rate != INF else 0.0
            wait_m = INF if short_m else 0.0
            wait_b = INF if short_b else 0.0
        else:
            wait_m = mb.wait_seconds(short_m)
            wait_b = bb.wait_seconds(short_b)
        if win_m is not None:
            wait_m = max(wait_m, win_m.wait(messages, now))
        if win_b is not None:
            wait_b = max(wait_b, win_b.wait(nbytes, now))
        if wait_m >= wait_b:
            reason = REASON_DEBT if mb.tokens < 0 else REASON_MESSAGES
        else:
            reason = REASON_DEBT if bb.tokens < 0 else REASON_BYTES
        wait = max(wait_m, wait_b)
        if now + wait > self.recompute_at:
            wait = capped_retry(wait, max(0.0, self.recompute_at - now), short_m, short_b, *group.rates(kind))
        if self.shadow_all or group.shadow_mode:
            _shadow_admit(st, messages, nbytes, reason)
            return Decision(False, wait, mb.tokens, bb.tokens, reason)
        tick.throttled_messages += messages
        tick.throttled_bytes += nbytes
        st.total_throttled_messages += messages
        st.total_throttled_bytes += nbytes
        denied = st.throttled_events
        if denied is None:
            st.throttled_events = {reason: 1}
        else:
            denied[reason] = denied.get(reason, 0) + 1
        return Decision(False, wait, mb.tokens, bb.tokens, reason)

    def acquire_batch(self, group: ResourceGroup, kind: str, asks: Sequence[AskLike], now: float,
                      namespaces: Iterable[str] | None = None) -> BatchOutcome:
        """The asks of one (group, kind), in order, at one clock reading: the same
        answers and bucket state as calling `acquire` on each in turn.

        Why it is cheaper: with nothing but whole asks taken from a bucket that is
        neither in debt nor beyond 2**53 tokens, ask k passes exactly when the sum
        of asks 1..k fits what the bucket held, for both buckets (a denied ask
        takes nothing, so the first denial ends the run of passes). Prefix sums are
        non-decreasing, so the run's length is a bisection of each bucket's prefix
        sums, all in C. From the first ask that does not fit (it may still pass by
        the full-bucket rule, or a later smaller one may) `acquire` decides one by
        one. tests/unit/test_batch_semantics.py holds this to `acquire` ask by ask.
        `namespaces`: the asks' distinct namespaces, when the caller has them at hand."""
        key = (group.name, kind)
        st = self.states.get(key)
        if st is None:
            st = self.state(group, kind, now)
        if self.counted is not None:
            self.counted.add(key)
        mb, bb = st.messages, st.bytes
        if now > mb.updated:
            mb.refill(now)
        if now > bb.updated:
            bb.refill(now)
        # what `acquire` adds, denied asks included
        st.namespaces.update(map(_namespace_of, asks) if namespaces is None else namespaces)
        topics = set(map(_topic_of, asks))
        topics.discard(None)
        if topics:
            add_topics(st, topics)  # None discarded
        base_m = _run_base(mb.rate, mb.tokens)
        base_b = _run_base(bb.rate, bb.tokens)
        if base_m is None or base_b is None or now >= self.lease_until:
            admitted = 0
            rem_m = rem_b = None
        else:
            sums_m = list(accumulate(map(_messages_of, asks)))
            sums_b = list(accumulate(map(_nbytes_of, asks)))
            admitted = min(bisect_right(sums_m, base_m), bisect_right(sums_b, base_b))
            if mb.window is not None:
                admitted = min(admitted, _window_run(mb.window, sums_m, now))
            if bb.window is not None:
                admitted = min(admitted, _window_run(bb.window, sums_b, now))
            rem_m = rem_b = None
            if admitted:
                taken_m = sums_m[admitted - 1]
                taken_b = sums_b[admitted - 1]
                if mb.rate != INF:  # what is left is the bucket's whole tokens, whatever the window took
                    rem_m = list(map(sub, repeat(int(mb.tokens), admitted), sums_m[:admitted]))
                    mb.tokens -= taken_m  # exact: the same bits as `admitted` single takes
                if bb.rate != INF:
                    rem_b = list(map(sub, repeat(int(bb.tokens), admitted), sums_b[:admitted]))
                    bb.tokens -= taken_b
                if mb.window is not None:
                    mb.window.add(taken_m, now)
                if bb.window is not None:
                    bb.window.add(taken_b, now)
                tick = st.tick
                tick.admitted_messages += taken_m
                tick.admitted_bytes += taken_b
                st.total_admitted_messages += taken_m
                st.total_admitted_bytes += taken_b
                st.total_events += admitted
                tick.events += admitted
        rest: list[Decision] = []
        if admitted < len(asks):
            acquire = self.acquire
            rest = [acquire(group, kind, a.messages, a.nbytes, a.namespace, a.topic, now) for a in asks[admitted:]]
        return BatchOutcome(admitted, rem_m, rem_b, rest)

    def record_usage(
        self, group: ResourceGroup, kind: str, messages: int, nbytes: int, namespace: str,
        topic: str | None = None,
    ) -> KindState:
        """Charge usage that already happened (dispatch): counted as admitted, never denied."""
        now = self.clock()
        st = self.state(group, kind, now)
        if self.counted is not None:
            self.counted.add((group.name, kind))
        st.messages.charge(messages, now)
        st.bytes.charge(nbytes, now)
        if st.recorded_from is None:  # records since the mark cover from the one before them (recorded_span)
            st.recorded_from = st.born if st.last_recorded is None else st.last_recorded
        st.last_recorded = now
        st.tick.admitted_messages += messages
        st.tick.admitted_bytes += nbytes
        st.total_admitted_messages += messages
        st.total_admitted_bytes += nbytes
        st.total_events += 1
        st.tick.events += 1
        st.namespaces.add(namespace)
        if topic is not None:
            _add_topic(st, topic)
        return st

    # -- tick ----------------------------------------------------------------------------

    def collect(self) -> dict[tuple[str, str], Collected]:
        """Usage and demand since the last collect, with the namespaces and topics seen;
        resets all three."""
        out: dict[tuple[str, str], Collected] = {}
        for key, st in self.states.items():
            out[key] = Collected(st.tick, frozenset(st.namespaces), len(st.topics) if st.topics else 0)
            st.tick = TickCounters()
            st.namespaces = set()
            st.topics = None
        if self.on_collect is not None:
            self.on_collect(out)
        return out


def _shadow_admit(st: KindState, messages: int, nbytes: int, reason: str) -> None:
    """A denial in shadow mode: the broker is told to go ahead, so the ask is admitted usage
    (counted as admitted: it is in the cluster's shares like any traffic), and counted apart
    as what would have been throttled, by the reason it would have been. The buckets are left
    as a denial leaves them: they go on deciding as enforcement would, so what is counted as
    would-have-been-throttled is what enforcing would have throttled of the same asks (charged
    with them, a bucket in debt would call every later ask throttled)."""
    tick = st.tick
    tick.admitted_messages += messages
    tick.admitted_bytes += nbytes
    tick.shadow_throttled_messages += messages
    tick.shadow_throttled_bytes += nbytes
    st.total_admitted_messages += messages
    st.total_admitted_bytes += nbytes
    st.total_shadow_throttled_messages += messages
    st.total_shadow_throttled_bytes += nbytes
    events = st.shadow_events
    if events is None:
        st.shadow_events = {reason: 1}
    else:
        events[reason] = events.get(reason, 0) + 1


def _add_topic(st: KindState, topic: str) -> None:
    if st.topics is None:
        st.topics = {topic}
    else:
        st.topics.add(topic)


def add_topics(st: KindState, topics: Iterable[str]) -> None:
    """Topic names seen by a bucket (its set made on the first)."""
    if st.topics is None:
        st.topics = set(topics)
    else:
        st.topics.update(topics)


def _run_base(rate: float, tokens: float) -> int | None:
    """Whole tokens a run of passes may take from a bucket (asks are whole, so
    `n <= tokens` is `n <= floor(tokens)`), or None when the batch step does not
    apply: a zero rate (denies even empty asks), debt, or more tokens than a float
    counts exactly."""
    if rate == INF:
        return _UNLIMITED_TOKENS if tokens == INF else None
    if rate > 0 and 0 <= tokens < _EXACT:
        return int(tokens)
    return None


def _window_run(window: SecondWindow, sums: list[int], now: float) -> int:
    """How many asks in a row a bucket's 1-second window takes, `sums` their prefix sums:
    ask k fits while sums[k - 1] is within the window's room. An ask larger than the cap
    may still pass on an empty window: the one-by-one step after the run decides it."""
    return bisect_right(sums, math.floor(window.room(now)))


class Collected(NamedTuple):
    counters: TickCounters
    namespaces: frozenset[str]
    topics: int
