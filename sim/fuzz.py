"""Scenario fuzzing: random scenarios within documented bounds, judged against rgd's targets.

Tuned scenarios prove little: an algorithm developed against them passes them. The fuzzer
draws scenarios nobody tuned for, as ordinary scenario documents (sim/scenario.py), so a
failing case is written out as a file that `python -m sim FILE` replays tick for tick.

Scenario i of seed S is a pure function of (S, i): `draw_scenario(S, i)`. The bounds
(BOUNDS below; sim/README.md states them and what holds within them):
- 2..50 daemons (joiners included; 65 % of scenarios have 2..8, 30 % 9..20, 5 % 21..50),
  1..20 groups; each group limits messages and/or bytes on publish, and on dispatch for
  about half of them; message sizes per group (and per daemon for some) drawn so that
  either dimension can bind;
- demand: steps, ramps (a change every tick for 3..5 ticks), on/off bursts, jitter 0..20 %,
  skewed (Zipf-like) or even splits, total demand 0.3..3x the quota;
- membership: joins, graceful leaves, crashes, same-id restarts, rolling restarts;
- config: quota raises and cuts (x0.1..x10), group create and delete;
- message sizes: a third of the scenarios with a group limiting messages and bytes both
  change some of its daemons' sizes (x0.25..x4) once or twice mid-run;
- transport: loss 0..30 %, delivery delay 0..2 ticks, duplicates 0..10 %;
- phases aligned, spread or random.
Sizes are kept so that a run of 500 scenarios x 5 strategies takes minutes on 2 cores
(daemon x group pairs with traffic are capped at MAX_PAIRS).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sim.engine import RunResult, run
from sim.hindsight import replay
from sim.metrics import Metrics, evaluate
from sim.scenario import Scenario, parse

__all__ = [
    "BOUNDS", "HINDSIGHT", "TARGETS", "CaseResult", "FuzzReport", "StrategyFigures", "Targets", "draw_document",
    "draw_scenario", "failures", "figures", "judge_case", "label", "run_case", "run_fuzz", "summarize",
    "target_lines", "write_failure",
]

BOUNDS: dict[str, Any] = {
    "daemons": (2, 50),
    # (share of scenarios, fewest, most daemons): a run costs ~ daemons^2 (every report reaches
    # every peer), so large clusters are drawn rarely; each band is log-uniform.
    "daemon_bands": ((0.65, 2, 8), (0.30, 9, 20), (0.05, 21, 50)),
    "groups": (1, 20),
    "ticks": (28, 36),
    "substeps": 5,  # acquire instants (and phase slots) per tick; the built-ins use 10
    "max_pairs": 30,  # daemon x group pairs with traffic, at most (keeps a run short)
    "quota_messages": (50, 20_000),  # msg/s
    "message_bytes": (64, 64_000),
    "demand_over_quota": (0.3, 3.0),
    "jitter": (0.0, 0.2),
    "quota_factor": (0.1, 10.0),
    "loss": (0.0, 0.3),
    "delay_ticks": (0.0, 2.0),
    "duplicate": (0.0, 0.1),
    "phases": ("aligned", "spread", "random"),
}
MAX_PAIRS = BOUNDS["max_pairs"]


@dataclass(frozen=True)
class Targets:
    """The issue's targets, as the fuzzer checks them."""

    overshoot_pct: float = 10.0  # every tick of every scenario (p99 and max reported)
    converge_ticks: int = 3  # for >= converge_share of changes ...
    converge_share: float = 0.95
    converge_all_ticks: int = 5  # ... and for all of them, where:
    max_loss: float = 0.30
    max_delay_ticks: float = 1.0
    utilization: float = 0.95  # after convergence, binding dimension
    jain: float = 0.99


TARGETS = Targets()


# -- drawing scenarios ------------------------------------------------------------------------------


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _log_int(rng: random.Random, lo: int, hi: int) -> int:
    return min(hi, max(lo, int(_log_uniform(rng, lo, hi + 1))))


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def _group_limits(rng: random.Random, size: float) -> dict[str, float]:
    """Messages and/or bytes on publish (and on dispatch for about half the groups).

    The bytes quota is the messages quota times the message size times a factor in
    0.3..3, so at saturation either dimension can be the one that binds."""
    out: dict[str, float] = {}
    kinds = ["publish"] + (["dispatch"] if rng.random() < 0.5 else [])
    for kind in kinds:
        q = _round(_log_uniform(rng, *BOUNDS["quota_messages"]))
        which = rng.choice(["messages", "bytes", "both", "both"])
        if which in ("messages", "both"):
            out[f"{kind}RateInMsgs"] = q
        if which in ("bytes", "both"):
            out[f"{kind}RateInBytes"] = _round(q * size * _log_uniform(rng, 0.3, 3.0))
    return out


def _split(rng: random.Random, total: float, members: Sequence[str]) -> dict[str, float]:
    """Split `total` msg/s over members: even, random, or Zipf-like skew."""
    shape = rng.choice(["even", "random", "zipf"])
    if shape == "even":
        w = [1.0] * len(members)
    elif shape == "random":
        w = [rng.uniform(0.1, 1.0) for _ in members]
    else:
        order = list(range(1, len(members) + 1))
        rng.shuffle(order)
        w = [1.0 / r for r in order]
    s = sum(w)
    return {m: _round(total * x / s) for m, x in zip(members, w)}


@dataclass
class _Draft:
    """The scenario being drawn, plus what a valid next event may refer to."""

    rng: random.Random
    ticks: int
    running: set[str]
    stopped: set[str]  # left or crashed: may rejoin with the same id
    unborn: list[str]  # ids that may join for the first time
    groups: dict[str, dict[str, float]]  # live groups and their limits
    sizes: dict[str, float]  # group -> base message size
    members: dict[str, list[str]]  # group -> daemons with traffic in it
    demand: dict[str, dict[str, dict[str, float]]]  # current demand, group -> daemon -> kind -> msg/s
    events: dict[int, dict[str, Any]] = field(default_factory=dict)
    next_group: int = 0

    def event(self, at: int) -> dict[str, Any]:
        return self.events.setdefault(at, {"at": at})

    def quota(self, group: str, kind: str) -> float:
        lim = self.groups[group]
        m = lim.get(f"{kind}RateInMsgs")
        b = lim.get(f"{kind}RateInBytes")
        cands = [v for v in (m, None if b is None else b / self.sizes[group]) if v is not None]
        return min(cands) if cands else 0.0

    def kinds(self, group: str) -> list[str]:
        return [k for k in ("publish", "dispatch") if any(f.startswith(k) for f in self.groups[group])]

    def set_demand(self, at: int, group: str, daemon: str, kind: str, rate: float) -> None:
        self.demand.setdefault(group, {}).setdefault(daemon, {})[kind] = rate
        ev = self.event(at).setdefault("demand", {}).setdefault(group, {}).setdefault(daemon, {})
        ev[kind] = rate


def _new_group(d: _Draft) -> tuple[str, dict[str, Any], dict[str, dict[str, float]]]:
    rng = d.rng
    name = f"g{d.next_group:02d}"
    d.next_group += 1
    size = float(_log_int(rng, *BOUNDS["message_bytes"]))
    limits = _group_limits(rng, size)
    d.groups[name] = limits
    d.sizes[name] = size
    pool = sorted(d.running)
    budget = MAX_PAIRS - sum(len(v) for v in d.members.values())
    k = max(1, min(len(pool), budget, _log_int(rng, 1, max(1, len(pool)))))
    members = sorted(rng.sample(pool, k)) if pool else []
    d.members[name] = members
    demand: dict[str, dict[str, float]] = {}
    for kind in d.kinds(name):
        total = d.quota(name, kind) * _log_uniform(rng, *BOUNDS["demand_over_quota"])
        for m, v in _split(rng, total, members).items():
            demand.setdefault(m, {})[kind] = v
    d.demand[name] = {m: dict(v) for m, v in demand.items()}
    return name, limits, demand


def _sizes_doc(d: _Draft) -> dict[str, Any]:
    """Per-group sizes; a third of the groups vary the size per daemon (x0.25..x4)."""
    out: dict[str, Any] = {}
    for g, size in d.sizes.items():
        if d.rng.random() < 1 / 3 and d.members.get(g):
            out[g] = {m: max(1, int(size * _log_uniform(d.rng, 0.25, 4.0))) for m in d.members[g]}
        else:
            out[g] = int(size)
    return out


def _coupled(limits: dict[str, float]) -> bool:
    """Does a kind of this group limit messages and bytes both (split jointly by rgd)?"""
    return any(f"{k}RateInMsgs" in limits and f"{k}RateInBytes" in limits for k in ("publish", "dispatch"))


def _size_changes(d: _Draft, sizes: dict[str, Any], rng: random.Random) -> None:
    """A third of the scenarios with a group whose messages and bytes are both limited change
    some of its daemons' message sizes (x0.25..x4) once or twice mid-run: where both are
    limited, a size change moves which dimension binds and the joint split's budget, and
    views that hold a daemon's old and new size at once are what that budget's bound is for
    (rgd/quota/calculator.py: _joint). Drawn from a stream of their own, so every other
    part of a scenario is what it was before these were drawn."""
    groups = sorted(g for g, lim in d.groups.items() if _coupled(lim) and d.members.get(g))
    if not groups or rng.random() >= 1 / 3 or d.ticks - 6 <= 8:
        return
    for _ in range(rng.randint(1, 2)):
        g = rng.choice(groups)
        at = rng.randint(8, d.ticks - 6)
        members = d.members[g]
        who = sorted(rng.sample(members, rng.randint(1, len(members))))
        now = sizes[g]
        change = {}
        for m in who:
            old = now.get(m, d.sizes[g]) if isinstance(now, dict) else now
            change[m] = max(1, min(BOUNDS["message_bytes"][1] * 4, int(old * _log_uniform(rng, 0.25, 4.0))))
        d.event(at).setdefault("message_sizes", {}).setdefault(g, {}).update(change)


def _busy(d: _Draft) -> list[tuple[str, str, str]]:
    return [(g, m, k) for g in sorted(d.demand) if g in d.groups
            for m in sorted(d.demand[g]) for k in sorted(d.demand[g][m])]


def _step(d: _Draft, at: int) -> None:
    busy = _busy(d)
    for g, m, k in d.rng.sample(busy, min(len(busy), d.rng.randint(1, 3))):
        old = d.demand[g][m][k]
        new = old * _log_uniform(d.rng, 0.1, 10.0) if old > 0 else d.quota(g, k) * d.rng.uniform(0.1, 1.0)
        d.set_demand(at, g, m, k, _round(new))


def _ramp(d: _Draft, at: int) -> int:
    busy = _busy(d)
    if not busy:
        return at
    g, m, k = d.rng.choice(busy)
    start = d.demand[g][m][k]
    end = max(1.0, start * _log_uniform(d.rng, 0.2, 5.0))
    steps = d.rng.randint(3, 5)
    for s in range(1, steps + 1):
        if at + s - 1 < d.ticks:
            d.set_demand(at + s - 1, g, m, k, _round(start + (end - start) * s / steps))
    return at + steps - 1


def _burst(d: _Draft, at: int) -> int:
    busy = _busy(d)
    if not busy:
        return at
    g, m, k = d.rng.choice(busy)
    on = d.demand[g][m][k] or d.quota(g, k) / 2
    length = d.rng.randint(2, 4)
    d.set_demand(at, g, m, k, 0.0)
    if at + length < d.ticks:
        d.set_demand(at + length, g, m, k, _round(on))
    return at + length


def _membership(d: _Draft, at: int, what: str) -> int:
    rng = d.rng
    ev = d.event(at)
    if what == "join":
        if d.stopped and (not d.unborn or rng.random() < 0.5):
            who = rng.choice(sorted(d.stopped))
            d.stopped.discard(who)
        elif d.unborn:
            who = d.unborn.pop(0)
            # A newcomer takes over some traffic in a group that has room for another pair.
            pairs = sum(len(v) for v in d.members.values())
            live = [g for g in sorted(d.groups) if who not in d.members.get(g, [])]
            if live and pairs < MAX_PAIRS:
                g = rng.choice(live)
                d.members[g].append(who)
                for k in d.kinds(g):
                    d.set_demand(at, g, who, k, _round(d.quota(g, k) * rng.uniform(0.1, 1.0)))
        else:
            return at
        ev.setdefault("join", []).append(who)
        d.running.add(who)
        return at
    if len(d.running) <= 1:
        return at
    who = rng.choice(sorted(d.running))
    d.running.discard(who)
    if what in ("leave", "crash"):
        ev.setdefault(what, []).append(who)
        d.stopped.add(who)
        return at
    # Same-id restart: a crash or a graceful leave, back 1..3 ticks later as a new incarnation.
    ev.setdefault(rng.choice(["crash", "leave"]), []).append(who)
    back = min(d.ticks - 1, at + rng.randint(1, 3))
    d.event(back).setdefault("join", []).append(who)
    d.running.add(who)
    return back


def _rolling(d: _Draft, at: int) -> int:
    """Each of 2..6 daemons leaves and rejoins with the same id, one after another."""
    who = sorted(d.running)
    d.rng.shuffle(who)
    t = at
    for node in who[:d.rng.randint(2, 6)]:
        if t + 1 >= d.ticks:
            break
        d.event(t).setdefault("leave", []).append(node)
        d.event(t + 1).setdefault("join", []).append(node)
        t += 2
    return t


def _quota(d: _Draft, at: int) -> None:
    g = d.rng.choice(sorted(d.groups))
    f = _log_uniform(d.rng, *BOUNDS["quota_factor"])
    new = {k: _round(v * f) for k, v in d.groups[g].items()}
    d.groups[g] = new
    d.event(at).setdefault("groups", {})[g] = new


def _create(d: _Draft, at: int) -> None:
    if len(d.groups) >= BOUNDS["groups"][1] or sum(len(v) for v in d.members.values()) >= MAX_PAIRS:
        return
    name, limits, demand = _new_group(d)
    ev = d.event(at)
    ev.setdefault("groups", {})[name] = limits
    for m, kinds in demand.items():
        ev.setdefault("demand", {}).setdefault(name, {})[m] = dict(kinds)


def _delete(d: _Draft, at: int) -> None:
    if len(d.groups) <= 1:
        return
    g = d.rng.choice(sorted(d.groups))
    del d.groups[g]
    d.members.pop(g, None)
    d.event(at).setdefault("groups", {})[g] = None


EVENT_KINDS = ("step", "step", "ramp", "burst", "join", "leave", "crash", "restart", "rolling",
               "quota", "quota", "create", "delete")


def draw_document(seed: int, index: int) -> dict[str, Any]:
    """Scenario `index` of fuzz seed `seed`, as a scenario document (sim/scenario.py's schema)."""
    rng = random.Random(f"fuzz:{seed}:{index}")
    u = rng.random()
    for share, lo, hi in BOUNDS["daemon_bands"]:  # noqa: B007 - lo, hi: the band drawn, read below
        if u < share:
            break
        u -= share
    total = _log_int(rng, lo, hi)
    initial = max(2, total - rng.randint(0, min(4, total - 2)))
    ids = [f"d{i:02d}" for i in range(total)]
    d = _Draft(rng=rng, ticks=rng.randint(*BOUNDS["ticks"]), running=set(ids[:initial]), stopped=set(),
               unborn=ids[initial:], groups={}, sizes={}, members={}, demand={})
    n_groups = _log_int(rng, *BOUNDS["groups"])
    initial_groups: dict[str, Any] = {}
    initial_demand: dict[str, Any] = {}
    for _ in range(n_groups):
        if sum(len(v) for v in d.members.values()) >= MAX_PAIRS:
            break
        name, limits, demand = _new_group(d)
        initial_groups[name] = dict(limits)
        initial_demand[name] = {m: dict(k) for m, k in demand.items()}
    # Events: the first after the start has settled, then spaced so most changes get a window
    # long enough to show convergence (ramps, bursts and rolling restarts are denser on purpose).
    at = rng.randint(8, 12)
    while at < d.ticks - 6:
        kind = rng.choice(EVENT_KINDS)
        end = at
        if kind == "step":
            _step(d, at)
        elif kind == "ramp":
            end = _ramp(d, at)
        elif kind == "burst":
            end = _burst(d, at)
        elif kind in ("join", "leave", "crash", "restart"):
            end = _membership(d, at, kind)
        elif kind == "rolling":
            end = _rolling(d, at)
        elif kind == "quota":
            _quota(d, at)
        elif kind == "create":
            _create(d, at)
        else:
            _delete(d, at)
        at = end + rng.randint(8, 12)
    loss = 0.0 if rng.random() < 0.4 else round(rng.uniform(*BOUNDS["loss"]), 3)
    delay = rng.choice([0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 1.5, 2.0])
    dup = 0.0 if rng.random() < 0.5 else round(rng.uniform(*BOUNDS["duplicate"]), 3)
    jitter = 0.0 if rng.random() < 0.5 else round(rng.uniform(*BOUNDS["jitter"]), 3)
    sizes = _sizes_doc(d)  # after the events: groups they create, daemons that join a group
    _size_changes(d, sizes, random.Random(f"fuzz-sizes:{seed}:{index}"))
    events = [d.events[k] for k in sorted(d.events) if len(d.events[k]) > 1]
    doc: dict[str, Any] = {
        "name": f"fuzz-{seed}-{index:04d}",
        "description": (f"fuzzed (seed {seed}, case {index}): {total} daemons, {len(d.sizes)} groups, "
                        f"{len(events)} event ticks, loss {loss:g}, delay {delay:g}, dup {dup:g}, jitter {jitter:g}"),
        "ticks": d.ticks,
        "seed": rng.randrange(2**31),
        "substeps": BOUNDS["substeps"],
        "phases": rng.choice(BOUNDS["phases"]),
        "jitter": jitter,
        "transport": {"loss": loss, "delay": delay, "duplicate": dup},
        "daemons": ids[:initial],
        "groups": initial_groups,
        "message_sizes": sizes,
        "demand": initial_demand,
        "events": events,
    }
    return doc


def draw_scenario(seed: int, index: int) -> Scenario:
    return parse(draw_document(seed, index), f"fuzz-{seed}-{index:04d}")


# -- running and judging ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseResult:
    """One scenario under one strategy, reduced to what the summary needs (small, picklable)."""

    scenario: str
    strategy: str
    loss: float
    delay: float
    overshoot_pct: float
    overshoot_at: str
    converge: tuple[int | None, ...]  # per change that moved a dimension's ideal; None = never
    superseded: int  # changes cut short by the next before they could show convergence
    utilization: tuple[float, ...]  # per converged window (change x dimension), binding dimension
    jain: tuple[float, ...]  # per converged window
    binding: tuple[str, ...]  # binding dimension per judged change
    seconds: float
    error: str = ""  # the run raised (a bug in the code under test): every target fails
    violations: int = 0  # episodes of the invariant broken (sim/invariant.py)
    worst_violation_pct: float = 0.0  # the worst one's excess over the quota (INF: a quota of 0)
    worst_violation: str = ""  # what, when and the situation

    @property
    def strict_convergence(self) -> bool:
        """The <= 5 ticks target applies (loss and delay within its bounds)."""
        return self.loss <= TARGETS.max_loss and self.delay <= TARGETS.max_delay_ticks


def judge_case(scenario: Scenario, m: Metrics, seconds: float) -> CaseResult:
    judged = [w for w in m.windows if w.moved and not w.superseded]
    # Utilization and Jain after convergence: every converged period, moved by its change or not.
    converged = [w for w in m.windows if w.ticks_to_converge is not None]
    return CaseResult(
        scenario=m.scenario, strategy=m.strategy, loss=scenario.loss, delay=scenario.delay,
        overshoot_pct=m.overshoot_pct, overshoot_at=m.overshoot_at,
        converge=tuple(w.ticks_to_converge for w in judged),
        superseded=sum(1 for w in m.windows if w.moved and w.superseded),
        utilization=tuple(w.utilization for w in converged if w.utilization is not None),
        jain=tuple(w.jain for w in converged if w.jain is not None),
        binding=tuple(w.binding for w in judged),
        seconds=seconds,
        violations=m.invariant_violations,
        worst_violation_pct=m.worst_violation_pct or 0.0,
        worst_violation=m.worst_violation,
    )


# Not a strategy: sim.hindsight's reference, an allocator that knows every daemon's arrivals of
# the previous tick exactly and hands out the judge's ideal of them (no delay, no loss, fluid
# admission). Its row says what of the targets is beyond anything that learns demand after
# the fact, so a reader can tell the workload's share of a miss from the strategy's.
HINDSIGHT = "hindsight"


def label(strategy: str) -> str:
    """How summaries and failing files name a row: the reference says it is one."""
    return f"{strategy} (reference)" if strategy == HINDSIGHT else strategy


def run_case(job: tuple[int, int, tuple[str, ...]]) -> list[CaseResult]:
    """Draw scenario (seed, index) and run it under every strategy (a worker's unit of work).
    HINDSIGHT among them replays the run of the strategy before it (any run gives the same
    replay: sim/hindsight.py), or of rgd if it comes first."""
    seed, index, strategies = job
    sc = draw_scenario(seed, index)
    out = []
    last: RunResult | None = None
    for strategy in strategies:
        started = time.perf_counter()
        try:
            if strategy == HINDSIGHT:
                reference = replay(last if last is not None else run(sc, "rgd"))
                reference.strategy = HINDSIGHT
                reference.violations = []  # it grants no limits: the replayed run's are not its own
                m = evaluate(reference)
            else:
                last = run(sc, strategy)
                m = evaluate(last)
        except Exception as exc:  # a crash in the simulated daemon is a finding, not the fuzzer's end
            out.append(CaseResult(sc.name, strategy, sc.loss, sc.delay, math.inf, "", (None,), 0, (), (), (),
                                  time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}"))
            continue
        out.append(judge_case(sc, m, time.perf_counter() - started))
    return out


def failures(c: CaseResult) -> list[str]:
    """The targets this case breaks on its own (the <= 3 ticks share is a corpus-wide target)."""
    if c.error:
        return [f"the run raised {c.error}"]
    out = []
    if c.overshoot_pct > TARGETS.overshoot_pct:
        out.append(f"overshoot {c.overshoot_pct:.1f} % > {TARGETS.overshoot_pct:g} % at {c.overshoot_at}")
    if c.strict_convergence:
        slow = [t for t in c.converge if t is None or t > TARGETS.converge_all_ticks]
        if slow:
            shown = ", ".join("never" if t is None else str(t) for t in slow)
            out.append(f"{len(slow)} change(s) not converged within {TARGETS.converge_all_ticks} ticks ({shown})")
    if c.utilization and min(c.utilization) < TARGETS.utilization:
        out.append(f"utilization {min(c.utilization):.1%} < {TARGETS.utilization:.0%} after convergence")
    if c.jain and min(c.jain) < TARGETS.jain:
        out.append(f"Jain {min(c.jain):.3f} < {TARGETS.jain}")
    return out


def write_failure(out_dir: Path, seed: int, index: int, broken: dict[str, list[str]]) -> Path:
    """The failing case as a scenario file, with what failed (per strategy) in its header."""
    doc = draw_document(seed, index)
    path = out_dir / f"{doc['name']}.yaml"
    head = [f"# Fuzzed case {index} of seed {seed}; replay: python -m sim {path.name}"]
    for strategy, what in broken.items():
        head.append(f"# {label(strategy)}: " + "; ".join(what))
    path.write_text("\n".join(head) + "\n" + yaml.safe_dump(doc, sort_keys=False, width=120))
    return path


@dataclass
class FuzzReport:
    seed: int
    count: int
    strategies: tuple[str, ...]
    cases: list[CaseResult]
    wall_seconds: float
    jobs: int
    failing: dict[str, list[str]] = field(default_factory=dict)  # scenario -> what failed (first strategy)


def run_fuzz(seed: int, count: int, strategies: Sequence[str], jobs: int = 1, first: int = 0,
             progress: Any = None) -> FuzzReport:
    """Run scenarios first..first+count-1 of `seed` under every strategy (jobs > 1: processes)."""
    work = [(seed, i, tuple(strategies)) for i in range(first, first + count)]
    started = time.perf_counter()
    cases: list[CaseResult] = []
    if jobs > 1:
        import multiprocessing

        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        with ctx.Pool(jobs) as pool:
            for done, results in enumerate(pool.imap_unordered(run_case, work, chunksize=1), 1):
                cases.extend(results)
                if progress:
                    progress(done, len(work))
    else:
        for done, job in enumerate(work, 1):
            cases.extend(run_case(job))
            if progress:
                progress(done, len(work))
    order = {s: i for i, s in enumerate(strategies)}
    cases.sort(key=lambda c: (c.scenario, order[c.strategy]))
    return FuzzReport(seed, count, tuple(strategies), cases, time.perf_counter() - started, jobs)


# -- summary ----------------------------------------------------------------------------------------


def _quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (no interpolation: every figure is one that happened)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


def _ticks(x: float) -> str:
    return "never" if math.isinf(x) else ("—" if math.isnan(x) else f"{x:g}")


def _pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.1f}"


def _per_strategy(cases: Iterable[CaseResult]) -> dict[str, list[CaseResult]]:
    per: dict[str, list[CaseResult]] = {}
    for c in cases:
        per.setdefault(c.strategy, []).append(c)
    return per


@dataclass(frozen=True)
class StrategyFigures:
    changes: int
    superseded: int
    converge: list[float]  # inf = never; every judged change
    converge_strict: list[float]  # where loss and delay are within the <= 5 ticks target's bounds
    overshoot: list[float]  # worst tick per scenario
    utilization: list[float]
    jain: list[float]
    failing: int  # scenarios breaking a per-case target
    errors: int  # runs that raised (left out of every distribution above)


def figures(cs: Sequence[CaseResult]) -> StrategyFigures:
    errors = sum(1 for c in cs if c.error)
    cs = [c for c in cs if not c.error]
    conv = [math.inf if t is None else float(t) for c in cs for t in c.converge]
    strict = [math.inf if t is None else float(t) for c in cs if c.strict_convergence for t in c.converge]
    return StrategyFigures(
        changes=len(conv), superseded=sum(c.superseded for c in cs), converge=conv, converge_strict=strict,
        overshoot=[c.overshoot_pct for c in cs],
        utilization=[u for c in cs for u in c.utilization], jain=[j for c in cs for j in c.jain],
        failing=sum(1 for c in cs if failures(c)) + errors,
        errors=errors,
    )


def summarize(report: FuzzReport) -> str:
    per = _per_strategy(report.cases)
    figs = {s: figures(per.get(s, [])) for s in report.strategies}
    n = report.count
    real = len(report.strategies) - (HINDSIGHT in figs)
    lines = [
        f"## Fuzz: {n} scenarios x {real} strategies{' and the hindsight reference' if HINDSIGHT in figs else ''}"
        f", seed {report.seed} (bounds and definitions: sim/README.md)",
        "",
        "| strategy | changes | converge p50 / p95 / max (ticks) | <= 3 ticks | overshoot p50 / p95 / p99 / max % "
        "| util p50 / p5 / min % | Jain p50 / p5 / min | failing cases |",
        "|---|---:|---|---:|---|---|---|---:|",
    ]
    for s, f in figs.items():
        c = f.converge
        within = sum(1 for t in c if t <= TARGETS.converge_ticks) / len(c) if c else math.nan
        lines.append(
            f"| {s} | {f.changes} (+{f.superseded} cut short) "
            f"| {_ticks(_quantile(c, .5))} / {_ticks(_quantile(c, .95))} / {_ticks(max(c, default=math.nan))} "
            f"| {within:.1%} "
            f"| {' / '.join(_pct(_quantile(f.overshoot, q)) for q in (.5, .95, .99))} / "
            f"{_pct(max(f.overshoot, default=math.nan))} "
            f"| {' / '.join(_pct(100 * _quantile(f.utilization, q)) for q in (.5, .05))} / "
            f"{_pct(100 * min(f.utilization, default=math.nan))} "
            f"| {_quantile(f.jain, .5):.3f} / {_quantile(f.jain, .05):.3f} / {min(f.jain, default=math.nan):.3f} "
            f"| {f.failing} / {len(per.get(s, []))}{f' ({f.errors} raised)' if f.errors else ''} |"
        )
    if HINDSIGHT in figs:
        lines += ["", f"{HINDSIGHT}: not a strategy but a reference (sim/hindsight.py), replayed from the same runs: "
                  "every daemon admits the lesser of its arrivals and its ideal share of the tick before, as a "
                  "fluid, with no delivery delay and no loss. Where it misses a target, so does anything that "
                  "learns demand after the fact. Its overshoot is the tick after a quota cut (the old quota's "
                  "shares), which real strategies see when the cut arrives."]
    lines += ["", "Targets (issue: quota quality on workloads nobody tuned for):", ""]
    for s, f in figs.items():
        lines += [f"- {label(s)}:"] + [f"  - {t}" for t in target_lines(f)]
    lines += _comparison(figs)
    lines += _invariant_lines(per)
    lines += ["", "Worst overshoot by delivery delay: max % (scenarios over 10 % / scenarios); where the worst tick of "
              "each scenario over 10 % was:", "",
              "| strategy | delay 0 | delay 0 < d <= 1 tick | delay > 1 tick | start-up (tick <= 3) / later |",
              "|---|---|---|---|---|"]
    for s, cs in per.items():
        done = [c for c in cs if not c.error]
        cells = []
        for lo, hi in ((-1.0, 0.0), (0.0, 1.0), (1.0, math.inf)):
            xs = [c.overshoot_pct for c in done if lo < c.delay <= hi]
            over = sum(1 for x in xs if x > TARGETS.overshoot_pct)
            cells.append(f"{_pct(max(xs, default=math.nan))} % ({over}/{len(xs)})")
        bad = [c for c in done if c.overshoot_pct > TARGETS.overshoot_pct]
        early = sum(1 for c in bad if _tick_of(c.overshoot_at) <= 3)
        lines.append(f"| {s} | {' | '.join(cells)} | {early} / {len(bad) - early} |")
    lines += [
        "",
        f"({n} scenarios x {real} strategies{' (and the reference)' if HINDSIGHT in figs else ''} "
        f"in {report.wall_seconds:.0f} s wall "
        f"with --jobs {report.jobs}; convergence is per change that moved a dimension's ideal, a change cut "
        f"short by the next before it could show convergence is left out; util and Jain are over every "
        f"converged window, change x dimension)",
    ]
    return "\n".join(lines)


def _invariant_lines(per: dict[str, list[CaseResult]]) -> list[str]:
    """Per strategy: how often the sum of granted limits broke quota + 10 % (sim/invariant.py), and the worst."""
    lines = ["", "Invariant (the limits the live daemons granted themselves, summed per group, kind and dimension, "
             "within the quota + 10 % at every sub-step):", "",
             "| strategy | scenarios violating | episodes | worst % over the quota | where (situation) |",
             "|---|---:|---:|---:|---|"]
    for s, cs in per.items():
        done = [c for c in cs if not c.error]
        bad = [c for c in done if c.violations]
        worst = max(bad, key=lambda c: c.worst_violation_pct, default=None)
        where = f"{worst.scenario}: {worst.worst_violation}" if worst else "—"
        lines.append(f"| {s} | {len(bad)} / {len(done)} | {sum(c.violations for c in done)} "
                     f"| {_pct(worst.worst_violation_pct) if worst else '—'} | {where} |")
    return lines


def _tick_of(where: str) -> int:
    """The tick in an `overshoot_at` text ("g01/publish tick 2 (bytes)")."""
    parts = where.split()
    return int(parts[parts.index("tick") + 1]) if "tick" in parts else -1


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def target_lines(f: StrategyFigures) -> list[str]:
    t = TARGETS
    p99, worst = _quantile(f.overshoot, .99), max(f.overshoot, default=0.0)
    strict = f.converge_strict
    share = sum(1 for x in strict if x <= t.converge_ticks) / len(strict) if strict else 1.0
    slowest = max(strict, default=0.0)
    umin = min(f.utilization, default=math.nan)
    jmin = min(f.jain, default=math.nan)
    return [
        f"{_verdict(not f.errors)} every run completes: {f.errors} raised",
        f"{_verdict(worst <= t.overshoot_pct)} overshoot <= {t.overshoot_pct:g} % in every tick: "
        f"p99 {p99:.1f} %, max {worst:.1f} %",
        f"{_verdict(share >= t.converge_share)} convergence <= {t.converge_ticks} ticks for >= "
        f"{t.converge_share:.0%} of changes (loss <= {t.max_loss:.0%}, delay <= {t.max_delay_ticks:g} tick): "
        f"{share:.1%} of {len(strict)}",
        f"{_verdict(slowest <= t.converge_all_ticks)} convergence <= {t.converge_all_ticks} ticks for all of them: "
        f"worst {_ticks(slowest)}, {sum(1 for x in strict if x > t.converge_all_ticks)} over",
        f"{_verdict(not math.isnan(umin) and umin >= t.utilization)} utilization of the binding dimension >= "
        f"{t.utilization:.0%} after convergence: min {_pct(100 * umin)} %, "
        f"{sum(1 for u in f.utilization if u < t.utilization)} of {len(f.utilization)} converged windows below",
        f"{_verdict(not math.isnan(jmin) and jmin >= t.jain)} Jain >= {t.jain}: min {jmin:.3f}, "
        f"{sum(1 for j in f.jain if j < t.jain)} of {len(f.jain)} converged windows below",
    ]


def _comparison(figs: dict[str, StrategyFigures]) -> list[str]:
    if "rgd" not in figs or len(set(figs) - {HINDSIGHT}) < 2:
        return []
    r = figs["rgd"]

    def conv_key(f: StrategyFigures) -> tuple[float, float]:
        c = f.converge_strict
        return (sum(1 for x in c if x <= TARGETS.converge_ticks) / len(c) if c else 1.0, -max(c, default=0.0))

    def worst(f: StrategyFigures) -> float:  # over the runs that completed (raised runs: their own line)
        return max(f.overshoot, default=0.0)

    others = {s: f for s, f in figs.items() if s not in ("rgd", HINDSIGHT)}
    worse_over = [s for s, f in others.items() if worst(f) < worst(r)]
    better_conv = [s for s, f in others.items() if conv_key(f) > conv_key(r)]
    return [
        "",
        f"- {_verdict(not worse_over)} no other strategy beats rgd on worst overshoot"
        + (f" (beaten by {', '.join(f'{s} {worst(figs[s]):.1f} %' for s in worse_over)} vs "
           f"{worst(r):.1f} %)" if worse_over else ""),
        f"- {_verdict(not better_conv)} no other strategy beats rgd on convergence (share within "
        f"{TARGETS.converge_ticks} ticks, then worst)"
        + (f" (beaten by {', '.join(better_conv)})" if better_conv else ""),
    ]
