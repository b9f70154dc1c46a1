"""Replay a rebuilt offered load through the simulator, under the logged quotas and under proposed ones.

The simulator (sim/, `python -m sim`) runs the daemon's own cluster node on a simulated
clock and topic; it is reached only through its public way to run a scenario: a scenario
document (sim/scenario.py's schema) checked by `sim.scenario.parse`, run by
`sim.engine.run`, and judged per tick by `sim.metrics` (the same judge as its tables). It
is imported when a replay runs, never at import time: the Docker image ships rgd without
sim/, and then `rgd whatif` says so (SimulatorMissing) instead of failing on an import.

What the replay assumes (the page says it too): every second's offered load is what the
logs show, whatever the quota: a broker's denied batches are dropped, not retried (as
the simulator's brokers do), so a lower quota throttles more rather than delaying load.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rgd.config.groups import KIND_FIELDS, RATE_FIELDS
from rgd.whatif.offered import ADMITTED_BYTES, ADMITTED_MESSAGES, THROTTLED_BYTES, THROTTLED_MESSAGES, OfferedLoad
from rgd.whatif.proposal import Change

__all__ = ["DimFigures", "Replay", "ReplayError", "SimulatorMissing", "logged_figures", "replay", "scenario_doc"]

OVER_GRACE = 0.01  # a tick counts as over quota above 101 % of it (sim.metrics' grace for sub-step jitter)
MAX_MESSAGE_BYTES = 100 * 1024 * 1024  # the scenario schema's bound on a message size


class SimulatorMissing(RuntimeError):
    """The simulator package (sim/) is not importable here."""


class ReplayError(ValueError):
    """The logs make a scenario the simulator refuses (e.g. a daemon id it cannot take); says which part."""


def _sim() -> tuple[Any, Any, Any, Any]:
    """sim's scenario parser, runner, tick record and judge; SimulatorMissing if sim is absent."""
    try:
        from sim import metrics
        from sim.engine import DimensionTick, run
        from sim.scenario import parse
    except ImportError as exc:
        raise SimulatorMissing(
            f"rgd whatif needs the simulator, the `sim` package ({exc}). It ships with rgd's source tree "
            "and pip package (pip install rgd, or pip install -e . in a clone) but not in the Docker image: "
            "run rgd whatif where rgd is installed from the source tree or the wheel.") from None
    return parse, run, DimensionTick, metrics


@dataclass
class DimFigures:
    """One group's kind over the replay: totals, fairness, overshoot, and the per-second series."""

    admitted_messages: float = 0.0
    admitted_bytes: float = 0.0
    throttled_messages: float = 0.0
    throttled_bytes: float = 0.0
    jain_mean: float | None = None  # Jain's index of admitted over the max-min fair share of demand
    jain_min: float | None = None
    overshoot_pct: float = 0.0  # the worst second's cluster usage above the quota, in %
    seconds_over: int = 0  # seconds above the quota by more than OVER_GRACE
    seconds_limited: int = 0  # seconds the kind had a quota
    unit: str = "messages"  # what the quota limits (the series are in it): messages, bytes, or "" (unlimited)
    admitted: list[float] = field(default_factory=list)  # per second, in `unit` (messages where unlimited)
    quota: list[float] = field(default_factory=list)  # per second, in `unit`; NaN where unlimited
    jain: list[float] = field(default_factory=list)  # per second; NaN where there is nothing to judge

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k not in ("admitted", "quota", "jain")}


@dataclass
class Replay:
    """Logged figures, the replay under the logged quotas (now) and under the proposed ones."""

    strategy: str
    changes: list[Change]
    logged: dict[tuple[str, str], DimFigures]
    now: dict[tuple[str, str], DimFigures]
    proposed: dict[tuple[str, str], DimFigures]
    quotas_now: dict[tuple[str, str], tuple[float, float]]  # (group, kind) -> last (messages, bytes) quota
    quotas_proposed: dict[tuple[str, str], tuple[float, float]]


# -- the scenario ------------------------------------------------------------------------------


def _body(load: OfferedLoad, group: str, s: int, changes: Iterable[Change]) -> dict[str, float]:
    body: dict[str, float] = {}
    for kind, (msgs_field, bytes_field) in KIND_FIELDS.items():
        q = load.quotas.get((group, kind))
        if q is not None:
            body[msgs_field], body[bytes_field] = float(q[0, s]), float(q[1, s])
    for c in changes:
        if c.group == group:
            body[c.field] = c.value
    return {f: body.get(f, -1.0) for f in RATE_FIELDS}


def _rate(x: float) -> float:
    return float(f"{x:.6g}")


def message_sizes(load: OfferedLoad) -> dict[str, dict[str, int]]:
    """Bytes per message of each daemon in each group, over the whole log (the simulator's sizes)."""
    out: dict[str, dict[str, int]] = {}
    for group in load.groups:
        for daemon in load.daemons:
            arrays = [a for (g, d, _), a in load.counts.items() if g == group and d == daemon]
            msgs = sum(float(a[ADMITTED_MESSAGES].sum() + a[THROTTLED_MESSAGES].sum()) for a in arrays)
            nbytes = sum(float(a[ADMITTED_BYTES].sum() + a[THROTTLED_BYTES].sum()) for a in arrays)
            if msgs > 0:
                out.setdefault(group, {})[daemon] = int(min(MAX_MESSAGE_BYTES, max(1, round(nbytes / msgs))))
    return out


def scenario_doc(load: OfferedLoad, changes: Sequence[Change] = (), name: str = "whatif") -> dict[str, Any]:
    """A scenario (sim/scenario.py's schema) that offers each daemon the logged load, second by second,
    runs each daemon while it ran, and applies the logged quotas as they changed, with `changes` on top
    for the whole run."""
    n = load.seconds
    events: dict[int, dict[str, Any]] = {}

    def event(at: int) -> dict[str, Any]:
        return events.setdefault(at, {"at": at})

    first: list[str] = []
    for daemon, spans in sorted(load.spans.items()):
        for i, span in enumerate(spans):
            if i == 0 and span.start == 0:
                first.append(daemon)
            else:
                event(span.start).setdefault("join", []).append(daemon)
            stop = span.end + 1
            if i + 1 < len(spans):
                stop = min(stop, spans[i + 1].start)
            if stop < n:
                event(stop).setdefault("leave" if span.graceful else "crash", []).append(daemon)
    groups0 = {g: _body(load, g, 0, changes) for g in load.groups}
    for g in load.groups:
        prev = groups0[g]
        for s in range(1, n):
            body = _body(load, g, s, changes)
            if body != prev:
                event(s).setdefault("groups", {})[g] = body
                prev = body
    demand0: dict[str, dict[str, dict[str, float]]] = {}
    for (g, d, kind), a in sorted(load.counts.items()):
        offered = a[ADMITTED_MESSAGES] + a[THROTTLED_MESSAGES]
        last = _rate(float(offered[0]))
        demand0.setdefault(g, {}).setdefault(d, {})[kind] = last
        for s in range(1, n):
            r = _rate(float(offered[s]))
            if r != last:
                event(s).setdefault("demand", {}).setdefault(g, {}).setdefault(d, {})[kind] = r
                last = r
    return {
        "name": name, "description": "usage logs replayed by rgd whatif", "ticks": n, "seed": 1,
        "daemons": first, "groups": groups0, "demand": demand0, "message_sizes": message_sizes(load),
        "events": [events[k] for k in sorted(events)],
    }


# -- the figures -------------------------------------------------------------------------------


def _in_messages(t: Any) -> tuple[float, float, float, float]:
    """(admitted messages, admitted bytes, offered messages, offered bytes) of one recorded tick."""
    am = ab = om = ob = 0.0
    for d, unit in t.per_message.items():
        size = t.message_bytes.get(d, 1.0)
        a = t.admitted.get(d, 0.0) / unit
        o = t.arrived.get(d, t.offered.get(d, 0.0)) / unit
        am, ab, om, ob = am + a, ab + a * size, om + o, ob + o * size
    return am, ab, om, ob


def _figures(ticks: Sequence[Any | None], fallback: np.ndarray, metrics: Any) -> DimFigures:
    """Figures of one dimension from its recorded ticks (None: no quota that second, everything offered
    was admitted: `fallback` [2, seconds] gives the offered messages and bytes)."""
    f = DimFigures()
    jains: list[float] = []
    # A tick measured in bytes counts a message as its size (sim.engine's per_message), one in messages as 1:
    # alike only for 1-byte messages, where both read the same.
    units = [t.bytes_quota < 0 and any(u != 1.0 for u in t.per_message.values()) for t in ticks if t is not None]
    f.unit = "" if not units else ("bytes" if all(units) else "messages")
    for s, t in enumerate(ticks):
        if t is None:
            f.admitted_messages += float(fallback[0, s])
            f.admitted_bytes += float(fallback[1, s])
            f.admitted.append(float(fallback[0 if f.unit != "bytes" else 1, s]))
            f.quota.append(math.nan)
            f.jain.append(math.nan)
            continue
        am, ab, om, ob = _in_messages(t)
        f.admitted_messages += am
        f.admitted_bytes += ab
        f.throttled_messages += max(0.0, om - am)
        f.throttled_bytes += max(0.0, ob - ab)
        f.admitted.append(ab if f.unit == "bytes" else am)
        f.quota.append(t.quota)
        f.seconds_limited += 1
        j = metrics.jain(t)
        f.jain.append(math.nan if j is None else float(j))
        if j is not None:
            jains.append(float(j))
        worst = max(((u / q - 1.0) * 100.0 for u, q in metrics.usage_and_quota(t)), default=0.0)
        f.overshoot_pct = max(f.overshoot_pct, worst)
        f.seconds_over += any(u > q * (1 + OVER_GRACE) for u, q in metrics.usage_and_quota(t))
    if jains:
        f.jain_mean, f.jain_min = sum(jains) / len(jains), min(jains)
    return f


def _logged_ticks(load: OfferedLoad, group: str, kind: str, sizes: dict[str, float], tick_cls: Any) -> list[Any]:
    """The logged counts of one dimension as the simulator's tick records, so one judge rates both."""
    q = load.quotas.get((group, kind))
    rows = {d: a for (g, d, k), a in load.counts.items() if g == group and k == kind}
    out: list[Any] = []
    for s in range(load.seconds):
        qm, qb = (float(q[0, s]), float(q[1, s])) if q is not None else (-1.0, -1.0)
        if qm < 0 and qb < 0:
            out.append(None)
            continue
        t = tick_cls(qm if qm >= 0 else qb, bytes_quota=qb if qm >= 0 else -1.0)
        in_bytes = qm < 0  # as sim.engine measures: messages where they are limited, else bytes
        admitted_row, throttled_row = (ADMITTED_BYTES, THROTTLED_BYTES) if in_bytes else \
            (ADMITTED_MESSAGES, THROTTLED_MESSAGES)
        for d, a in rows.items():
            offered = float(a[admitted_row, s] + a[throttled_row, s])
            if offered <= 0:
                continue
            size = sizes.get(d, 1.0)
            t.offered[d] = t.arrived[d] = offered
            t.admitted[d] = float(a[admitted_row, s])
            t.message_bytes[d] = size
            t.per_message[d] = size if in_bytes else 1.0
        out.append(t)
    return out


def _fallback(load: OfferedLoad, group: str, kind: str) -> np.ndarray:
    out = np.zeros((2, load.seconds))
    for (g, _, k), a in load.counts.items():
        if g == group and k == kind:
            out[0] += a[ADMITTED_MESSAGES] + a[THROTTLED_MESSAGES]
            out[1] += a[ADMITTED_BYTES] + a[THROTTLED_BYTES]
    return out


def logged_figures(load: OfferedLoad, group: str, kind: str, sizes: dict[str, float]) -> DimFigures:
    """What the logs say of one dimension, judged like a replay (throttled and admitted as counted)."""
    _, _, tick_cls, metrics = _sim()
    f = _figures(_logged_ticks(load, group, kind, sizes, tick_cls), _fallback(load, group, kind), metrics)
    f.admitted_messages = load.total(group, kind, ADMITTED_MESSAGES)
    f.admitted_bytes = load.total(group, kind, ADMITTED_BYTES)
    f.throttled_messages = load.total(group, kind, THROTTLED_MESSAGES)
    f.throttled_bytes = load.total(group, kind, THROTTLED_BYTES)
    return f


def _last_quotas(doc: dict[str, Any]) -> dict[tuple[str, str], tuple[float, float]]:
    bodies = dict(doc["groups"])
    for ev in doc["events"]:
        bodies.update(ev.get("groups", {}))
    return {(g, kind): (float(b[m]), float(b[by])) for g, b in bodies.items() for kind, (m, by) in KIND_FIELDS.items()}


def _run(load: OfferedLoad, changes: Sequence[Change],
         strategy: str) -> tuple[dict[tuple[str, str], DimFigures], dict[tuple[str, str], tuple[float, float]]]:
    parse, run, _, metrics = _sim()
    doc = scenario_doc(load, changes)
    try:
        result = run(parse(doc), strategy)
    except ValueError as exc:  # sim.scenario.ScenarioError: the message names the key
        raise ReplayError(f"the simulator cannot replay these logs: {exc}") from None
    out = {}
    for g in load.groups:
        for kind in load.kinds(g):
            series = result.dims.get(f"{g}/{kind}") or [None] * load.seconds
            out[(g, kind)] = _figures(series, _fallback(load, g, kind), metrics)
    return out, _last_quotas(doc)


def replay(load: OfferedLoad, changes: Sequence[Change], strategy: str = "rgd") -> Replay:
    """Run the logged load under the logged quotas and under the proposed `changes`."""
    sizes = message_sizes(load)
    logged = {(g, k): logged_figures(load, g, k, {d: float(v) for d, v in sizes.get(g, {}).items()})
              for g in load.groups for k in load.kinds(g)}
    now, quotas_now = _run(load, (), strategy)
    proposed, quotas_proposed = _run(load, changes, strategy)
    return Replay(strategy, list(changes), logged, now, proposed, quotas_now, quotas_proposed)
