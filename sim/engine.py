"""The discrete-time loop: scenario events, daemons ticking at their phases, traffic.

Time advances in sub-steps of 1/substeps tick. At every sub-step:
1. the simulated topic delivers what is due into the receivers' inboxes;
2. daemons whose phase is this sub-step tick (collect -> report -> read -> compute);
3. every daemon's brokers ask its limiter for this sub-step's share of their demand,
   arriving evenly over the sub-step in small acquires, each at its own instant
   between this sub-step's start and the next (sim/broker.py); what was admitted is
   recorded;
4. at the sub-step's end, the topic delivers what fell due during it and every daemon
   reacts (rgd/cluster/node.py): folds what arrived, publishes an early report if a
   group's demand moved (over the window up to now), recomputes what changed. What a
   react decides holds from the next sub-step, so a report is folded at most a react
   interval after it arrives, as by the daemon's react loop.
After the ticks and again after the reacts of every sub-step, the invariant checker
(sim/invariant.py) sums the limits the live daemons have granted themselves per group,
kind and limited dimension against the quota; `RunResult.violations` carries what it found.
A partition event cuts a daemon off the simulated topic (sim/transport.py) while its
brokers keep asking it: it runs, ticks and admits as before, on what it last heard.

Daemons tick once per tick each, at different phases (not aligned, as in a real
cluster), so a report published by one is folded by the others before their next
tick. Events apply at the start of their tick; config changes reach every daemon
at once (the daemon recomputes on a config change).

What is recorded per tick and dimension (group x kind, in messages/s, or bytes/s
when only the bytes rate is limited): the quota, each live daemon's offered load
and admitted load, and, where a group limits messages and bytes both, the bytes
quota and each daemon's message size, so the judge can tell which one binds.
metrics.py turns that into the comparison figures.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Protocol

from rgd.config.groups import KINDS, ResourceGroup
from rgd.quota.calculator import QuotaParams, strategy_named
from rgd.wire.usage_report_pb2 import UsageReport
from sim.broker import ArrivingDemand
from sim.invariant import InvariantChecker, Situation, Violation
from sim.node import NodeStats, SimNode
from sim.profiles import Profile, profile_for
from sim.scenario import Scenario, ScenarioError, Sizes
from sim.transport import Transport, TransportSpec

TICK_SECONDS = 1.0
REACT_BEFORE_END = 1e-6  # reacts run this long before the next sub-step's instant
ACQUIRES_PER_SUBSTEP = 16  # a daemon's demand arrives as at most this many acquires per sub-step
# An ask is one publish: a producer's batch. Pulsar's producer closes a batch at 1 ms,
# 1000 messages or 128 KB (ProducerConfigurationData: batchingMaxPublishDelayMicros,
# DEFAULT_BATCHING_MAX_MESSAGES, batchingMaxBytes), so an ask is at most 1 ms of what the
# broker is offered, and a message over 128 KB goes alone. A sixteenth of a sub-step was
# 12.5 ms of demand in the fuzzer: a daemon offered 17x its limit asked 0.21 s of its limit
# at a time, every ask larger than its 0.1 s bucket, and its 1-second windows held 4 or 5
# of them, 11.5 % over with the long-run rate held (fuzz case 427 of seed 1; case 449, 68x,
# 33.3 %). Before the 128 KB cap, asks of a sixteenth grew to 37 MB (case 347, 15.4 %).
MAX_BATCH_MESSAGES = 1000
MAX_BATCH_BYTES = 128 * 1024
BATCH_DELAY_SECONDS = 0.001
# Asking every millisecond costs the simulator a thousand asks a second per busy pair, and
# changes nothing where asks are already small beside the limit: an ask is coarsened up to
# this fraction of the asking daemon's limit (a second's worth), so no 1-second window
# moves by more than about that much for it.
COARSEST_ASK_OF_LIMIT = 0.01


class ReportLog(Protocol):
    """Hook for writing what the daemons publish and receive (e.g. the usage log)."""

    def published(self, node_id: str, data: bytes, now: float) -> None: ...

    def received(self, node_id: str, report: UsageReport, data: bytes, now: float) -> None: ...

    def tick(self, node_id: str, now: float) -> None: ...

    def attach(self, node: SimNode) -> None:
        """A daemon started: log its tick accounting (each collect of its limiter) from now on."""

    def detach(self, node: SimNode, graceful: bool) -> None:
        """A daemon stopped (`graceful`: its final accounting is logged) or crashed (not)."""

    def close(self) -> None: ...


@dataclass
class DimensionTick:
    """One dimension in one tick: per-second figures for every live daemon."""

    quota: float
    offered: dict[str, float] = field(default_factory=dict)
    admitted: dict[str, float] = field(default_factory=dict)
    # Coupled limits: the bytes/s quota when messages are measured and bytes are limited too
    # (-1 otherwise), and bytes per message of every daemon with traffic.
    bytes_quota: float = -1.0
    message_bytes: dict[str, float] = field(default_factory=dict)
    # What one message of each daemon with traffic counts in this dimension's unit (1 where
    # messages are measured, its size where bytes are): a tick admits whole messages.
    per_message: dict[str, float] = field(default_factory=dict)
    # The whole messages that arrived in the tick (in this dimension's unit): what the daemon
    # was offered, counted as its brokers saw it. `offered` is the rate they arrive at; a
    # daemon offered 4.4 msg/s sees 4 in most ticks and 5 in some, and admits all of them.
    arrived: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Change:
    tick: int  # when it happened
    observable: int  # first tick by which every daemon can know it
    label: str
    # The dimensions ("group/kind") it touches; None: every one (a daemon came or went, or
    # the run started). A group's ideal and every strategy's split of it depend on that group
    # alone, so a change elsewhere does not end its windows (sim.metrics.evaluate).
    dims: frozenset[str] | None = None


@dataclass
class RunResult:
    scenario: str
    strategy: str
    ticks: int
    dims: dict[str, list[DimensionTick | None]]  # "group/kind" -> per tick
    changes: list[Change]
    reports: int = 0
    report_bytes: int = 0
    reports_lost: int = 0
    announcements: int = 0
    daemon_ticks: int = 0  # sum over ticks of the daemons running
    counters: dict[str, int] = field(default_factory=dict)  # summed NodeStats of every daemon
    limits: list[dict[str, dict[str, float]]] = field(default_factory=list)  # per tick: dim -> daemon -> limit
    violations: list[Violation] = field(default_factory=list)  # of the invariant (sim/invariant.py), by start
    invariant_checks: int = 0  # instants the invariant was checked at
    reports_cut: int = 0  # deliveries a partition dropped (to or from a cut daemon)


class _Sink:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def publish(self, node: SimNode, data: bytes, now: float) -> None:
        self.sim.transport.publish(node.node_id, data, now, self.sim.nodes)
        if self.sim.log is not None:
            self.sim.log.published(node.node_id, data, now)

    def received(self, node: SimNode, report: UsageReport, data: bytes, now: float) -> None:
        if self.sim.log is not None:
            self.sim.log.received(node.node_id, report, data, now)


class MessageSizes:
    """Each daemon's message size per group as events change it (a scenario's `message_sizes`
    is the start). An event's number sets a group's size for every daemon; its mapping sets
    the daemons it names."""

    def __init__(self, scenario: Scenario) -> None:
        self._default = scenario.message_bytes
        self._group: dict[str, int] = {}
        self._daemon: dict[tuple[str, str], int] = {}
        self.update(scenario.message_sizes)

    def update(self, sizes: Sizes) -> None:
        for group, value in sizes.items():
            if isinstance(value, dict):
                for daemon, size in value.items():
                    self._daemon[(group, daemon)] = int(size)
            else:
                self._group[group] = int(value)
                for key in [k for k in self._daemon if k[0] == group]:
                    del self._daemon[key]

    def of(self, group: str, daemon: str) -> int:
        """Bytes per message `daemon` sends in `group` now."""
        return self._daemon.get((group, daemon), self._group.get(group, self._default))


class Simulation:
    def __init__(self, scenario: Scenario, strategy: str, params: QuotaParams | None = None,
                 log: ReportLog | None = None) -> None:
        strategy_named(strategy)  # fail early on a bad name
        self.scenario = scenario
        self.strategy = strategy
        self.params = params or QuotaParams()
        self.log = log
        self.profile: Profile = profile_for(strategy, scenario.ttl_ticks, scenario.pulsar_ttl_ticks)
        self.now = 0.0
        self.transport = Transport(
            TransportSpec(scenario.loss, scenario.delay, scenario.duplicate), scenario.seed, TICK_SECONDS
        )
        self.rng = random.Random(f"sim:{scenario.seed}")
        self.groups: dict[str, ResourceGroup] = dict(scenario.groups)
        self.demand = {g: {d: dict(k) for d, k in per.items()} for g, per in scenario.demand.items()}
        self.sizes = MessageSizes(scenario)
        self.nodes: dict[str, SimNode] = {}
        self.retired: list[SimNode] = []
        self._incarnation = 0
        self._arrivals: dict[tuple[str, str, str], ArrivingDemand] = {}
        self._sink = _Sink(self)
        self.invariant = InvariantChecker()
        # Ticks at which daemons joined, crashed or were healed: the invariant's situation
        # names those within the TTL (sim.invariant.Situation).
        self._joined_at: dict[str, int] = {}
        self._crashed_at: dict[str, int] = {}
        self._healed_at: dict[str, int] = {}
        n = len(scenario.daemons)
        for i, node_id in enumerate(scenario.daemons):
            self._spawn(node_id, self._phase(i, n))
            self._joined_at[node_id] = 0  # the start is everyone's join

    # -- membership -------------------------------------------------------------------------

    def _phase(self, index: int, count: int) -> int:
        s = self.scenario.substeps
        if self.scenario.phases == "aligned":
            return 0
        if self.scenario.phases == "spread" and count:
            return (index * s) // count
        return self.rng.randrange(s)

    def _spawn(self, node_id: str, phase: int) -> None:
        """Start a daemon (a same-id restart is a new incarnation: peers drop its predecessor
        as soon as they hear it)."""
        self._incarnation += 1
        self.nodes[node_id] = SimNode(
            node_id=node_id, incarnation=self._incarnation, phase=phase, clock=lambda: self.now,
            strategy=self.strategy, params=self.params, profile=self.profile, groups=self.groups,
            sink=self._sink, burst_seconds=self.scenario.burst, tick_seconds=TICK_SECONDS,
            react_seconds=TICK_SECONDS / self.scenario.substeps,
        )
        if self.log is not None:
            self.log.attach(self.nodes[node_id])

    def _remove(self, node_id: str, graceful: bool, where: str) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            raise ScenarioError(f"{where}: daemon {node_id!r} is not running")
        del self.nodes[node_id]
        if graceful:
            node.leave(self.now)  # to the others only: a stopped daemon hears nothing (nobody, if cut)
        self.transport.cut.discard(node_id)
        if self.log is not None:
            self.log.detach(node, graceful)
        self.retired.append(node)
        for key in [k for k in self._arrivals if k[0] == node_id]:
            del self._arrivals[key]

    # -- events -----------------------------------------------------------------------------

    def _apply(self, index: int) -> Change:
        ev = self.scenario.events[index]
        where = f"events[{index}] (tick {ev.at})"
        observable = ev.at
        labels = []
        touched: set[str] = set()
        if ev.groups:
            for name, body in ev.groups.items():
                if body is None:
                    self.groups.pop(name, None)
                    continue
                if name not in self.groups:  # its demand is known from the first reports
                    observable = max(observable, ev.at + 1)
                self.groups[name] = ResourceGroup.from_admin(name, body, base=self.groups.get(name))
            touched.update(f"{name}/{kind}" for name in ev.groups for kind in KINDS)
            for node in self.nodes.values():
                node.apply_config()
            labels.append("groups " + ",".join(sorted(ev.groups)))
        for node_id in ev.crash:
            self._remove(node_id, False, where)
            self._crashed_at[node_id] = ev.at
            observable = max(observable, ev.at + self.profile.ttl_ticks)
        for node_id in ev.leave:
            self._remove(node_id, True, where)
            observable = max(observable, ev.at + 1)
        for node_id in ev.join:
            if node_id in self.nodes:
                raise ScenarioError(f"{where}: daemon {node_id!r} is already running")
            self._spawn(node_id, self._phase(0, 0) if self.scenario.phases != "aligned" else 0)
            self._joined_at[node_id] = ev.at
            observable = max(observable, ev.at + 1)
        for node_id in ev.partition:
            if node_id not in self.nodes:
                raise ScenarioError(f"{where}: daemon {node_id!r} is not running")
            if node_id in self.transport.cut:
                raise ScenarioError(f"{where}: daemon {node_id!r} is partitioned already")
            self.transport.cut.add(node_id)
            # Peers see it as crashed: evicted after their TTL.
            observable = max(observable, ev.at + self.profile.ttl_ticks)
        for node_id in ev.heal:
            if node_id not in self.transport.cut:
                raise ScenarioError(f"{where}: daemon {node_id!r} is not partitioned")
            self.transport.cut.discard(node_id)
            self._healed_at[node_id] = ev.at
            observable = max(observable, ev.at + 1)
        if ev.demand:
            for group, per in ev.demand.items():
                for daemon, kinds in per.items():
                    self.demand.setdefault(group, {}).setdefault(daemon, {}).update(kinds)
                    touched.update(f"{group}/{kind}" for kind in kinds)
            observable = max(observable, ev.at + 1)
        if ev.message_sizes:
            # Peers learn a new size from the first report of traffic in it, as a demand change.
            self.sizes.update(ev.message_sizes)
            touched.update(f"{group}/{kind}" for group in ev.message_sizes for kind in KINDS)
            observable = max(observable, ev.at + 1)
        for what, ids in (("crash", ev.crash), ("leave", ev.leave), ("join", ev.join),
                          ("partition", ev.partition), ("heal", ev.heal)):
            if ids:
                labels.append(f"{what} {','.join(ids)}")
        if ev.demand:
            labels.append("demand")
        if ev.message_sizes:
            labels.append("sizes " + ",".join(sorted(ev.message_sizes)))
        if ev.groups:
            self.invariant.config_changed()
        members_changed = bool(ev.crash or ev.leave or ev.join or ev.partition or ev.heal)
        return Change(ev.at, observable, "; ".join(labels), None if members_changed else frozenset(touched))

    # -- the loop ---------------------------------------------------------------------------

    def _unit(self, group: ResourceGroup, kind: str, daemon: str = "") -> tuple[float, float] | None:
        """(quota, measured units per message) of the dimension we measure, or None if unlimited."""
        msgs, nbytes = group.rates(kind)
        if msgs >= 0:
            return msgs, 1.0
        if nbytes >= 0:
            return nbytes, float(self.sizes.of(group.name, daemon))
        return None

    def run(self) -> RunResult:
        sc = self.scenario
        s = sc.substeps
        dims: dict[str, list[DimensionTick | None]] = {}
        # Daemons report the traffic of tick 0 during tick 0 or (phase 0) at tick 1.
        changes = [Change(0, 1, "start")]
        limits: list[dict[str, dict[str, float]]] = []
        daemon_ticks = 0
        events_by_tick: dict[int, list[int]] = {}
        for i, ev in enumerate(sc.events):
            events_by_tick.setdefault(ev.at, []).append(i)
        for k in range(sc.ticks):
            self.now = k * TICK_SECONDS
            for i in events_by_tick.get(k, []):
                changes.append(self._apply(i))
            record = self._open_tick(k, dims)
            daemon_ticks += len(self.nodes)
            factors = self._jitter()
            for sub in range(s):
                self.now = (k + sub / s) * TICK_SECONDS
                self._deliver()
                for node in sorted(self.nodes.values(), key=lambda n: n.node_id):
                    if node.phase == sub:
                        node.tick(self.now)
                        if self.log is not None:
                            self.log.tick(node.node_id, self.now)
                self._check_invariant(k)
                self._traffic(record, factors, s)
                # Reacts at the sub-step's end: they measure all of its traffic, fold what
                # arrived during it, and what they decide holds from the next sub-step (a
                # report published at this sub-step's start is folded at its end: the react
                # loop's latency, at most a react interval as in the daemon).
                self.now = (k + (sub + 1) / s) * TICK_SECONDS - REACT_BEFORE_END
                self._deliver()
                for node in sorted(self.nodes.values(), key=lambda n: n.node_id):
                    node.react(self.now)
                self._check_invariant(k)
            limits.append(self._limits())
        if self.log is not None:
            self.log.close()
        everyone = list(self.nodes.values()) + self.retired
        return RunResult(
            scenario=sc.name, strategy=self.strategy, ticks=sc.ticks, dims=dims, changes=_merge(changes),
            reports=sum(n.stats.reports for n in everyone),
            report_bytes=sum(n.stats.report_bytes for n in everyone),
            reports_lost=self.transport.lost,
            announcements=sum(n.stats.announcements for n in everyone),
            daemon_ticks=daemon_ticks,
            counters={k: sum(getattr(n.stats, k) for n in everyone) for k in vars(NodeStats())},
            limits=limits,
            violations=self.invariant.finish(),
            invariant_checks=self.invariant.checks,
            reports_cut=self.transport.cut_off,
        )

    def _check_invariant(self, tick: int) -> None:
        def situation() -> Situation:
            ttl = self.profile.ttl_ticks

            def recent(at: dict[str, int]) -> tuple[str, ...]:
                return tuple(sorted(d for d, t in at.items() if tick - t <= ttl))

            return Situation(tuple(sorted(self.transport.cut)), recent(self._joined_at), recent(self._crashed_at),
                             recent(self._healed_at), self.scenario.loss, self.scenario.delay)

        self.invariant.check(self.now, self.nodes, self.groups, situation)

    def _deliver(self) -> None:
        """Put what the simulated topic has due by now into the receivers' inboxes."""
        for receiver, data in self.transport.due(self.now):
            node = self.nodes.get(receiver)
            if node is not None:
                node.inbox.append(data)

    def _jitter(self) -> dict[tuple[str, str, str], float]:
        j = self.scenario.jitter
        out: dict[tuple[str, str, str], float] = {}
        for group in sorted(self.demand):
            for daemon in sorted(self.demand[group]):
                for kind in sorted(self.demand[group][daemon]):
                    out[(daemon, group, kind)] = 1.0 + (self.rng.uniform(-j, j) if j else 0.0)
        return out

    def _open_tick(self, k: int, dims: dict[str, list[DimensionTick | None]]) -> dict[str, DimensionTick]:
        record: dict[str, DimensionTick] = {}
        for name in sorted(self.groups):
            for kind in KINDS:
                key = f"{name}/{kind}"
                series = dims.setdefault(key, [None] * self.scenario.ticks)
                unit = self._unit(self.groups[name], kind)
                if unit is None:
                    continue
                quota, _ = unit
                msgs, nbytes = self.groups[name].rates(kind)
                tick = DimensionTick(quota, bytes_quota=nbytes if msgs >= 0 else -1.0)
                series[k] = tick
                record[key] = tick
        return record

    def _traffic(self, record: dict[str, DimensionTick], factors: dict[tuple[str, str, str], float],
                 substeps: int) -> None:
        for node_id in sorted(self.nodes):
            node = self.nodes[node_id]
            for group_name in sorted(self.demand):
                group = self.groups.get(group_name)
                kinds = self.demand[group_name].get(node_id)
                if group is None or not kinds:
                    continue
                for kind in sorted(kinds):
                    rate = kinds[kind] * factors.get((node_id, group_name, kind), 1.0)
                    key = f"{group_name}/{kind}"
                    tick = record.get(key)
                    mb = self.sizes.of(group_name, node_id)
                    unit = 1.0 if tick is None else self._unit(group, kind, node_id)[1]  # type: ignore[index]
                    # A daemon cut off the topic has no share of the quota to claim (it cannot agree
                    # one with its peers): the judge's ideal splits the quota over the others, and
                    # whatever it admits meanwhile counts against the quota all the same.
                    cut = node_id in self.transport.cut
                    if tick is not None:
                        tick.offered[node_id] = 0.0 if cut else rate * unit
                        tick.message_bytes[node_id] = float(mb)
                        tick.per_message[node_id] = unit
                        tick.admitted.setdefault(node_id, 0.0)
                        tick.arrived.setdefault(node_id, 0.0)
                    if rate <= 0:
                        continue
                    arriving = self._arrivals.setdefault((node_id, group_name, kind), ArrivingDemand())
                    step = TICK_SECONDS / substeps
                    batch = ask_size(rate, step, mb, self._limit_messages(node, group_name, kind, mb))
                    admitted = arriving.step(rate, self.now, self.now + step, batch, node.asker(group, kind, mb))
                    if tick is not None:
                        tick.admitted[node_id] += admitted * unit
                        tick.arrived[node_id] += 0.0 if cut else arriving.arrived * unit

    @staticmethod
    def _limit_messages(node: SimNode, group: str, kind: str, mb: int) -> float:
        st = node.limiter.states.get((group, kind))
        if st is None:
            return math.inf
        return min(st.limit[0], st.limit[1] / max(1, mb))

    def _limits(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for node_id in sorted(self.nodes):
            node = self.nodes[node_id]
            for (group, kind), st in node.limiter.states.items():
                g = self.groups.get(group)
                if g is None:
                    continue
                msgs_q, _ = g.rates(kind)
                out.setdefault(f"{group}/{kind}", {})[node_id] = st.limit[0 if msgs_q >= 0 else 1]
        return out


def ask_size(rate: float, step: float, message_bytes: int, limit_messages: float) -> int:
    """Messages per ask for a daemon offered `rate` msg/s over a sub-step of `step` seconds,
    whose limit is `limit_messages` msg/s: a producer's batch (at most 1 ms of the rate,
    1000 messages, 128 KB; at least one message), coarsened up to COARSEST_ASK_OF_LIMIT of
    the limit but never past a sixteenth of the sub-step or the batch caps."""
    real = max(rate * BATCH_DELAY_SECONDS, COARSEST_ASK_OF_LIMIT * limit_messages)
    return max(1, int(min(rate * step / ACQUIRES_PER_SUBSTEP, real, MAX_BATCH_MESSAGES,
                          MAX_BATCH_BYTES // max(1, message_bytes))))


def _merge(changes: list[Change]) -> list[Change]:
    """One change per tick (events of the same tick are one change)."""
    by_tick: dict[int, Change] = {}
    for c in changes:
        old = by_tick.get(c.tick)
        if old is None:
            by_tick[c.tick] = c
        else:
            label = "; ".join(x for x in (old.label, c.label) if x)
            dims = None if old.dims is None or c.dims is None else old.dims | c.dims
            by_tick[c.tick] = Change(c.tick, max(old.observable, c.observable), label, dims)
    return [by_tick[t] for t in sorted(by_tick)]


def run(scenario: Scenario, strategy: str, params: QuotaParams | None = None,
        log: ReportLog | None = None) -> RunResult:
    """Run one scenario under one strategy."""
    return Simulation(scenario, strategy, params, log).run()
