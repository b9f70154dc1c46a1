"""One limiter in two processes: the buckets where brokers ask, a mirror where limits are made.

With `--cluster-process`, `rgd run` answers brokers in one process and does the
cluster work (Pulsar, the usage map, the calculator, reports, the usage log) in a
second one, so an ask never waits behind a fold of 99 peers' reports or a recompute
of 5 000 groups (rgd/daemon/serving_process.py, rgd/daemon/cluster_process.py). The buckets must be
where the asks are, and the cluster logic (`ClusterNode`) reads and sets a limiter
as it always has; so each side holds one:

- `ServingLimiter` (serving process) decides every ask, as `Limiter` does, and hands
  over what the asks did since the last hand-over (`take_counts`): per (group, kind)
  the admitted and throttled counts, events, denials by reason, namespaces and topics.
- `MirrorLimiter` (cluster process) is the node's limiter. It folds those counts in
  (`absorb`), so `collect`, the cumulative counters early reports measure and
  /metrics read what the asks did; every limit the node sets, every forget
  and `recompute_at` it records as an operation (`take_ops`) for the serving
  process to apply to the real buckets (`ServingLimiter.apply`). It keeps no
  tokens: its buckets are their rates alone (`MirrorRate`).

What the split costs, bounded: counts reach the node one hand-over later (a twentieth
of a tick), so they fall into the next window or tick, never lost or counted twice
(tests/unit/test_limiter_link.py holds the pair to one Limiter); a limit reaches the
buckets one message later. Only limits that change are sent (a recompute sets every
limit and most stay as they were), so a bucket's byte capacity, sized to at least ten
of its mean messages, is resized when its limit changes rather than at every recompute.
A (group, kind) asked for the first time starts with the share the node would give a
group nobody has reported (`initial_fraction` of its quota: the equal split, or the
floor while unsettled, or all of it for a lone daemon), until the node's own first limit for it arrives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from rgd.config.groups import KINDS, ResourceGroup
from rgd.limiting.limiter import (
    AskLike,
    BatchOutcome,
    Decision,
    InitialLimits,
    KindState,
    Limiter,
    Place,
    add_topics,
    full_quota,
)
from rgd.limiting.token_bucket import DEFAULT_BURST_SECONDS, INF


class KindCounts(NamedTuple):
    """What one (group, kind)'s asks and usage records did since the last hand-over (sent
    as a plain tuple in this order; None where a mapping or set is empty)."""

    group: str
    kind: str
    admitted_messages: int
    admitted_bytes: int
    throttled_messages: int
    throttled_bytes: int
    events: int
    throttled_events: dict[str, int] | None
    namespaces: tuple[str, ...] | None
    topics: tuple[str, ...] | None
    # shadow mode: admitted asks enforcement would have denied (in admitted_* too), by reason
    shadow_messages: int
    shadow_bytes: int
    shadow_events: dict[str, int] | None
    # usage recorded after the fact (None: none this hand-over): the time its records cover,
    # from the record before the first of them to the last (rgd.limiting.limiter.KindState.recorded_span)
    recorded_from: float | None
    last_recorded: float | None


# Operations the cluster process sends the serving one, in order:
#   ("limit", group, kind, messages, bytes, place)   Limiter.set_limit (place: a Place's fields, or None)
#   ("forget", group)   Limiter.forget
#   ("recompute_at", when)   Limiter.recompute_at (CLOCK_MONOTONIC is one clock for both)
#   ("lease_until", when)   Limiter.lease_until: from then the serving side refuses on its own
#   ("initial", fraction)   what a new (group, kind) starts with, as a fraction of its quota
# (pickled across the link as plain tuples; `apply` dispatches on op[0], so the fields are Any)
Op = tuple[Any, ...]


class ServingLimiter(Limiter):
    """The serving process's limiter: `Limiter`'s decisions, plus the counts since the
    last hand-over of every (group, kind) an ask or usage record touched."""

    def __init__(self, clock: Callable[[], float], burst_seconds: float = DEFAULT_BURST_SECONDS,
                 max_debt_seconds: float = 10.0, start_seconds: float | None = None, wall_offset: float = 0.0) -> None:
        super().__init__(clock, burst_seconds, max_debt_seconds, self._provisional, start_seconds, wall_offset)
        # Nothing until the cluster process sends its node's share (it does before it is
        # ready, so no broker asks before): any guess here could be beside peers' shares.
        self.initial_fraction = 0.0
        self._touched: set[tuple[str, str]] = set()
        self._sent_throttled: dict[tuple[str, str], dict[str, int]] = {}
        self._sent_shadow: dict[tuple[str, str], dict[str, int]] = {}  # the same, of shadow_events

    def _provisional(self, group: ResourceGroup, kind: str) -> tuple[float, float]:
        msgs, nbytes = full_quota(group, kind)
        f = self.initial_fraction
        return (msgs if msgs == INF else msgs * f), (nbytes if nbytes == INF else nbytes * f)

    def acquire(self, group: ResourceGroup, kind: str, messages: int, nbytes: int, namespace: str,
                topic: str | None = None, now: float | None = None) -> Decision:
        self._touched.add((group.name, kind))
        return super().acquire(group, kind, messages, nbytes, namespace, topic, now)

    def acquire_batch(self, group: ResourceGroup, kind: str, asks: list[AskLike], now: float,  # type: ignore[override]
                      namespaces: Iterable[str] | None = None) -> BatchOutcome:
        self._touched.add((group.name, kind))
        return super().acquire_batch(group, kind, asks, now, namespaces)

    def record_usage(self, group: ResourceGroup, kind: str, messages: int, nbytes: int, namespace: str,
                     topic: str | None = None) -> KindState:
        self._touched.add((group.name, kind))
        return super().record_usage(group, kind, messages, nbytes, namespace, topic)

    def take_counts(self, limit: int | None = None) -> list[KindCounts]:
        """The counts of every (group, kind) touched since the last call (at most `limit` of
        them; the rest stay for the next call), which starts the next hand-over (tick
        counters, namespaces and topics reset, as `collect` does).
        Plain tuples in KindCounts' field order (a named tuple pickles at twice the cost;
        at 5 000 groups a second that was a third of the hand-over); namespaces and topics
        as tuples, None when empty."""
        if limit is None or len(self._touched) <= limit:
            touched, self._touched = self._touched, set()
        else:
            pop = self._touched.pop
            touched = {pop() for _ in range(limit)}
        states = self.states
        out: list[KindCounts] = []
        append = out.append
        for key in touched:
            st = states.get(key)
            if st is None:
                continue  # forgotten since (a deleted group): nothing left to count
            # Reset in place, not replaced: new objects that live until the next hand-over were
            # what the collector of this process mostly walked (5 000 buckets a second).
            tick = st.tick
            counted = (tick.admitted_messages, tick.admitted_bytes, tick.throttled_messages, tick.throttled_bytes)
            events = tick.events
            tick.admitted_messages = tick.admitted_bytes = tick.throttled_messages = tick.throttled_bytes = 0
            tick.events = 0
            shadowed = (tick.shadow_throttled_messages, tick.shadow_throttled_bytes)
            tick.shadow_throttled_messages = tick.shadow_throttled_bytes = 0
            namespaces = tuple(st.namespaces) if st.namespaces else None
            if namespaces:
                st.namespaces.clear()
            topics = tuple(st.topics) if st.topics else None
            if topics:
                st.topics = None
            denied = _since_sent(self._sent_throttled, key, st.throttled_events)
            shadow_denied = _since_sent(self._sent_shadow, key, st.shadow_events)
            recorded_from, st.recorded_from = st.recorded_from, None  # this hand-over's records, as sent
            append((key[0], key[1], *counted, events, denied, namespaces, topics,  # type: ignore[arg-type]
                    *shadowed, shadow_denied, recorded_from, st.last_recorded if recorded_from is not None else None))
        return out

    @property
    def pending(self) -> int:
        """(group, kind)s touched since the last hand-over."""
        return len(self._touched)

    def forget(self, group_name: str) -> None:
        super().forget(group_name)
        for kind in KINDS:
            self._sent_throttled.pop((group_name, kind), None)
            self._sent_shadow.pop((group_name, kind), None)

    def apply(self, ops: Iterable[Op], groups: Mapping[str, ResourceGroup]) -> None:
        """The cluster process's operations, in order; a group this process does not know
        (deleted, or its config not here yet) is skipped: the next limit names it again."""
        for op in ops:
            what = op[0]
            if what == "limit":
                group = groups.get(op[1])
                st = self.states.get((op[1], op[2]))
                place = None if op[5] is None else Place(*op[5])
                if group is not None and (st is None or st.limit != (op[3], op[4]) or st.place != place):
                    self.set_limit(group, op[2], op[3], op[4], place)
            elif what == "forget":
                self.forget(op[1])
            elif what == "recompute_at":
                self.recompute_at = op[1]
            elif what == "lease_until":
                self.lease_until = op[1]
            elif what == "initial":
                self.initial_fraction = op[1]
            else:
                raise ValueError(f"limiter link: unknown operation {what!r}")


class MirrorLimiter(Limiter):
    """The cluster process's limiter: counts come from the serving process (`absorb`),
    limits go to it (`take_ops`). Nothing asks it for tokens."""

    def __init__(self, clock: Callable[[], float], burst_seconds: float = DEFAULT_BURST_SECONDS,
                 max_debt_seconds: float = 10.0, initial_limits: InitialLimits = full_quota,
                 start_seconds: float | None = None, wall_offset: float = 0.0) -> None:
        self._ops: list[Op] = []
        self._recompute_at = INF
        self._lease_until = INF
        # Called with no arguments whenever an operation is recorded (the link wakes its sender).
        self.on_op: Callable[[], None] = _nothing
        super().__init__(clock, burst_seconds, max_debt_seconds, initial_limits, start_seconds, wall_offset)

    def _record(self, op: Op) -> None:
        self._ops.append(op)
        self.on_op()

    def take_ops(self) -> list[Op]:
        ops, self._ops = self._ops, []
        return ops

    @property
    def recompute_at(self) -> float:
        return self._recompute_at

    @recompute_at.setter
    def recompute_at(self, when: float) -> None:
        self._recompute_at = when
        self._record(("recompute_at", when))

    @property
    def lease_until(self) -> float:
        return self._lease_until

    @lease_until.setter
    def lease_until(self, when: float) -> None:
        if when != self._lease_until:  # set at every recompute; it moves with acknowledgements
            self._lease_until = when
            self._record(("lease_until", when))

    def _new_state(self, group: ResourceGroup, kind: str, now: float) -> KindState:
        """A bucket's rates alone (`MirrorRate`): nothing asks the mirror for tokens. The
        serving process started it provisionally: the node's limit replaces that."""
        msgs, nbytes = self.initial_limits(group, kind)
        self._record(("limit", group.name, kind, msgs, nbytes, None))
        # born now, as Limiter's: the node measures a new bucket's first demand from its birth
        return KindState(MirrorRate(msgs), MirrorRate(nbytes), born=now)  # type: ignore[arg-type]  # rates are all it reads

    def takes_turns(self, group: ResourceGroup, kind: str, messages: float, nbytes: float) -> bool:
        """Always: whether the serving process's bucket takes turns depends on its own counts
        of the mean message, which the ones absorbed here trail, so every limit carries its place."""
        return True

    def set_limit(self, group: ResourceGroup, kind: str, messages: float, nbytes: float,
                  place: Place | None = None) -> None:
        st = self.states.get((group.name, kind))
        before = (st.limit, st.place) if st is not None else None
        st = self.state(group, kind)
        if st.limit != (messages, nbytes):
            self.limit_changes += 1
            st.messages.rate = messages
            st.bytes.rate = nbytes
        st.place = place
        if before != ((messages, nbytes), place):  # a recompute sets every limit; most stay as they were
            self._record(("limit", group.name, kind, messages, nbytes, None if place is None else tuple(place)))

    def forget(self, group_name: str) -> None:
        super().forget(group_name)
        self._record(("forget", group_name))

    def absorb(self, counts: Iterable[KindCounts], groups: Mapping[str, ResourceGroup]) -> None:
        """Fold the serving process's counts in, as if its asks had been made here; counts
        of a group no longer configured are dropped, as its buckets are."""
        for (name, kind, adm_m, adm_b, thr_m, thr_b, events, denied, namespaces, topics,
             shadow_m, shadow_b, shadow_denied, recorded_from, last_recorded) in counts:
            group = groups.get(name)
            if group is None:
                continue
            st = self.state(group, kind)
            if self.counted is not None:
                self.counted.add((name, kind))
            tick = st.tick
            tick.admitted_messages += adm_m
            tick.admitted_bytes += adm_b
            tick.throttled_messages += thr_m
            tick.throttled_bytes += thr_b
            tick.events += events
            st.total_admitted_messages += adm_m
            st.total_admitted_bytes += adm_b
            st.total_throttled_messages += thr_m
            st.total_throttled_bytes += thr_b
            st.total_events += events
            if denied:
                st.throttled_events = _added(st.throttled_events, denied)
            if shadow_m or shadow_b or shadow_denied:
                tick.shadow_throttled_messages += shadow_m
                tick.shadow_throttled_bytes += shadow_b
                st.total_shadow_throttled_messages += shadow_m
                st.total_shadow_throttled_bytes += shadow_b
                if shadow_denied:
                    st.shadow_events = _added(st.shadow_events, shadow_denied)
            if namespaces:
                st.namespaces.update(namespaces)
            if topics:
                add_topics(st, topics)
            if recorded_from is not None:  # the records since the node's mark begin at the first hand-over's
                if st.recorded_from is None:
                    st.recorded_from = recorded_from
                st.last_recorded = last_recorded


def _since_sent(sent_by_key: dict[tuple[str, str], dict[str, int]], key: tuple[str, str],
                events: dict[str, int] | None) -> dict[str, int] | None:
    """A bucket's cumulative events by reason, as the increase since they were last handed
    over (None: none), recording them as handed over."""
    if not events:
        return None
    sent = sent_by_key.setdefault(key, {})
    delta = {r: n - sent.get(r, 0) for r, n in events.items() if n != sent.get(r, 0)}
    sent.update(events)
    return delta or None


def _added(events: dict[str, int] | None, delta: dict[str, int]) -> dict[str, int]:
    """`events` (made on the first) with `delta` added reason by reason."""
    out = events if events is not None else {}
    for reason, n in delta.items():
        out[reason] = out.get(reason, 0) + n
    return out


class MirrorRate:
    """What the mirror keeps of a bucket: its rate. A token bucket, its tokens and clock
    readings were ~170 of a mirrored bucket's bytes at 10 000 buckets (~3 MB), and only the
    serving process's buckets decide asks."""

    __slots__ = ("rate",)

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def __repr__(self) -> str:
        return f"MirrorRate({self.rate!r})"


def initial_fraction(limits_for: Callable[[ResourceGroup], Mapping[str, tuple[float, float]]]) -> float:
    """The share of its quota the node gives a group nobody has reported, read off the
    node's own calculator (`ClusterNode.limits_for`) on a group of quota 1 under a name no
    report can carry (empty: names are checked non-empty), so it follows the node's state
    (unsettled, alone, members, lease) without a second copy of those rules."""
    probe = ResourceGroup("", publish_msgs=1.0)
    got = limits_for(probe)["publish"][0]
    return min(1.0, max(0.0, got)) if got != INF else 1.0


def _nothing() -> None:
    return None


__all__ = ["KindCounts", "MirrorLimiter", "Op", "ServingLimiter", "initial_fraction"]
