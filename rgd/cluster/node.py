"""One daemon's cluster logic without I/O: the tick, the usage map, the limiter.

The daemon (rgd/daemon/wiring.py) wraps this with Pulsar, HTTP and the usage log; the
simulator (sim/node.py) wraps it with a simulated topic and clock. So the
algorithm that converges in the simulator is, line for line, the one that runs.

A tick, in order:
  tick_report   collect the limiter's counters, suppress (PIP-82), build the
                report, put our own entry in the map as peers will see it
  receive       per message from the topic: vet, fold into the map (keeper)
  upkeep        evict silent members, expire idle entries (only while we hear
                the topic: during our own outage silence is ours, not theirs)
  announcement  a full report when a new member appeared, so its map is
                complete by its second tick
  recompute     the quota calculator -> the limiter, for the groups whose inputs
                changed (every group when members, settling or hearing moved, and
                once per refresh period: tick_targets)

Between ticks, `react` (every `react_seconds`: the daemon's timer, the
simulator's sub-step) folds what arrived, publishes an early report for any
group whose demand moved beyond the suppression tolerance (measured over the
last `react_window`), and recomputes the groups that changed: a demand shift is
met in a few delivery times instead of a tick or two. Our own increase counts
only once the report announcing it has been out for the measured delivery delay
plus one react interval (rgd/cluster/own_history.py, rgd/cluster/delivery_delay.py).

Start-up: we take only the floor until we are `settled`: we have heard the topic
for a tick plus the measured delivery delay (our own reports come back on the
topic, so a lone daemon measures it too), so every live peer's report has had
time to reach us; only then does "nobody has reported" mean we are alone. For a
round trip after our first report, a peer we have no complete report of (one naming
all its groups) counts as busy in every group it has no entry for: its tick reports
suppress groups that barely moved, and its announcement of us is still on its way
(`announcement_claims`). A same-id restart (`Resume`) settles as soon as every peer
its predecessor knew has spoken again, and counts its own demand as peers still hold
it from the predecessor, so it resumes near its old share instead of from the floor.

A group's first demand: until anyone reports demand for a group every member takes
quota / members; from the first report on, each member keeps that claim until it
has reported (`unreported_claims`), and a member without traffic there says so at
once (`idle_answer`), so a group's first second is not spent at the floor.

Outage: while we cannot hear the topic, shares stay as they were for
`outage_grace` seconds, then fall to quota / members-last-known-alive (never
the full quota a lone daemon would grant itself).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Container, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar, overload

import numpy as np

from rgd.cluster.delivery_delay import DeliveryDelay
from rgd.cluster.map_keeper import MapKeeper, member_tag
from rgd.cluster.own_history import OwnHistory
from rgd.cluster.report_builder import (
    HEADER_SLACK,
    INDEX_BYTES_PER_ENTRY,
    MAX_REPORT_BYTES,
    bound_report,
    demand_figures,
    drop_silent_kinds,
    figures,
    group_entries,
    peer_usage,
    split_points,
)
from rgd.cluster.report_codec import (
    REPLAY_WINDOW_MS,
    FoldScope,
    HmacKeys,
    Rejected,
    check_plausible,
    decode_report,
    groups_cap,
)
from rgd.cluster.suppression import SuppressionPolicy, SuppressionState, moved, select_reports
from rgd.cluster.usage_map import UsageMap
from rgd.config.groups import KINDS, QuotaCeilings, ResourceGroup
from rgd.limiting.limiter import Collected, Limiter, Place, TickCounters, largest_bucket_seconds, rate_of
from rgd.limiting.token_bucket import DEFAULT_BURST_SECONDS
from rgd.quota.calculator import (
    NEW_BUCKET_SECONDS,
    PEER_VIEW_STRATEGIES,
    CalculatorCall,
    calculate_many,
    start_seconds_for,
)
from rgd.quota.inputs import QuotaParams
from rgd.quota.model import IDLE, GroupLimits, KindRates, PeerUsage
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage, UsageReport

REJECT_OWN = "own"  # our own report echoed by the topic: ignored, not an error
EARLY_BUDGET_MIN = 8  # early report entries per tick a daemon with few groups may always send
# A window's demand must differ from the last reported one by more than this many messages
# counted in the window (see moved_beyond_counting).
EARLY_MIN_EVENTS = 2.0
MEMBER_ADMISSION_BURST = 8.0  # new members admitted at once before member_admissions_per_tick applies
TICK_SLICE_GROUPS = 500  # tick_report_steps builds this many groups' entries (or figures) a step (~7 ms)


def has_demand(gu: GroupUsage) -> bool:
    """Whether an entry counts any message or byte, admitted or throttled."""
    return any(k.admitted_messages or k.admitted_bytes or k.throttled_messages or k.throttled_bytes
               for k in (gu.publish, gu.dispatch, gu.replication))


def moved_beyond_counting(last: tuple[float, ...], now: tuple[float, ...], tolerance: float,
                          window_ticks: float) -> bool:
    """Whether a window's figures (rgd.cluster.report_builder.figures, per tick) moved beyond the
    tolerance *and* beyond what counting whole messages in a short window can tell apart.
    A window of w ticks counts rate * w messages, give or take one: at 4 msg/s a 0.4 s
    window reads 2.5 or 5 msg/s, both "moved" by the tolerance alone, and an early report
    of either would set every peer's view (and our own, as the min of what peers may hold)
    to a demand that never was. A figure counts as moved only if its difference over the
    window exceeds EARLY_MIN_EVENTS messages (in bytes: that many messages of the kind's
    mean size), so a real step (4 -> 16 msg/s) is still reported within the window."""
    for k in range(0, min(len(last), len(now)), 4):
        a, b = last[k:k + 4], now[k:k + 4]
        msgs = max(b[0] + b[2], a[0] + a[2])
        size = (max(b[1] + b[3], a[1] + a[3]) / msgs) if msgs > 0 else 0.0
        for i, (x, y) in enumerate(zip(a, b)):
            unit = size if i % 2 else 1.0
            diff = abs(x - y)
            if diff > tolerance * max(abs(x), abs(y)) and diff * window_ticks > EARLY_MIN_EVENTS * unit:
                return True
    return len(last) != len(now)


# A bucket with fewer events (asks, usage records) than this per react window, averaged over
# the trailing tick, is measured over the trailing tick (see ClusterNode._window_counts).
BURSTY_EVENTS = 2.0
FIGURES = 4 * len(KINDS)  # rgd.cluster.report_builder.figures: usage and demand of every kind
_TOTALS = attrgetter("total_admitted_messages", "total_admitted_bytes", "total_throttled_messages",
                     "total_throttled_bytes", "total_events")


class _KeyLayout:
    """The limiter's buckets (group, kind) at one snapshot, in the limiter's order, and the
    groups they belong to in name order (the order early reports consider them in)."""

    __slots__ = ("index", "key_cols", "key_group", "keys", "names", "rows")

    def __init__(self, keys: tuple[tuple[str, str], ...]) -> None:
        self.keys = keys
        self.rows = {key: j for j, key in enumerate(keys)}
        self.names = sorted({g for g, _ in keys})
        self.index = {name: i for i, name in enumerate(self.names)}
        self.key_group = np.fromiter((self.index[g] for g, _ in keys), dtype=np.intp, count=len(keys))
        kind_at = {kind: i for i, kind in enumerate(KINDS)}
        first = np.fromiter((4 * kind_at[k] for _, k in keys), dtype=np.intp, count=len(keys))
        self.key_cols = first[:, None] + np.arange(4)  # each bucket's four figures in its group's row

    def per_group(self, present: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The counts of the buckets `present` (one row of four per bucket) as one row of
        FIGURES per group, in name order (zeros where a group has no such bucket)."""
        out = np.zeros((len(self.names), FIGURES), dtype=np.int64)
        out[self.key_group[present][:, None], self.key_cols[present]] = counts[present]
        return out


class _Snapshot:
    """The limiter's cumulative counters at one react, kept for a tick: whole (`full`, one
    int64 row of five per bucket of `layout`) for the newest snapshot and for one whose
    successor has other buckets; otherwise only what its successor changed (`undo`: those
    rows and their values here), read back from the newest by `_SnapshotLog.counters_at`.
    At PIP-82's scale a tick's 20 snapshots of 10 000 buckets held whole were ~8 MB; a
    react changes a few hundred rows."""

    __slots__ = ("at", "full", "layout", "undo_rows", "undo_values")

    def __init__(self, at: float, layout: _KeyLayout, full: np.ndarray) -> None:
        self.at = at
        self.layout = layout
        self.full: np.ndarray | None = full
        self.undo_rows: np.ndarray | None = None  # rows of the previous snapshot this one changed
        self.undo_values: np.ndarray | None = None  # and their values there


class _SnapshotLog:
    """The react snapshots of the last tick, oldest first (see `_Snapshot`)."""

    def __init__(self) -> None:
        self.items: deque[_Snapshot] = deque()

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> _Snapshot:
        return self.items[i]

    def append(self, at: float, layout: _KeyLayout, counters: np.ndarray, changed: np.ndarray | None) -> None:
        """`changed`: the rows that may differ from the newest snapshot's, when its layout is
        `layout` (None: compare all)."""
        snap = _Snapshot(at, layout, counters)
        if self.items:
            prev = self.items[-1]
            if prev.layout is layout and prev.full is not None:
                before = prev.full
                rows = (np.flatnonzero((before != counters).any(axis=1)) if changed is None
                        else changed)
                snap.undo_rows, snap.undo_values = rows, before[rows]
                prev.full = None
        self.items.append(snap)

    def popleft(self) -> None:
        self.items.popleft()

    def counters_at(self, i: int) -> np.ndarray:
        """The counters of snapshot `i` (read only: it may be the stored array)."""
        items = self.items
        j = len(items) - 1
        cur = items[j].full
        assert cur is not None
        owned = False
        while j > i:
            prev = items[j - 1]
            if prev.full is not None:
                cur, owned = prev.full, False
            else:
                snap = items[j]
                if not owned:
                    cur, owned = cur.copy(), True
                cur[snap.undo_rows] = snap.undo_values
            j -= 1
        return cur


class _Window(NamedTuple):
    """The counts over one react window: per bucket of `layout`, whether it was there at the
    window's start (`present`) and its four counters' increase (admitted and throttled
    messages and bytes); and the same over the trailing tick (`long_*`: as much of a tick as
    the snapshots cover), which confirms a move the short window sees and stands in for it
    where traffic comes in bursts (see early_report)."""

    span: float
    layout: _KeyLayout
    present: np.ndarray
    counts: np.ndarray
    long_span: float
    long_present: np.ndarray
    long_counts: np.ndarray
    bursty: np.ndarray  # per bucket: too few events in the trailing tick for the short window
    per_event: np.ndarray  # per bucket: messages per event (ask, usage record) over its life, at least 1


_V = TypeVar("_V")  # the values of a _WindowPart
_D = TypeVar("_D")  # pop's default


class _FigureDict(dict[str, tuple[float, ...]]):
    """Per group, the figures as last reported; remembers which groups were written since
    the early report last read it, so that react keeps its array copy in step cheaply."""

    def __init__(self) -> None:
        super().__init__()
        self.changed: set[str] = set()

    def __setitem__(self, key: str, value: tuple[float, ...]) -> None:
        self.changed.add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.changed.add(key)
        super().__delitem__(key)

    @overload
    def pop(self, key: str, /) -> tuple[float, ...]: ...
    @overload
    def pop(self, key: str, default: _D, /) -> tuple[float, ...] | _D: ...
    def pop(self, key: str, /, *default: Any) -> Any:
        self.changed.add(key)
        return super().pop(key, *default)


class _WindowView:
    """One react's window, read by the tick's restatement (ClusterNode.tick_report): as
    `figures` and `entries`, mappings over the groups the react measured, each value built
    when first read, from the window's counts, the limits in force at that react (those
    changed since are in ClusterNode._limits_before) and the config then."""

    def __init__(self, node: ClusterNode, window: _Window, measured: np.ndarray, now_figures: np.ndarray,
                 groups: Mapping[str, ResourceGroup]) -> None:
        self.node = node
        self.window = window
        self.measured = measured
        self.now_figures = now_figures
        self.groups = groups
        self.gone: set[str] = set()  # forgotten since (ClusterNode.forget_group)
        self.built: dict[str, GroupUsage] = {}
        # The two mappings over it (_WindowPart) hold the view, never the other way round:
        # a view referring to its parts was a reference cycle, so every react's view (and
        # every entry it built) waited for a full garbage collection to be freed.

    def has(self, name: str) -> bool:
        i = self.window.layout.index.get(name)
        return i is not None and bool(self.measured[i]) and name not in self.gone

    def figure(self, name: str) -> tuple[float, ...]:
        return tuple(self.now_figures[self.window.layout.index[name]].tolist())

    def span_entry(self, name: str) -> tuple[float, GroupUsage]:
        """The window's length and the group's entry (`entries` of the view)."""
        return self.window.span, self.entry(name)

    def entry(self, name: str) -> GroupUsage:
        """rgd.cluster.report_builder.group_entries' entry for the group, as that react built it."""
        gu = self.built.get(name)
        if gu is not None:
            return gu
        layout, w = self.window.layout, self.window
        states = self.node.limiter.states
        before = self.node._limits_before
        collected: dict[tuple[str, str], Collected] = {}
        picked: dict[tuple[str, str], object] = {}
        for kind in KINDS:
            key = (name, kind)
            j = layout.rows.get(key)
            if j is None:
                continue  # a bucket created since: not in that react's entry
            if w.present[j]:
                collected[key] = Collected(TickCounters(*w.counts[j].tolist()), frozenset(), 0)
            st = states.get(key)
            if st is not None:
                limits = before.get(key)
                picked[key] = st if limits is None else _LimitsThen(*limits)
        gu = self.built[name] = group_entries(collected, picked, self.groups)[name]  # type: ignore[arg-type]
        return gu


class _Rate(NamedTuple):
    rate: float


class _LimitsThen:
    """A bucket's limits as they were (what rgd.cluster.report_builder.kind_usage reads of a state)."""

    __slots__ = ("bytes", "messages")

    def __init__(self, messages: float, nbytes: float) -> None:
        self.messages = _Rate(messages)
        self.bytes = _Rate(nbytes)


class _WindowPart(Mapping[str, _V]):
    """`figures` or `entries` ((window length, entry)) of a _WindowView, as a mapping;
    `value` (a method of the view: figure, span_entry) reads one."""

    def __init__(self, view: _WindowView, value: Callable[[str], _V]) -> None:
        self.view = view
        self.value = value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.view.has(name)

    def __getitem__(self, name: str) -> _V:
        if not self.view.has(name):
            raise KeyError(name)
        return self.value(name)

    def __iter__(self) -> Iterator[str]:
        layout = self.view.window.layout
        return (n for i, n in enumerate(layout.names) if self.view.measured[i] and n not in self.view.gone)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    @overload
    def pop(self, name: str, /) -> _V: ...
    @overload
    def pop(self, name: str, default: _D, /) -> _V | _D: ...
    def pop(self, name: str, /, *default: _D) -> _V | _D:
        if self.view.has(name):
            value = self[name]
            self.view.gone.add(name)
            return value
        if default:
            return default[0]
        raise KeyError(name)


def _moved_rows(last: np.ndarray, now: np.ndarray, tolerance: float, window_ticks: float,
                per_event: np.ndarray | None = None) -> np.ndarray:
    """moved_beyond_counting for many groups at once (rows of FIGURES figures): the same
    float operations, element by element, so the same answers. `per_event` (rows x kinds):
    messages per event (ask, usage record) where they come in batches; a window counts whole
    events, so its noise is EARLY_MIN_EVENTS events' worth of messages, not messages."""
    out = np.zeros(len(last), dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(0, FIGURES, 4):
            grain = 1.0 if per_event is None else per_event[:, k // 4]
            a, b = last[:, k:k + 4], now[:, k:k + 4]
            msgs = np.maximum(b[:, 0] + b[:, 2], a[:, 0] + a[:, 2])
            size = np.where(msgs > 0, np.maximum(b[:, 1] + b[:, 3], a[:, 1] + a[:, 3]) / msgs, 0.0)
            for i in range(4):
                x, y = a[:, i], b[:, i]
                diff = np.abs(x - y)
                unit = (size if i % 2 else 1.0) * grain
                out |= ((diff > tolerance * np.maximum(np.abs(x), np.abs(y)))
                        & (diff * window_ticks > EARLY_MIN_EVENTS * unit))
    return out


def place_among(entries: Mapping[str, object], node_id: str) -> Place:
    """Our place among a group's members (the daemons with an entry in it, and we), sorted
    by id: every member computes the same order from the same ids, so the members' places
    are 0..n-1 once their maps agree (rgd.limiting.window_turns: whose turn it is)."""
    rank = 0
    members = 1
    for daemon in entries:
        if daemon != node_id:
            members += 1
            if daemon < node_id:
                rank += 1
    return Place(rank, members)


def cut_below_demand(old: tuple[float, float], new: tuple[float, float], own: KindRates,
                     margin: float) -> tuple[bool, bool]:
    """Per dimension (messages, bytes): whether the limit was just cut below our own demand
    as last measured (beyond `margin`) while nothing was throttled: the bucket was not
    emptied, so it may hold up to a second of the old limit, and every saved token would be
    spent on top of the new limit, above the share the others leave us (Limiter.drain):
    they go. A bucket cut but still above our demand keeps them, scaled
    (TokenBucket.set_rate); a throttled one holds only the refill since its last ask.

    A cut of at most one message (in bytes, one of our mean messages) keeps them too. At a
    few messages a second the limits move by the counting granule from tick to tick as
    noisy demand is split in whole messages, and draining on each step down threw away what
    the daemon saved under the step up: an always-busy daemon with a share of 3.8 messages
    a second admitted 3.5 (fuzz case 98, 89 % of the quota used). Saved tokens are spent at
    our demand less the new limit, which such a cut leaves under one message a second: the
    granule the limits move by anyway."""
    if own.throttled_messages > 0 or own.throttled_bytes > 0:
        return False, False
    mean_bytes = own.demand_bytes / own.demand_messages if own.demand_messages > 0 else 0.0
    return (old[0] - new[0] > 1.0 and own.demand_messages > new[0] * (1.0 + margin),
            old[1] - new[1] > mean_bytes and own.demand_bytes > new[1] * (1.0 + margin))


@dataclass(frozen=True)
class NodeConfig:
    node_id: str
    tick_seconds: float = 1.0
    strategy: str = "rgd"
    params: QuotaParams = field(default_factory=QuotaParams)
    suppression: SuppressionPolicy = field(default_factory=SuppressionPolicy)
    ttl_ticks: int = 3
    announce: bool = True  # a full report when a new member appears
    burst_seconds: float = DEFAULT_BURST_SECONDS
    max_debt_seconds: float = 10.0
    outage_grace: float = 10.0
    react_seconds: float = 0.1  # how often react() runs (early reports, recompute of what changed)
    early_reports: bool = True  # publish a group's report as soon as its demand moves (not only on the tick)
    # At most one early report per group per early_gap_ticks, and per tick at most max(8, groups)
    # early entries (and as many restated at the tick): report bytes/s <= 3 unsuppressed tick reports'.
    early_gap_ticks: float = 0.25
    start_seconds: float | None = None  # a new group's bucket starts with this much of its limit (None: full)
    # Unsigned reports only: new members admitted per tick (after a burst of
    # MEMBER_ADMISSION_BURST), so a burst of made-up daemon ids cannot split every share
    # among thousands; None: any rate (signed: every member holds the key).
    member_admissions_per_tick: float | None = None
    # Peers' entries of groups we do not serve are folded only while the map holds fewer than
    # this many such groups (see ClusterNode.folds).
    unserved_groups_held: int = 500

    @property
    def react_window(self) -> float:
        """Demand between ticks is measured over this long: short enough to see a shift
        within a few react intervals, long enough to smooth acquire granularity."""
        return max(2.0 * self.react_seconds, 0.2 * self.tick_seconds)

    @property
    def safety_ttl_ticks(self) -> int:
        """A group entry unconfirmed this long goes even without evidence of idleness:
        three refresh periods plus the TTL."""
        return 3 * (self.suppression.max_skipped_ticks + 1) + self.ttl_ticks


@dataclass(frozen=True)
class Resume:
    """What a daemon's predecessor (same id, an earlier incarnation) left behind, so a
    restart resumes near its old share instead of from the floor.

    Peers hold a member's group entries until they evict it (a leaving report: at once;
    silence: after the TTL), and a new incarnation's reports replace them group by
    group. So while the predecessor is not evicted, its last entries are what peers
    count for us: our own demand as peers see it is the smaller of those and our new
    reports (rgd/cluster/own_history.py), exactly as for any report of ours still in flight.
    And the members it knew are the peers to wait for: once each has spoken again our
    map is as complete as a tick of listening would make it (peers announce a full
    report when they see our new incarnation).
    """

    members: frozenset[str]  # peers the predecessor knew alive at its end
    entries: Mapping[str, PeerUsage]  # its last entry per group, as peers hold it
    ended_at: float  # when its last report went out (this clock)
    graceful: bool  # it sent a leaving report: peers evicted it at once


LimitInputs = CalculatorCall | GroupLimits  # limits known without the calculator are given as such


def evaluate(inputs: LimitInputs) -> GroupLimits:
    """Limits from `ClusterNode.limit_inputs` (pure: safe in a worker thread)."""
    return evaluate_all([inputs])[0]


def evaluate_all(inputs: Sequence[LimitInputs]) -> list[GroupLimits]:
    """Limits from many `ClusterNode.limit_inputs` at once: the calculator's calls in one
    batch (`calculate_many`), far cheaper per group than one call each."""
    calls = [i for i in inputs if isinstance(i, CalculatorCall)]
    computed = iter(calculate_many(calls))
    return [next(computed) if isinstance(i, CalculatorCall) else i for i in inputs]


@dataclass
class TickOutcome:
    report: UsageReport
    sent: list[str]
    suppressed: int
    local_rates: dict[tuple[str, str], tuple[float, float]]  # this tick's admitted msgs/s, bytes/s
    # Groups left out of `report` because reported early this tick, restated with their current
    # demand (a second chance for peers that lost the early report); None if there are none.
    restated: UsageReport | None = None


@dataclass(frozen=True)
class FoldOutcome:
    """What folding one message did."""

    report: UsageReport | None
    reason: str = ""  # why rejected ("" = accepted)
    lost: int = 0
    new_member: bool = False

    @property
    def accepted(self) -> bool:
        return not self.reason


class ClusterNode:
    def __init__(
        self,
        config: NodeConfig,
        incarnation: int,
        clock: Callable[[], float],
        wall_ms: Callable[[float], int],
        groups: Callable[[], Mapping[str, ResourceGroup]],
        keys: HmacKeys | None = None,
        hearing: bool = True,
        resume: Resume | None = None,
        limiter_class: type[Limiter] = Limiter,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.incarnation = incarnation
        self.clock = clock
        self.wall_ms = wall_ms
        self.groups = groups
        self.keys = keys
        self.sequence = 0
        self.ticks = 0
        # Reports too large for one broker message: the head report's sequence -> the reports
        # that carry the rest of its entries, to publish right after it (see _fit).
        self.continuations: dict[int, list[UsageReport]] = {}
        self._folded_since_tick: set[str] = set()  # peers whose reports we folded since our last tick report
        self.namespaces_trimmed = 0  # namespace names _fit left out, not yet counted by the daemon
        # Plausibility around a config change (see apply_config): the groups as last applied,
        # and per recent change the groups it changed, as they were, with when that ends.
        self._applied_groups: dict[str, ResourceGroup] = dict(groups())
        self._earlier_quotas: deque[tuple[float, dict[str, ResourceGroup]]] = deque()
        self.usage_map = UsageMap()
        self.keeper = MapKeeper(
            self.usage_map, self.node_id, config.suppression.max_skipped_ticks + 1,
            config.ttl_ticks * config.tick_seconds, config.safety_ttl_ticks * config.tick_seconds,
            replay_window_seconds=REPLAY_WINDOW_MS / 1000.0 if keys is not None else None,
            admissions_per_second=(config.member_admissions_per_tick / config.tick_seconds
                                   if keys is None and config.member_admissions_per_tick is not None else None),
            admission_burst=MEMBER_ADMISSION_BURST,
            report_interval_seconds=config.tick_seconds,
        )
        self.suppression_state: SuppressionState[str] = SuppressionState()
        # Our next tick report names every group (set by `announcement`): a second chance for
        # a newcomer that lost the announcement.
        self._announce_again = False
        # `limiter_class`: rgd.daemon.limiter_link.MirrorLimiter where the buckets live in another
        # process (`rgd run --cluster-process`).
        now = clock()
        self.limiter = limiter_class(clock, config.burst_seconds, config.max_debt_seconds,
                                     initial_limits=self._initial_limits, start_seconds=config.start_seconds,
                                     wall_offset=wall_ms(now) / 1000.0 - now)
        # Our own entries as sent, to count our demand as peers may hold it (see calculator doc).
        self.history = OwnHistory()
        self.delay = DeliveryDelay(config.tick_seconds, 3.0 * config.tick_seconds)
        self._entries: dict[str, GroupUsage] = {}
        self._sent_this_tick: set[str] = set()
        # Between ticks: groups to recompute, counter snapshots for the windowed demand,
        # when each group was last reported early.
        self.dirty: set[str] = set()
        self.all_dirty = False
        # At each react over the last tick: when, the buckets then, and their cumulative
        # counters (four per bucket, and the events: asks and usage records).
        self._snapshots = _SnapshotLog()
        # The limiter and its states_version at the newest snapshot read in full: while both
        # hold, the next snapshot rereads only the buckets counted since.
        self._counters_version: tuple[object, int] | None = None
        self._early_at: dict[str, float] = {}
        self._early_this_tick: set[str] = set()
        self._last_figures = _FigureDict()  # per group, as last sent (tick or early)
        # its rows for early_report (_last_figures_array)
        self._last_cache: tuple[_KeyLayout, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._early_mentions = 0  # group entries in early reports since the last tick
        self._born: dict[tuple[str, str], float] = {}  # when react first saw each (group, kind)
        # The last react's demand per tick, and its entry (window length), of the groups it measured.
        self._window_figures: dict[str, tuple[float, ...]] | _WindowPart[tuple[float, ...]] = {}
        self._window_entries: dict[str, tuple[float, GroupUsage]] | _WindowPart[tuple[float, GroupUsage]] = {}
        # Limits in force at the last react, of buckets whose limit changed since (see _WindowView).
        self._limits_before: dict[tuple[str, str], tuple[float, float]] = {}
        self.early_reports_sent = 0
        self._served: frozenset[str] = frozenset()
        self._served_size = -1
        self._scope: FoldScope | None = None  # see folds
        # What the last full recompute was computed under (see tick_targets), and ticks since.
        self._full_state: tuple[object, ...] | None = None  # compared for equality only
        self._ticks_since_full = 0
        self._restated_this_tick: set[str] = set()
        self._scope_stamp: tuple[int, int] = (0, -1)
        # The fold window's cutoff and the state every group's limits depend on, at the last
        # `changed` (see there).
        self._changed_at: tuple[float | None, tuple[object, ...]] = (None, ())
        # Outage state; `heard_since`: when we started hearing the topic (None: not hearing).
        self.hearing = hearing
        self.heard_since: float | None = clock() if hearing else None
        self._settled = False
        self._settled_at = -math.inf
        self._had_peers = False  # some peer has reported since we started
        self.deaf_since: float | None = None
        self.members_at_deafness = 1
        self.left = False  # we sent a leaving report
        self._heard: set[str] = set()  # peers whose reports we folded since we started
        self._members_reported = 0  # the most members a peer's report counted while we settle
        self._started_ms = wall_ms(clock())  # see knew_us
        self._first_out_ms: int | None = None  # when our first report went out (see answered_us)
        self._complete: set[str] = set()  # peers we folded a report naming all their groups from
        self._resume_members: set[str] = set()
        self._resumed: set[str] = set()  # groups whose own entry is still the predecessor's
        self._hello_due = resume is not None
        # Groups that just got their first demand (see unreported_claims): when we saw it and
        # the members we knew then; groups whose claim is still ours; groups we must answer
        # with an idle entry (we have no traffic there); per peer, the publish time of its
        # last tick report (not a restatement) we folded.
        self._new_groups: dict[str, tuple[float, frozenset[str]]] = {}
        self._claim_open: set[str] = set()
        self._answer_due: set[str] = set()
        self._tick_seen: dict[str, int] = {}
        # New groups our tick reports name while we have demand there, whatever suppression
        # says, until then (see _first_demand).
        self._named_until: dict[str, float] = {}
        self._resume_ended_at = 0.0
        if resume is not None:
            self._resume(resume)

    def _resume(self, resume: Resume) -> None:
        """Take over what peers still hold of our predecessor (see Resume); the hello
        report confirms it in time or drops it. After a graceful leave peers hold nothing
        and we start as any newcomer, but still settle on the members."""
        now = self.clock()
        self._resume_members = set(resume.members) - {self.node_id}
        self._resume_ended_at = resume.ended_at
        if resume.graceful:
            return
        for name, usage in resume.entries.items():
            self.usage_map.set_local(self.node_id, name, usage, now)
            self.history.add(name, resume.ended_at, usage)
            self._resumed.add(name)

    def hello_report(self, now: float) -> UsageReport | None:
        """Once, right after a same-id restart: a report at once (not at the first tick or
        the first measured window), so peers see our new incarnation and announce a full
        report each, and we settle in two delivery times (see settled). It restates the
        predecessor's entries peers still count for us (so folding it changes nothing for
        them: a new incarnation's report replaces the old one's entries group by group,
        and drops those it does not name); after a graceful leave it names no group.
        Counts over one second, rounded up: peers then reserve at least what we count."""
        if not self._hello_due:
            return None
        self._hello_due = False
        # Peers evict the predecessor a TTL after receiving its last report; the hello goes
        # out now and the delivery delay cancels out, so it reaches them in time if we are
        # within the TTL, less one react interval (peers evict at their own pace: only later).
        if now - self._resume_ended_at > self.config.ttl_ticks * self.config.tick_seconds - self.config.react_seconds:
            for name in self._resumed:
                self.history.forget(name)
                self.usage_map.groups.get(name, {}).pop(self.node_id, None)
            self._resumed = set()
        report = self._new_report(now)
        report.restatement = True  # not this incarnation's traffic: log replays must not add it
        report.tick_ms = 1000
        groups = self.groups()
        for name in sorted(self._resumed):
            group = groups.get(name)
            entry = self.usage_map.groups.get(name, {}).get(self.node_id)
            if group is None or entry is None:
                continue
            gu = GroupUsage(group=name)
            for kind in KINDS:
                k = entry.usage.kind(kind)
                quota = group.rates(kind)
                getattr(gu, kind).CopyFrom(KindUsage(
                    admitted_messages=math.ceil(k.admitted_messages), admitted_bytes=math.ceil(k.admitted_bytes),
                    throttled_messages=math.ceil(k.throttled_messages), throttled_bytes=math.ceil(k.throttled_bytes),
                    limit_messages=-1.0 if k.limit_messages == math.inf else k.limit_messages,
                    limit_bytes=-1.0 if k.limit_bytes == math.inf else k.limit_bytes,
                    quota_messages=float(quota[0]), quota_bytes=float(quota[1]),
                ))
            report.groups.append(drop_silent_kinds(gu))
            self.dirty.add(name)
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)
        self._own_report_out(report)
        self._fit(report, now)
        return report

    def idle_answer(self, now: float) -> UsageReport | None:
        """An idle entry for each group whose first demand a peer just reported while we
        have no traffic there (see unreported_claims): peers stop counting our claim as
        soon as they fold it, not a tick later, so the members that do use the group get
        its quota at once. Zero counts over a tick: a restatement (nothing to add to logs)."""
        names = sorted(n for n in self._answer_due
                       if n in self.groups() and not any((n, k) in self.limiter.states for k in KINDS))
        self._answer_due = set()
        if not names:
            return None
        report = self._new_report(now)
        report.restatement = True
        tick_s = self.config.tick_seconds
        groups = self.groups()
        for name in names:
            gu = GroupUsage(group=name)
            for kind in KINDS:
                quota = groups[name].rates(kind)
                getattr(gu, kind).CopyFrom(KindUsage(limit_messages=-1.0, limit_bytes=-1.0,
                                                     quota_messages=float(quota[0]), quota_bytes=float(quota[1])))
            report.groups.append(drop_silent_kinds(gu))
            self.usage_map.set_local(self.node_id, name, peer_usage(gu, tick_s), now)
            self.dirty.add(name)
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)
        self._own_report_out(report)
        self._fit(report, now)
        return report

    def _own_report_out(self, report: UsageReport) -> None:
        """After each report of ours: the first one's publish time is what peers' answers
        are timed against (answered_us). And peers fold our new incarnation's first report
        by dropping the predecessor's entries for groups it does not name, so from then on
        they hold nothing of ours there."""
        if self._first_out_ms is None:
            self._first_out_ms = report.publish_time_ms
        if not self._resumed:
            return
        named = {g.group for g in report.groups}
        for name in self._resumed - named:
            self.history.forget(name)
            self.usage_map.groups.get(name, {}).pop(self.node_id, None)
        self._resumed = set()

    def resume_state(self) -> Resume:
        """What a same-id successor needs to resume from us (see Resume)."""
        own = self.usage_map.members.get(self.node_id)
        entries = {name: e[self.node_id].usage for name, e in self.usage_map.groups.items()
                   if self.node_id in e}
        return Resume(frozenset(m for m in self.usage_map.members if m != self.node_id), entries,
                      own.last_seen if own is not None else self.clock(), self.left)

    # -- the calculator ---------------------------------------------------------------------

    def members(self) -> set[str]:
        return set(self.usage_map.members) | {self.node_id}

    def safe_share_active(self, now: float | None = None) -> bool:
        if self.deaf_since is None:
            return False
        now = self.clock() if now is None else now
        return now - self.deaf_since > self.config.outage_grace

    def settled(self, now: float | None = None) -> bool:
        """We have heard the topic for a full tick plus the delivery delay (once: an outage
        later does not undo it, the map then holds the members we knew): every live peer
        reports each tick, so each has had a report arrive since, and the members we know
        are all there are. The delay must be measured (our own reports come back on the
        topic, so a lone daemon measures it too): with a delay of a tick or more, a tick of
        silence says nothing, and a daemon that took it for solitude would take the whole
        quota beside peers whose reports are still in flight. Where peers count members we
        have not heard (unheard_members), we listen a tick longer: one more report of each.
        A same-id restart is settled once every peer its predecessor knew has spoken again
        (see Resume)."""
        if not self._settled:
            now = self.clock() if now is None else now
            if self.hearing and self.heard_since is not None:
                if self._resume_members and self._resume_members <= self._heard:
                    self._settled = True
                elif self.delay.samples:
                    listened = now - self.heard_since
                    enough = self.config.tick_seconds + self.delay.seconds() - 1e-9
                    if listened >= enough and self.unheard_members() > 0:
                        # A member peers count has not reached us: it reports every tick,
                        # so a tick more is one more report of it.
                        enough += self.config.tick_seconds
                    self._settled = listened >= enough
                if self._settled:
                    self._settled_at = now
        return self._settled

    def unheard_members(self) -> int:
        """Members peers count that we have not heard yet: the most a peer's report counted
        (UsageReport.members, plus us where the report went out before the peer could have
        folded our first one: knew_us), less ourselves and the peers in our map. A peer
        whose copy of our first report was lost counts one fewer, so this may miss a
        member; one whose report counts us although it went out early (the delay varies)
        counts one more, and a peer may still count a member that has crashed. Why: at
        20 % loss a newcomer heard an idle member but none of the busy one's reports before
        it settled, took itself for the busy member's only peer and took its share too
        (fuzz case 229 of seed 1: 14.3 % over). Listening longer under measured loss, for
        every newcomer, cost every lossy join a tick or more; waiting for a counted member
        as long as a peer waits before evicting one (silence_ttl) cost joins under a
        2-tick delay, where a count is often one off: changes within 3 ticks at any delay
        97.0 -> 95.2 % against 96.1 % with a tick more (the 500-scenario fuzz, rgd only)."""
        return max(0, self._members_reported - len(self.members()))

    def learning_the_map(self, now: float) -> bool:
        """Unsettled, or settled less than a tick plus the delivery delay ago: peers' full
        reports (each announces one when it finds us) may still be arriving, so a group
        whose first entry we fold now existed before us; it is new to our map, not to
        the cluster."""
        if not self.settled(now):
            return True
        return now - self._settled_at < self.config.tick_seconds + self.delay.seconds()

    def awaiting_announcements(self, now: float) -> bool:
        """Whether peers' announcements of our first report may still be on their way:
        less than a round trip (two delivery delays and a react interval) since it went
        out. Settling waits a tick plus one delay from when we started hearing, which is
        enough for reports peers publish each tick, but a busy peer's tick report leaves
        out the groups whose usage barely moved (suppression): those come in the full
        announcement it publishes when it folds our first report, a round trip after we
        sent it. Under a 2-tick delay a newcomer settled a tick before the announcements
        came back, saw no demand but its own in a busy group and took 60 of a 114 msg/s
        quota beside three peers that already held their shares (fuzz case 382 of seed 1:
        20.4 % over; case 227 likewise, 11.4 %)."""
        if self._first_out_ms is None or not self.config.announce:
            return False
        round_trip = 2.0 * self.delay.seconds() + self.config.react_seconds
        return self.wall_ms(now) < self._first_out_ms + 1000.0 * round_trip

    def announcement_claims(self, group: ResourceGroup, usage: Mapping[str, PeerUsage],
                            members: frozenset[str]) -> Mapping[str, PeerUsage]:
        """`usage` with every member we have no complete report of (one that names all its
        groups, `UsageReport.complete`, or any published after it could have folded our
        first report, see answered_us: its announcement or later) and that has no entry for
        `group` counted as wanting the whole quota there: it may be busy in a
        group its tick reports suppress. Peers that have folded our report reserve our fair
        share of the true demands, and raising others' demand never raises ours in a
        max-min split, so what we take beside these claims is at most that share. A member
        that holds an entry counts with it; one that is idle there costs us only until its
        announcement (or the round trip) is over."""
        unknown = [m for m in members if m != self.node_id and m not in self._complete and m not in usage]
        if not unknown:
            return usage
        claim = self.claim_of(group, 1)
        view = dict(usage)
        for m in unknown:
            view[m] = claim
        return view

    def fold_window(self) -> float:
        """How long after publishing a report every peer has it in force: the measured
        delivery delay plus one react interval (peers recompute what changed that often)."""
        return self.delay.seconds() + self.config.react_seconds

    def claim_of(self, group: ResourceGroup, n: int) -> PeerUsage:
        """Quota / n in every limited dimension, as demand (throttled: no drain cut)."""
        kinds = {}
        for kind in KINDS:
            msgs, nbytes = group.rates(kind)
            if msgs < 0 and nbytes < 0:
                kinds[kind] = IDLE
                continue
            kinds[kind] = KindRates(throttled_messages=max(0.0, msgs) / n, throttled_bytes=max(0.0, nbytes) / n,
                                    limit_messages=math.inf, limit_bytes=math.inf)
        return PeerUsage(**kinds)  # type: ignore[arg-type]  # keys: KINDS, PeerUsage's KindRates fields

    def _first_demand(self, name: str, now: float, ours: bool) -> None:
        """A group nobody had an entry for just got one with demand (ours or a peer's):
        until then every member took quota / members (the equal split), and from here
        each keeps that claim until it could have reported (see unreported_claims)."""
        if (name in self._new_groups or name not in self.groups() or self.config.strategy not in PEER_VIEW_STRATEGIES
                or self.learning_the_map(now)):
            # Still learning the map (start-up): we may not know every member, and a group
            # new to us may be old to the cluster, so there is no even split to keep. (A
            # same-id restart settles as soon as its predecessor's peers speak, and took the
            # groups in their first reports for new ones: quota / members while the peer that
            # had been alone there still held the whole quota, 20 % over it for a tick.)
            return
        self._new_groups[name] = (now, frozenset(self.members()))
        # Peers end a member's claim on its first tick report without the group after the
        # claim period (unreported_claims). If its reports naming the group were lost, a
        # later tick report suppressed the unmoved demand and read as idle: fuzz case 86 of
        # seed 1 (25 % loss), a peer took that member's share, 11.6 % over. So for a
        # refresh period our tick reports name it while we have demand there (all of them
        # lost: p^(K+1), 2.4e-4 at 25 % loss); nobody has to wait out the period.
        suppression = self.config.suppression
        self._named_until[name] = now + (suppression.max_skipped_ticks + 1) * self.config.tick_seconds
        if ours or any((name, k) in self.limiter.states for k in KINDS):
            self._claim_open.add(name)
        else:
            self._answer_due.add(name)  # no traffic of ours there: say so at once (idle_answer)

    def unreported_claims(self, group: ResourceGroup, usage: Mapping[str, PeerUsage],
                          previous: PeerUsage | None, now: float
                          ) -> tuple[Mapping[str, PeerUsage], PeerUsage | None]:
        """A group whose first demand report we saw at T (ours or a peer's): every member
        we knew then counts as claiming quota / members until we fold an entry of its for
        the group, or a tick report of its without the group published after T plus two
        fold windows (a member with demand there names it in every tick report for a
        refresh period, however little it moved: see _first_demand); we claim as much for
        ourselves until we publish a tick report without it after T plus one fold window
        (or answer at once that we are idle there). Every
        daemon's T lies within one fold window of the first report's publication, so when
        a peer stops counting our claim we have stopped claiming. Until T nobody had
        reported demand and every member took quota / members, so keeping that claim is
        safe: each member's claim is at least what it takes itself (the claim, or the
        smaller of it and its reports until peers hold them), and the calculator is
        monotone. Without it, a member whose first report peers had not folded yet fell to
        the floor peers reserve for a member without demand as soon as any other member's
        report arrived, and a group's first second (even demand on three daemons) was
        81 % used."""
        learned, known = self._new_groups[group.name]
        claim = self.claim_of(group, len(known))
        closes = self.wall_ms(learned + 2.0 * self.fold_window())
        members = self.members()
        view = dict(usage)
        pending = False
        for m in known:
            if m != self.node_id and m in members and m not in usage and self._tick_seen.get(m, -1) < closes:
                view[m] = claim
                pending = True
        if group.name in self._claim_open and previous is not None:
            self._claim_open.discard(group.name)  # our own report is out: peers count it instead
        if group.name in self._claim_open:
            pending = True
            previous = claim
            if self.node_id not in view:
                view[self.node_id] = claim
        if not pending:
            del self._new_groups[group.name]
        return view, previous

    def limits_for(self, group: ResourceGroup, now: float | None = None) -> GroupLimits:
        return evaluate(self.limit_inputs(group, now))

    def limit_inputs(self, group: ResourceGroup, now: float | None = None,
                     members: frozenset[str] | None = None) -> LimitInputs:
        """Everything the calculator needs for `group`, copied out of the node's state, or
        the limits themselves where no calculation is needed: `evaluate` turns it into
        limits anywhere (a worker thread too), since nothing in it changes afterwards."""
        now = self.clock() if now is None else now
        members = frozenset(self.members()) if members is None else members
        if self.safe_share_active(now):
            n = max(1, self.members_at_deafness)
            return {k: (rate_of(group.rates(k)[0]) / n, rate_of(group.rates(k)[1]) / n) for k in KINDS}
        settled = self.settled(now)
        if settled and self.hearing and not self._had_peers and members == {self.node_id}:
            # We listened a full tick and nobody has ever reported: no peer can overshoot with
            # us. (Once we had peers, silence may be loss: an evicted peer may still be busy,
            # so we compute as usual, from our own demand.)
            return {k: (rate_of(group.rates(k)[0]), rate_of(group.rates(k)[1])) for k in KINDS}
        usage = self.usage_map.group_usage(group.name)
        previous = self.history.as_seen(group.name, now, self.fold_window())
        if group.name in self._new_groups and self.config.strategy in PEER_VIEW_STRATEGIES:
            usage, previous = self.unreported_claims(group, usage, previous, now)
        if settled and self.config.strategy in PEER_VIEW_STRATEGIES and self.awaiting_announcements(now):
            usage = self.announcement_claims(group, usage, members)
        return CalculatorCall(group, usage, self.node_id, members, self.config.strategy,
                              self.config.params, previous, settled)

    def _initial_limits(self, group: ResourceGroup, kind: str) -> tuple[float, float]:
        return self.limits_for(group)[kind]

    def recompute(self, names: set[str] | None = None) -> None:
        """New local limits for every group the limiter knows (or those in `names`): the
        calculator's inputs gathered per group (`limit_inputs`, the seam tests replace),
        the calculator for all of them in one batch."""
        plan = self.recompute_plan(names)
        self.apply_limits(plan, evaluate_all([inputs for _, inputs in plan]))

    def recompute_plan(self, names: set[str] | None = None) -> list[tuple[ResourceGroup, LimitInputs]]:
        """The first half of `recompute`: the calculator's inputs for each group to redo
        (every group the limiter knows, or those in `names`). With the second half,
        `apply_limits`, the daemon runs the calculator itself elsewhere when it is heavy."""
        now = self.clock()
        members = frozenset(self.members())
        return [(group, self.limit_inputs(group, now, members)) for group in self._recompute_targets(names)]

    def _recompute_targets(self, names: set[str] | None) -> list[ResourceGroup]:
        """The groups a recompute redoes, in name order: every group the limiter knows, or
        those in `names` (a full recompute clears the dirty marks)."""
        groups = self.groups()
        known = {g for g, _ in self.limiter.states}
        targets = [groups[name] for name in sorted(known if names is None else known & names) if name in groups]
        if names is None:
            self.dirty.clear()
            self.all_dirty = False
        return targets

    def apply_limits(self, plan: Sequence[tuple[ResourceGroup, LimitInputs | None]], limits: list[GroupLimits]) -> None:
        """The second half of `recompute`: the limits computed from `plan`, into the limiter
        (a group deleted or forgotten meanwhile is skipped, not recreated)."""
        states = self.limiter.states
        groups = self.groups()
        margin = self.config.params.cut_margin
        drains = self.config.strategy in PEER_VIEW_STRATEGIES  # the baselines keep their buckets as they were
        for (group, _), group_limits in zip(plan, limits):
            if groups.get(group.name) is not group:
                continue
            entries = self.usage_map.groups.get(group.name, {})
            own = entries.get(self.node_id)
            place = place_among(entries, self.node_id)
            for kind in KINDS:
                st = states.get((group.name, kind))
                if st is not None:
                    self._limits_before.setdefault((group.name, kind), (st.messages.rate, st.bytes.rate))
                    old = st.limit
                    self.limiter.set_limit(group, kind, *group_limits[kind], place)
                    if drains and own is not None:
                        cut_m, cut_b = cut_below_demand(old, st.limit, own.usage.kind(kind), margin)
                        if cut_m or cut_b:
                            self.limiter.drain(group, kind, cut_m, cut_b)

    def apply_config(self) -> None:
        """After a config change: forget deleted groups everywhere, recompute now. A changed
        quota is judged for a while as the higher of old and new when vetting peers'
        reports (check_plausible): a peer's report covers a tick it may have spent under the
        old quota, and its config may change after ours (a cut of more than the
        plausibility margin, 24x by default, rejected genuine reports until then)."""
        current = self.groups()
        now = self.clock()
        grace = (self.config.ttl_ticks + 2) * self.config.tick_seconds + self.delay.seconds()
        changed = {name: old for name, old in self._applied_groups.items()
                   if (new := current.get(name)) is not None and new is not old and new != old}
        if changed:
            self._earlier_quotas.append((now + grace, changed))
        self._applied_groups = dict(current)
        existing = set(current)
        known = ({g for g, _ in self.limiter.states} | set(self.suppression_state.last_sent)
                 | set(self.usage_map.groups) | set(self.history.entries) | set(self._last_figures))
        for name in known - existing:
            self.forget_group(name)
        self.recompute()

    def forget_group(self, name: str) -> None:
        """A deleted group leaves every piece of state, so no later report names it: its
        bucket, its suppression and early-report state, our history, and the map's entries
        (ours and peers'; peers delete it from their maps on the same config change, and a
        late report of theirs that still names it only recreates entries no calculator reads,
        which the keeper expires like any idle entry)."""
        self.limiter.forget(name)
        self._served_size = -1
        self.suppression_state.last_sent.pop(name, None)
        self.suppression_state.skipped.pop(name, None)
        self.usage_map.groups.pop(name, None)
        for key in [k for k in self.keeper.streak if k[1] == name]:
            del self.keeper.streak[key]
        self.history.forget(name)
        for d in (self._entries, self._last_figures, self._early_at, self._window_figures, self._window_entries):
            d.pop(name, None)
        for key in [k for k in self._born if k[0] == name]:
            del self._born[key]
        self._sent_this_tick.discard(name)
        self._early_this_tick.discard(name)
        self._new_groups.pop(name, None)
        self._named_until.pop(name, None)
        self._claim_open.discard(name)
        self._answer_due.discard(name)
        self.dirty.discard(name)

    # -- the tick ---------------------------------------------------------------------------

    def set_hearing(self, hearing: bool, now: float) -> bool:
        """Whether we can hear the topic now; returns True when hearing just came back."""
        recovered = hearing and not self.hearing
        if hearing:
            if recovered:
                self.usage_map.refresh_all(now)  # peers were silent because we were deaf
                self.heard_since = now
            self.deaf_since = None
        elif self.hearing:
            self.deaf_since = now
            self.members_at_deafness = len(self.members())
            self.heard_since = None
        self.hearing = hearing
        return recovered

    def _new_report(self, now: float, leaving: bool = False) -> UsageReport:
        self.sequence += 1
        return UsageReport(
            daemon_id=self.node_id, sequence=self.sequence, publish_time_ms=self.wall_ms(now),
            tick_ms=int(round(self.config.tick_seconds * 1000)), incarnation=self.incarnation,
            leaving=leaving, members=len(self.members()),
        )

    def _include(self, report: UsageReport, names: list[str], now: float, skip: Container[str] = frozenset()) -> None:
        tick_s = self.config.tick_seconds
        for name in sorted(names):
            report.groups.append(self._entries[name])
            if name not in skip:
                # Our own entry is what peers will see, so every daemon computes from the same map.
                if not self.usage_map.groups.get(name) and has_demand(self._entries[name]):
                    self._first_demand(name, now, True)
                usage = peer_usage(self._entries[name], tick_s)
                self.usage_map.set_local(self.node_id, name, usage, now)
                self.history.add(name, now, usage)
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)
        self._own_report_out(report)
        self._fit(report, now)

    def _fit(self, report: UsageReport, now: float) -> None:
        """Keep each message under the broker's size limit: namespace lists give way first
        (bound_report), then the entries that still do not fit go in continuation reports
        with the next sequence numbers (report_builder.split_points says why). Called right
        after a report is filled and before the next one is numbered, so the sequence
        numbers on the topic stay in publishing order; the daemon publishes
        `continuations[report.sequence]` right after `report`. A peer that folds the head
        of a new incarnation's report before its continuations drops our other entries for
        that moment; the parts are published back to back, so they are folded together."""
        index = INDEX_BYTES_PER_ENTRY * len(report.groups) + HEADER_SLACK  # added when serialized
        if report.ByteSize() + index <= MAX_REPORT_BYTES:
            return
        trimmed = bound_report(report, max_bytes=MAX_REPORT_BYTES - index)
        self.namespaces_trimmed += trimmed.namespaces
        if not trimmed.over_budget:
            return
        cuts = split_points(report, MAX_REPORT_BYTES)
        parts = []
        for start, end in zip(cuts, [*cuts[1:], len(report.groups)]):
            part = self._new_report(now)
            part.tick_ms = report.tick_ms
            part.restatement = report.restatement
            part.groups.extend(report.groups[start:end])
            parts.append(part)
        del report.groups[cuts[0]:]
        self.continuations[report.sequence] = parts
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)

    def take_continuations(self, report: UsageReport) -> list[UsageReport]:
        """The reports that carry the rest of `report`'s entries (usually none)."""
        return self.continuations.pop(report.sequence, []) if self.continuations else []

    def tick_report(self, now: float) -> TickOutcome:
        """Collect and report: this tick's report (to publish) with its bookkeeping done."""
        steps = self.tick_report_steps(now)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                outcome: TickOutcome = done.value  # tick_report_steps' return value
                return outcome

    def tick_report_steps(self, now: float) -> Generator[None, None, TickOutcome]:
        """`tick_report` in steps: it yields between slices of its work and returns the
        TickOutcome. At PIP-82's scale (5 000 groups) the tick report builds an entry and its
        figures for every group, ~100 ms at once on the loop that answers brokers: every
        tick, the longest wait an ask had (asyncio's slow-callback log). The daemon runs the
        steps with the loop's other work between them and does not react meanwhile; run
        through at once (the simulator, `tick_report`), it is the same computation. The
        counters are collected in the first step, all at one instant, so asks between the
        steps count in the next tick; a bucket created meanwhile is reported next tick."""
        tick_s = self.config.tick_seconds
        collected = self.limiter.collect()
        states = dict(self.limiter.states)  # asks between the steps may add buckets
        groups = self.groups()
        names = sorted({g for g, _ in collected} | {g for g, _ in states})
        entries: dict[str, GroupUsage] = {}
        for i in range(0, len(names), TICK_SLICE_GROUPS):
            yield
            entries.update(group_entries(collected, states, groups, names[i:i + TICK_SLICE_GROUPS]))
        self._entries = entries
        # The entries' admitted counts per second (report_builder.local_rates), read from the
        # counters rather than back out of 15 000 protobuf fields at 5 000 groups.
        rates = {}
        for n in self._entries:
            for k in KINDS:
                c = collected.get((n, k))
                rates[(n, k)] = ((c.counters.admitted_messages / tick_s, c.counters.admitted_bytes / tick_s)
                                 if c is not None else (0.0, 0.0))
        current: dict[str, tuple[float, ...]] = {}
        for i in range(0, len(names), TICK_SLICE_GROUPS):
            yield
            current.update((n, figures(entries[n])) for n in names[i:i + TICK_SLICE_GROUPS])
        yield
        if self._announce_again:
            self._announce_again = False
            self.suppression_state = SuppressionState()
        state = self.suppression_state  # tick reports only: early reports keep their own
        for name in [n for n, until in self._named_until.items() if now >= until]:
            del self._named_until[name]
        send, suppressed = select_reports(self.config.suppression, state, current, always=self._named_until)
        # A group reported early this tick whose demand still reads as reported early: its tick
        # counts average the old demand and the new one, and would set peers (and our own view)
        # back to a demand that no longer holds. Demand, not the figures: while our share grows
        # after a step, what we admit rises and what we throttle falls at one demand, and
        # compared figure by figure that read as a move, so the tick set our own demand back
        # to the tick's average and cut the share we had just been granted (live, `rgd up`'s
        # load: a daemon rising from 36 to 100 msg/s fell back to 79 for a quarter second).
        # The tick report still carries them (they are the usage logs' accounting), and a
        # restatement right after it says the current (window) demand again: peers fold it
        # last, and it is a second chance for peers that lost the early report. A group whose
        # bucket appeared within this tick (its counts cover part of the tick) is restated too
        # once the window measures it.
        tolerance = self.config.suppression.tolerance
        born = {g for (g, _), at in self._born.items() if now - at < tick_s - 1e-9}
        restate = [n for n in send if n in self._window_entries and any(self._window_figures[n])
                   and ((n in self._early_this_tick and n in self._last_figures
                         and not moved(demand_figures(self._last_figures[n]),
                                       demand_figures(self._window_figures[n]), tolerance))
                        or n in born)] if self.config.early_reports else []
        for name in send:
            self._last_figures[name] = state.last_sent[name]
        for name in restate:
            self._last_figures[name] = self._window_figures[name]
        self._early_this_tick = set()
        self._early_mentions = 0
        if restate:  # one report restates them, so one window length
            span = min(self._window_entries[n][0] for n in restate)
            restate = [n for n in restate if abs(self._window_entries[n][0] - span) <= 1e-9]
        report = self._new_report(now)
        # Whom we heard since our last tick report: peers that lost a member's reports learn
        # it is alive (rgd.cluster.map_keeper.MapKeeper.vouch).
        members = self.usage_map.members
        report.heard.extend(sorted(member_tag(d) for d in self._folded_since_tick if d in members))
        self._folded_since_tick.clear()
        # A restated group's tick counts never stand alone at a peer: the restatement goes
        # right after, and peers fold both before they recompute. Counted as our own entry,
        # a bucket born within the tick (its counts cover part of it) would read as a drop of
        # demand and cut our share for a fold window.
        self._include(report, list(send), now, skip=set(restate))
        report.complete = not suppressed and report.sequence not in self.continuations
        restated = self._restate(restate, now)
        self._sent_this_tick = set(send)
        self._restated_this_tick = set(restate)
        # A tick report without a new group, a fold window after we learned of it, ends our claim.
        window = self.fold_window()
        self._claim_open = {g for g in self._claim_open if g in send or g in restate
                            or g not in self._new_groups or now < self._new_groups[g][0] + window}
        self.ticks += 1
        self.limiter.recompute_at = now + self._recompute_interval()
        self.history.prune(now, self.fold_window())
        for name in [g for g in self.history.entries if g not in self._entries]:
            self.history.forget(name)
        for key in [k for k in self._born if k not in self.limiter.states]:
            del self._born[key]
        return TickOutcome(report, sorted(send), len(suppressed), rates, restated)

    def not_published(self, out: TickOutcome) -> None:
        """The tick's report (and its continuations and restatement) never left us (no
        broker): give their sequence numbers back. Never sent means never lost; otherwise
        peers would count every tick of our outage as a gap in rgd_reports_lost_total."""
        self.sequence = out.report.sequence - 1
        self.continuations.clear()
        if self._first_out_ms == out.report.publish_time_ms:
            self._first_out_ms = None  # no peer can answer a report that never went out

    def _restate(self, names: list[str], now: float) -> UsageReport | None:
        """The current demand of groups reported early this tick, again (restatement): the
        tick report leaves them out, and a peer that lost the early report would otherwise
        hold their old demand until the periodic refresh."""
        if not names:
            return None
        report = self._new_report(now)
        report.restatement = True
        span = min(self._window_entries[n][0] for n in names)
        report.tick_ms = max(1, int(round(span * 1000)))
        for name in sorted(names):
            window, gu = self._window_entries[name]
            if abs(window - span) > 1e-9:
                continue
            report.groups.append(gu)
            if not self.usage_map.groups.get(name) and has_demand(gu):
                self._first_demand(name, now, True)
            usage = peer_usage(gu, span)
            self.usage_map.set_local(self.node_id, name, usage, now)
            self.history.add(name, now, usage)
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)
        self._own_report_out(report)
        self._fit(report, now)
        return report if report.groups else None

    def _plausibility_quotas(self, groups: Mapping[str, ResourceGroup], now: float) -> Mapping[str, ResourceGroup]:
        """The quotas peers' reports are judged by: the configured ones, or for a group
        whose config changed lately, the higher of its quotas since (see apply_config)."""
        earlier = self._earlier_quotas
        while earlier and earlier[0][0] <= now:
            earlier.popleft()
        if not earlier:
            return groups
        return QuotaCeilings(groups, [changed for until, changed in earlier if until > now])

    def receive(self, data: bytes, properties: Mapping[str, str] | None, now: float) -> FoldOutcome:
        """Vet one message from the topic and fold it (`vet`, then `fold`)."""
        try:
            report = self.vet(data, properties, now)
        except Rejected as exc:
            return FoldOutcome(None, exc.reason)
        return self.fold(report, now)

    def vet(self, data: bytes, properties: Mapping[str, str] | None, now: float) -> UsageReport:
        """One message from the topic, decoded down to the entries we fold (`folds`) and
        vetted (rgd.cluster.report_codec); raises Rejected. Work per message is bounded: at most
        groups_cap(configured groups) entries are looked at, counted before parsing.

        Apart from `fold` so that the daemon vets as a message arrives and keeps only what
        it folds until the next fold: at PIP-82's scale a peer's report is ~0.9 MB of which
        we fold a few percent, and 99 of them waiting as received bytes held ~60 MB. A
        report vetted now and folded a react interval later is folded as received: the
        scope changes only when the groups we serve or hold do."""
        groups = self.groups()
        report = decode_report(data, self.wall_ms(now), self.node_id, self.incarnation, properties, self.keys,
                               max_groups=groups_cap(len(groups)), scope=self.folds())
        if report.daemon_id != self.node_id:
            check_plausible(report, self._plausibility_quotas(groups, now), self._plausible_slack())
        return report

    def fold(self, report: UsageReport, now: float) -> FoldOutcome:
        """Fold a report `vet` passed into the usage map, or take our own one's echo."""
        if report.daemon_id == self.node_id:
            # Our own report, back from the topic: how long the topic takes, even alone
            # (not a frozen broker's backlog: that measures the outage).
            if self._published_while_hearing(report, now):
                self.delay.observe(self.node_id, report.publish_time_ms, self.wall_ms(now))
            self.keeper.own_echo(report.sequence)
            return FoldOutcome(report, REJECT_OWN)
        fresh = [g for g in report.groups if not self.usage_map.groups.get(g.group) and has_demand(g)]
        result, new = self.keeper.fold(report, now, self.delay.seconds())
        if not result.accepted:
            return FoldOutcome(report, result.reason)
        if report.leaving:
            self.delay.forget(report.daemon_id)
            self._resume_members.discard(report.daemon_id)
            self.all_dirty = True
        else:
            self._had_peers = True
            self._folded_since_tick.add(report.daemon_id)
            knew_us = self.knew_us(report, now)
            if report.complete or self.answered_us(report, now):
                self._complete.add(report.daemon_id)
            if not self._settled and report.members:
                # A report published before the peer could have folded our first one
                # cannot count us: the members it says, and we.
                self._members_reported = max(self._members_reported, report.members + (0 if knew_us else 1))
            if knew_us and (report.members == 0 or report.members >= len(self.members())):
                # A report that counts fewer members than we do may not count us: its
                # publisher lost our hello (a graceful leave had evicted us there). Fuzz case
                # 255 of seed 1 (27.7 % loss): a restarted daemon settled on such a report of
                # its one peer, took its even split while the peer, alone since the leave,
                # still held the whole quota: 20 % over for a tick. (0: a peer that does not
                # say how many it counts.)
                self._heard.add(report.daemon_id)
            if not report.restatement:
                self._tick_seen[report.daemon_id] = report.publish_time_ms
            for g in fresh:
                self._first_demand(g.group, now, False)
            if self._published_while_hearing(report, now):
                self.delay.observe(report.daemon_id, report.publish_time_ms, self.wall_ms(now))
            if new:
                self.all_dirty = True
            self.dirty.update(g.group for g in report.groups)
        return FoldOutcome(report, "", result.lost, new)

    def _plausible_slack(self) -> float:
        """What a peer's buckets and debt can admit beyond its limit over a tick, in seconds
        of the limit (check_plausible): the largest bucket the limiter makes (its
        ten-message floor can exceed `burst` for a small share) plus the debt cap. Counting
        `burst` alone (0.1 s) rejected a small group's genuine reports."""
        return largest_bucket_seconds(self.config.burst_seconds) + self.config.max_debt_seconds

    def knew_us(self, report: UsageReport, now: float) -> bool:
        """Whether a peer's report was published after that peer could have folded our
        first report (a same-id restart settles on its peers' reports, see settled): our
        hello went out at our start and took about as long to reach the peer as this report
        took to reach us (the same topic both ways), and the peer announces as soon as it
        folds it. A report published earlier is not the full announcement the peer sends
        when it sees our new incarnation: under a 1.5-tick delay it lacked the peer's
        suppressed groups, the restarted daemon saw nobody's demand in a group and took the
        even split while the peer, alone since our graceful leave, held the whole quota
        (fuzz case 122 of seed 1: 49 % over the quota for a tick)."""
        return self._published_after(report, self._started_ms, now)

    def answered_us(self, report: UsageReport, now: float) -> bool:
        """Whether a peer's report was published after that peer could have folded our first
        report as it actually went out (not our start, as `knew_us` assumes for a hello):
        the peer's announcement of us, or later."""
        return self._first_out_ms is not None and self._published_after(report, self._first_out_ms, now)

    def _published_after(self, report: UsageReport, ours_ms: int, now: float) -> bool:
        """Published after the peer could have folded a report of ours published at
        `ours_ms`: it took about as long to reach the peer as this one took to reach us."""
        delay_ms = max(0, self.wall_ms(now) - report.publish_time_ms)
        return report.publish_time_ms >= ours_ms + delay_ms - 1  # 1 ms: rounding

    def _published_while_hearing(self, report: UsageReport, now: float) -> bool:
        """Whether the report was published while we could hear the topic. One published
        before (a frozen broker delivers its backlog when it resumes) was held up by the
        outage: its delay measures the outage, not delivery, and fed to the delivery-delay
        estimate it would stretch the window in which our own entries count as unseen
        (OwnHistory.as_seen), dropping our share to the floor for that long."""
        if not self.hearing or self.heard_since is None:
            return False
        return (self.wall_ms(now) - report.publish_time_ms) / 1000.0 <= now - self.heard_since

    def served_groups(self) -> frozenset[str]:
        """The groups our limiter has buckets for (brokers ask us about them), cached until
        the limiter's set of buckets changes size."""
        states = self.limiter.states
        if self._served_size != len(states):
            self._served = frozenset(g for g, _ in states)
            self._served_size = len(states)
        return self._served

    def folds(self) -> FoldScope:
        """Which of a report's groups we fold. Those we serve, always: our share of them
        depends on them. Those we do not serve while the map holds fewer than
        `unserved_groups_held` such groups (the first in key order: rgd.cluster.report_codec.FoldScope;
        one budget for all the reports vetted before they are folded), and then those
        already held: a group that starts being served here then computes
        from its peers' figures at once instead of waiting for their periodic refresh, while
        at PIP-82's scale (5 000 groups on each of 100 daemons, 100 000 in all) a daemon
        folds and keeps its own groups and a bounded few, not all 100 000 groups' entries of
        every peer. Built again when the served groups or the map's group count change (and
        at each upkeep), not per report: it holds the sorted keys the index is matched with."""
        served = self.served_groups()
        held = self.usage_map.groups
        stamp = (id(served), len(held))
        if self._scope is None or self._scope_stamp != stamp:
            unserved = sum(1 for g in held if g not in served)
            # What the last scope granted and no fold has added yet stays granted: it waits
            # in the inbox, vetted, and counts against the bound (FoldScope: one budget).
            carried = self._scope.granted if self._scope is not None else ()
            self._scope = FoldScope(served | held.keys(), self.config.unserved_groups_held - unserved, carried)
            self._scope_stamp = stamp
        return self._scope

    def upkeep(self, now: float, heard_at: float | None = None) -> list[str]:
        """Evict silent members and expire idle entries; nothing while we are deaf.

        `heard_at`: the last time the topic demonstrably carried a message to us (the daemon:
        our own report came back; rgd/transport/broker_liveness.py). Silence is measured only up to
        then: a peer silent since before it may be silent because the topic is, so it is
        evicted only once the topic has carried our reports for the TTL after its last one.
        None (the simulator, whose topic never stalls): silence up to now."""
        if not self.hearing:
            return []
        until = now if heard_at is None else min(now, heard_at)
        gone = self.keeper.evict_silent(until)
        if gone:
            self.all_dirty = True  # fewer members: every share changes
        self.keeper.expire_groups(until, touched=self.dirty)
        self._scope = None  # groups may have gone and come back at the same count
        return gone

    def announcement(self, now: float) -> UsageReport | None:
        """A full (unsuppressed) report for a newcomer, or None if we have nothing to say.

        Our next tick report is full too: a newcomer that lost this one would otherwise miss
        our suppressed groups until each one's periodic refresh (up to K + 1 ticks), taking
        us for idle in them. Fuzz case 90 of seed 1 (11 % loss): a same-id restart lost its
        peer's announcement, counted the peer's busy group as idle and took its share, 23.7 %
        over with a 2 % idle reserve (the 5 % reserve happened to cover it)."""
        if not self.config.announce:
            return None
        self._announce_again = True
        self.suppression_state = SuppressionState()
        send, _ = select_reports(
            self.config.suppression, self.suppression_state, {n: figures(gu) for n, gu in self._entries.items()}
        )
        if not send:
            return None
        report = self._new_report(now)
        report.restatement = True  # the same tick's counts again: log replays must not add them
        self._include(report, list(send), now, skip=self._sent_this_tick)
        report.complete = report.sequence not in self.continuations
        return report

    # -- between ticks ----------------------------------------------------------------------

    def _window_counts(self, now: float) -> _Window | None:
        """Snapshot the limiter's cumulative counters (one int64 row per bucket); the counts
        over the last react window (and its length) and over the trailing tick, or None
        until a react window's worth of snapshots exists. A bucket created within the window
        is not measured yet: a fraction of a window would be a noisy demand, and until its
        first report every member still computes the equal split of a group nobody has
        reported."""
        limiter = self.limiter
        states = limiter.states
        newest = self._snapshots[-1] if len(self._snapshots) else None
        prev = newest.layout if newest is not None else None
        version = limiter.states_version
        changed: np.ndarray | None = None
        if newest is not None and (limiter, version) == self._counters_version:
            # The same buckets as at the last snapshot: its counters, with the buckets counted
            # since reread (at PIP-82's scale a react rereads a few hundred of 10 000).
            layout = newest.layout  # = prev (newest is not None here)
            keys = layout.keys
            assert newest.full is not None  # the newest snapshot is always held whole
            counters = newest.full.copy()
            counted = limiter.take_counted()
            rows = layout.rows
            changed = np.fromiter(map(rows.__getitem__, counted), dtype=np.intp, count=len(counted))
            if counted:
                counters[changed] = np.array([_TOTALS(states[k]) for k in counted], dtype=np.int64).reshape(-1, 5)
        else:
            keys = tuple(states)
            limiter.take_counted()
            if prev is None or keys != prev.keys:
                layout = _KeyLayout(keys)
                for key in keys:
                    self._born.setdefault(key, now)
            else:
                layout = prev
            counters = np.array(list(map(_TOTALS, states.values())), dtype=np.int64).reshape(len(keys), 5)
            self._counters_version = (limiter, version)
        if layout is prev and len(self._born) < len(keys):  # a group forgotten and back under the same keys
            for key in keys:
                self._born.setdefault(key, now)
        totals, events_total = counters[:, :4], counters[:, 4]
        snaps = self._snapshots
        snaps.append(now, layout, counters, changed)
        window = self.config.react_window
        horizon = max(window, self.config.tick_seconds)
        while len(snaps) > 1 and snaps[1].at <= now - horizon + 1e-9:
            snaps.popleft()
        short = len(snaps) - 1  # the newest snapshot at least a react window old
        while short > 0 and snaps[short].at > now - window + 1e-9:
            short -= 1
        span = now - snaps[short].at
        if span < window - 1e-9:
            return None
        present, counts = self._counts_since(snaps[short].layout, snaps.counters_at(short)[:, :4], layout, totals)
        oldest = snaps.counters_at(0)
        long_present, long_counts = self._counts_since(snaps[0].layout, oldest[:, :4], layout, totals)
        long_span = now - snaps[0].at
        bursty = np.zeros(len(keys), dtype=bool)
        # Messages per event over the bucket's life: a window without events (a burst that has
        # not come yet) says nothing of the size of the next one.
        per_event = np.maximum(1.0, (totals[:, 0] + totals[:, 2]) / np.maximum(events_total, 1))
        if snaps[0].layout is layout:
            # Counting noise is in events (asks, usage records), not messages: a short window
            # over a bucket whose trailing tick held fewer than BURSTY_EVENTS events per short
            # window counts whole events (a second's dispatch recorded at once reads 5x the
            # rate or nothing), so the trailing tick measures it. A react that runs late
            # (a busy loop) changes nothing here: it is a count, not a time pattern.
            events = events_total - oldest[:, 4]
            msgs = long_counts[:, 0] + long_counts[:, 2]
            bursty = (msgs > 0) & (events * span < BURSTY_EVENTS * long_span)
        return _Window(span, layout, present, counts, long_span, long_present, long_counts, bursty, per_event)

    @staticmethod
    def _counts_since(old_layout: _KeyLayout, old: np.ndarray, layout: _KeyLayout,
                      totals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per bucket of `layout`: whether it was there at the snapshot of `old_layout` whose
        totals were `old`, and its counters' increase since."""
        if old_layout is layout:
            return np.ones(len(layout.keys), dtype=bool), totals - old
        rows = old_layout.rows
        at = np.fromiter((rows.get(k, -1) for k in layout.keys), dtype=np.intp, count=len(layout.keys))
        present = at >= 0
        counts = np.zeros_like(totals)
        counts[present] = totals[present] - old[at[present]]
        return present, counts

    def _last_figures_array(self, layout: _KeyLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`_last_figures` per group of `layout` as rows (zeros where none), whether there is
        one, whether it is the usual FIGURES figures, and whether any of them is not 0; kept
        in step with the dict's writes."""
        cache = self._last_cache
        last = self._last_figures
        if cache is None or cache[0] is not layout:
            n = len(layout.names)
            arr = np.zeros((n, FIGURES), dtype=np.float64)
            has = np.zeros(n, dtype=bool)
            usual = np.ones(n, dtype=bool)
            nonzero = np.zeros(n, dtype=bool)
            cache = self._last_cache = (layout, arr, has, usual, nonzero)
            touched = set(last)
            last.changed.clear()
        else:
            touched = last.changed
            last.changed = set()
        _, arr, has, usual, nonzero = cache
        index = layout.index
        for name in touched:
            i = index.get(name)
            if i is None:
                continue
            fig = last.get(name)
            has[i] = fig is not None
            usual[i] = fig is None or len(fig) == FIGURES
            arr[i] = fig if fig is not None and len(fig) == FIGURES else 0.0
            nonzero[i] = fig is not None and any(fig)
        return arr, has, usual, nonzero

    def early_report(self, now: float) -> UsageReport | None:
        """A report of the groups whose demand over the last window moved beyond the
        suppression tolerance since they were last reported (or that are new, or went
        idle), at most one per group per `early_gap_ticks`. Its counts restate part of
        the current tick (`restatement`: log replays do not add them); its tick_ms is the
        window, so peers read rates from it as from any report.

        Twenty times a second over every group a daemon serves, so the window's figures,
        the tests (moved_beyond_counting) and the gap are computed for all groups at once
        in arrays (the same float operations, so the same decisions), and entries are built
        only for the groups reported and those the tick may restate: building an entry
        (protobuf) and its figures for all of a daemon's 5 000 groups each react took
        ~1.6 s of CPU a second at PIP-82's scale, more than the core."""
        window = self._window_counts(now)
        if window is None or not self.config.early_reports:
            return None
        window = self._smoothed(window)
        span, layout = window.span, window.layout
        tick_s = self.config.tick_seconds
        gap = self.config.early_gap_ticks * tick_s
        names = layout.names
        n = len(names)
        counts = layout.per_group(window.present, window.counts)
        has_key = np.zeros(n, dtype=bool)
        has_key[layout.key_group[window.present]] = True
        # Only groups with traffic in the window, or whose last reported figures had some (going
        # idle is a move): an idle group that was reported idle cannot have moved.
        active = (counts != 0).any(axis=1)
        last, has_last, usual, last_nonzero = self._last_figures_array(layout)
        measured = has_key & (active | last_nonzero)
        scale = tick_s / span
        now_figures = counts * scale  # int64 * float: each count as a float, times scale, as in Python
        early_at = np.full(n, -1e18)
        index = layout.index
        for name, at in self._early_at.items():
            i = index.get(name)
            if i is not None:
                early_at[i] = at
        due = measured & ~(now - early_at < gap)
        idle = ~(now_figures != 0).any(axis=1)
        # A move must show in the trailing tick too. Traffic that comes in bursts (brokers
        # recording a second's dispatch at once through /v1/usage, batching clients) reads
        # as a jump or as idle in every short window although its rate per tick holds; each
        # such "move" sent an early entry and cost a recompute here and at every peer (at
        # PIP-82's scale, with usage recorded once a second, every group four times a
        # second: most of the daemon's CPU). A real step shows in the trailing tick within
        # a fraction of the tolerance's share of a tick (a doubling: ~0.1 s), so it is
        # still reported within the react window. Going idle is a move like any other: a
        # slow group's window may count nothing.
        tol = self.config.suppression.tolerance
        long_figures = self._long_figures(window, now_figures)
        grain = np.ones((n, len(KINDS)))
        grain[layout.key_group, layout.key_cols[:, 0] // 4] = window.per_event
        changed = np.where(has_last, _moved_rows(last, now_figures, tol, span / tick_s, grain)
                           & _moved_rows(last, long_figures, tol, window.long_span / tick_s, grain), ~idle)
        # Budget, pooled over groups: early entries per tick at most the number of groups we
        # serve (at least EARLY_BUDGET_MIN); with the tick report and the tick's restatement
        # of early-reported groups, report bytes per second stay within three unsuppressed tick
        # reports' whatever the load; a few busy groups may use the share of the many quiet ones.
        budget = max(EARLY_BUDGET_MIN, len(self.served_groups())) - self._early_mentions
        send: list[str] = []
        for i in np.flatnonzero(due & (changed | (has_last & ~usual))).tolist():  # in name order
            name = names[i]
            figs = tuple(now_figures[i].tolist())
            if not usual[i]:  # a last entry of another shape: the scalar test decides
                last_figs = self._last_figures[name]
                if not (moved_beyond_counting(last_figs, figs, tol, span / tick_s)
                        and moved_beyond_counting(last_figs, tuple(long_figures[i].tolist()), tol,
                                                  window.long_span / tick_s)):
                    continue
            if len(send) < budget:
                send.append(name)
                self._last_figures[name] = figs
                self._early_at[name] = now
        # What the tick may restate (see tick_report) reads this window's figures and entries
        # of the measured groups; built when read (a few groups), not for all of them here.
        view = _WindowView(self, window, measured, now_figures, self.groups())
        self._window_figures, self._window_entries = _WindowPart(view, view.figure), _WindowPart(view, view.span_entry)
        self._limits_before = {}
        entries = {name: view.entry(name) for name in send}
        if not send:
            return None
        report = self._new_report(now)
        report.restatement = True
        report.tick_ms = max(1, int(round(span * 1000)))
        for name in sorted(send):
            gu = entries[name]
            report.groups.append(gu)
            if not self.usage_map.groups.get(name) and has_demand(gu):
                self._first_demand(name, now, True)
            usage = peer_usage(gu, span)
            self.usage_map.set_local(self.node_id, name, usage, now)
            self.history.add(name, now, usage)
        self.usage_map.touch_self(self.node_id, self.incarnation, self.sequence, now, report.publish_time_ms)
        self._own_report_out(report)
        self._fit(report, now)
        self.dirty.update(send)
        self._early_this_tick.update(send)
        self._early_mentions += len(send)
        self.early_reports_sent += 1
        return report

    @staticmethod
    def _smoothed(window: _Window) -> _Window:
        """The window with a bursty bucket's counts replaced by the trailing tick's, scaled
        to the window's length. A short window over bursty traffic reads a burst or nothing
        (a broker recording a second's dispatch at once reads 5x its rate, then 0): sent
        early, either is a demand that never was, and the next window's opposite reading
        "moved" again, so the group was reported at every gap with the wrong figure."""
        use = window.bursty & window.long_present
        if not use.any():
            return window
        counts = window.counts.copy()
        scaled = window.long_counts[use] * (window.span / window.long_span)
        counts[use] = np.rint(scaled).astype(np.int64)
        return window._replace(counts=counts, present=window.present | use)

    def _long_figures(self, window: _Window, now_figures: np.ndarray) -> np.ndarray:
        """Per group (rows as `now_figures`), the figures per tick over the trailing tick;
        a group with a bucket the trailing tick did not see from its start has only its
        react window's figures (nothing longer to confirm them with)."""
        layout = window.layout
        out = layout.per_group(window.long_present, window.long_counts) * (self.config.tick_seconds / window.long_span)
        partial = np.zeros(len(out), dtype=bool)
        partial[layout.key_group[~window.long_present]] = True
        out[partial] = now_figures[partial]
        return out

    def recompute_changed(self, now: float) -> None:
        """Recompute what changed since the last call: groups named by reports folded,
        groups we reported early, groups whose own increase has now been out long enough
        (and everything after a membership change)."""
        names = self.changed(now)
        if names is None:
            self.recompute()
        elif names:
            self.recompute(names)
        self.limiter.recompute_at = now + self._recompute_interval()

    def _recompute_interval(self) -> float:
        """How soon a limit may next change, which caps Retry-After (Limiter.recompute_at).
        With early reports every react recomputes what changed, so a share can grow a react
        after a denial; a broker told to wait for the tick would come back up to a tick
        late and leave that share unused. Brokers reading only the header still wait a
        whole second (it counts in seconds); `retry_after_ms` is the precise figure."""
        return self.config.react_seconds if self.config.early_reports else self.config.tick_seconds

    def tick_targets(self, now: float) -> set[str] | None:
        """What the tick recomputes: every group (None) when something every group's share
        depends on moved since the last full recompute (the members, settling, the safe
        share, hearing; a membership change marked everything dirty) and at least once per
        refresh period (max_skipped_ticks + 1 ticks: the delivery delay and the fold window
        move slowly for all groups); otherwise only the groups whose inputs changed: named
        by folded reports or expired (dirty), our own entry just reported or restated, an
        own increase still in flight (history.pending), a first-demand claim still open.
        At PIP-82's scale most groups' inputs do not change in a given tick, and the
        calculator for all 5 000 of them every tick was the larger half of its cost."""
        state = (frozenset(self.members()), self.settled(now), self.safe_share_active(now), self.hearing)
        self._ticks_since_full += 1
        if (self.all_dirty or state != self._full_state
                or self._ticks_since_full >= self.config.suppression.max_skipped_ticks + 1):
            self._full_state = state
            self._ticks_since_full = 0
            return None
        names = self.changed(now)
        if names is None:
            return None
        return names | self._sent_this_tick | self._restated_this_tick | set(self._new_groups)

    def recompute_tick(self, now: float) -> None:
        """The tick's recompute (see tick_targets)."""
        names = self.tick_targets(now)
        if names is None:
            self.recompute()
        elif names:
            self.recompute(names)

    def changed(self, now: float) -> set[str] | None:
        """What `recompute_changed` recomputes, taken off the dirty list (None: everything).

        Besides the dirty groups, those whose own demand as peers see it (OwnHistory.as_seen)
        may have moved since the last call: an entry of ours crossed the fold window's
        cutoff (now - fold_window) between the last call's cutoff and this one's, which is
        the only way as_seen changes without a new entry (a new entry marks its group dirty).
        While an increase was in flight, every such group used to be recomputed at every
        react until it was out: at PIP-82's scale, after an early report of all 5 000
        groups, 5 000 calculator calls twenty times a second whose limits could not differ.
        When anything else the calculator reads for every group moves (settling, the safe
        share, hearing, whether we ever had peers) every group in flight is recomputed as
        before, and so are groups whose first-demand claim is open (unreported_claims)."""
        window = self.fold_window()
        pending = self.history.pending(now, window + 2.0 * self.config.react_seconds)
        cutoff = now - window
        state = (self.settled(now), self.safe_share_active(now), self.hearing, self._had_peers,
                 self.members_at_deafness)
        last_cutoff, last_state = self._changed_at
        self._changed_at = (cutoff, state)
        if self.all_dirty:
            return None
        if last_cutoff is None or state != last_state:
            names = self.dirty | set(pending)
        else:
            crossed = self.history.crossed(min(last_cutoff, cutoff), max(last_cutoff, cutoff))
            names = self.dirty | set(crossed) | {g for g in pending if g in self._new_groups}
        self.dirty = set()
        return names

    def leaving_report(self, now: float) -> UsageReport:
        """Graceful shutdown: peers evict us at once instead of after the TTL."""
        self.left = True
        return self._new_report(now, leaving=True)


__all__ = [
    "EARLY_BUDGET_MIN",
    "EARLY_MIN_EVENTS",
    "MEMBER_ADMISSION_BURST",
    "NEW_BUCKET_SECONDS",
    "REJECT_OWN",
    "TICK_SLICE_GROUPS",
    "CalculatorCall",
    "ClusterNode",
    "FoldOutcome",
    "LimitInputs",
    "NodeConfig",
    "Resume",
    "TickOutcome",
    "cut_below_demand",
    "evaluate",
    "evaluate_all",
    "has_demand",
    "moved_beyond_counting",
    "start_seconds_for",
]
