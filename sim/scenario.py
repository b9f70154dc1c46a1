"""Scenario files: schema, validation (errors name the bad key) and loading.

A scenario is a YAML mapping; every key but `ticks`, `daemons`, `groups` is optional:

```yaml
name: skew                 # default: the file name without .yaml
description: one line for the table
ticks: 30                  # length of the run, in ticks (1 tick = 1 s, the daemon's default)
seed: 1                    # seeds the transport and the phases; same seed, same run
substeps: 10               # acquires are spread over this many instants per tick (2..100)
phases: spread             # when each daemon ticks within a tick: spread | aligned | random
message_bytes: 1000        # bytes per message (demand is in messages/s)
message_sizes:             # per group (a number) or per group and daemon (a mapping): bytes per
  g: {a: 200, b: 20000}    #   message, overriding message_bytes (1..100 MiB); events may change them
burst: 0.1                 # token bucket, seconds of the local limit (default: the daemon's)
ttl_ticks: 3               # rgd's eviction of a silent daemon (default: the daemon's)
pulsar_ttl_ticks: 10       # Pulsar's: 600 s of usage kept, in 60 s periods
jitter: 0.0                # each tick's demand is scaled by 1 + uniform(-jitter, jitter)
transport: {loss: 0.0, delay: 0.0, duplicate: 0.0}   # per report and receiver; delay in ticks
daemons: [a, b]            # present from tick 0
groups:                    # Pulsar admin v2 fields, -1 = unlimited (missing = unlimited)
  g: {publishRateInMsgs: 1000}
demand:                    # offered load from tick 0: group -> daemon -> messages/s
  g: {a: 800, b: {publish: 300, dispatch: 50}}   # a number means publish
events:                    # changes at the start of tick `at`
  - at: 10
    demand: {g: {a: 100}}  # set (0 = stop)
    join: [c]              # new daemons (a re-used id is a restart: new incarnation)
    leave: [b]             # graceful: a leaving report, peers evict at once
    crash: [a]             # silent: peers evict after their TTL
    groups: {g: {publishRateInMsgs: 500}, h: {publishRateInMsgs: 50}, old: null}  # update/create/delete
    message_sizes: {g: {a: 4000}}   # a daemon's (or, as a number, the group's) new message size
  - at: 20
    partition: [b]         # cut off from the topic: publishes to nobody, hears nobody; its
                           #   brokers still ask it, and it keeps running (peers evict it after their TTL)
  - at: 40
    heal: [b]              # back on the topic (a partitioned daemon that crashes or leaves is healed)
```

Demand of a daemon that is not running is ignored until it joins. A partition names running
daemons that are not cut already; a heal names cut ones (checked as the run reaches them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rgd.config.groups import KINDS, InvalidGroup, ResourceGroup, check_name
from rgd.config.settings import Settings

BUILTIN_DIR = Path(__file__).with_name("scenarios")
PHASES = ("spread", "aligned", "random")
TOP_KEYS = {
    "name", "description", "ticks", "seed", "substeps", "phases", "message_bytes", "burst",
    "ttl_ticks", "pulsar_ttl_ticks", "jitter", "transport", "daemons", "groups", "demand", "events",
    "message_sizes",
}
MAX_MESSAGE_BYTES = 100 * 1024 * 1024
EVENT_KEYS = {"at", "demand", "join", "leave", "crash", "groups", "message_sizes", "partition", "heal"}
TRANSPORT_KEYS = {"loss", "delay", "duplicate"}

Demand = dict[str, dict[str, dict[str, float]]]  # group -> daemon -> kind -> messages/s
Sizes = dict[str, int | dict[str, int]]  # group -> bytes per message, or daemon -> bytes per message


class ScenarioError(ValueError):
    """A scenario that does not validate; the message starts with the path of the bad key."""


@dataclass(frozen=True)
class Event:
    at: int
    demand: Demand = field(default_factory=dict)
    join: tuple[str, ...] = ()
    leave: tuple[str, ...] = ()
    crash: tuple[str, ...] = ()
    groups: dict[str, Mapping[str, Any] | None] = field(default_factory=dict)
    message_sizes: Sizes = field(default_factory=dict)  # from this event on (sim.engine.MessageSizes.update)
    partition: tuple[str, ...] = ()  # cut off from the topic (sim.transport.Transport.cut)
    heal: tuple[str, ...] = ()  # back on the topic


@dataclass(frozen=True)
class Scenario:
    name: str
    ticks: int
    daemons: tuple[str, ...]
    groups: dict[str, ResourceGroup]
    demand: Demand
    events: tuple[Event, ...] = ()
    description: str = ""
    seed: int = 1
    substeps: int = 10
    phases: str = "spread"
    message_bytes: int = 1000
    burst: float = Settings.burst
    ttl_ticks: int = Settings.ttl_ticks
    pulsar_ttl_ticks: int = 10
    jitter: float = 0.0
    loss: float = 0.0
    delay: float = 0.0
    duplicate: float = 0.0
    message_sizes: Sizes = field(default_factory=dict)  # at the start: sim.engine.MessageSizes reads them


def _fail(path: str, message: str) -> ScenarioError:
    return ScenarioError(f"{path}: {message}")


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(path, f"expected a mapping, got {type(value).__name__}")
    return value


def _unknown(doc: Mapping[str, Any], allowed: set[str], path: str) -> None:
    for key in sorted(map(str, doc)):
        if key not in allowed:
            raise _fail(f"{path}.{key}" if path else key, f"unknown key (expected one of {', '.join(sorted(allowed))})")


def _int(value: Any, path: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _fail(path, f"expected an integer in {lo}..{hi}, got {value!r}")
    return value


def _number(value: Any, path: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise _fail(path, f"expected a number in {lo:g}..{hi:g}, got {value!r}")
    return float(value)


def _name(value: Any, path: str) -> str:
    try:
        return check_name(path, value)
    except InvalidGroup as exc:
        raise ScenarioError(str(exc)) from None


def _names(value: Any, path: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise _fail(path, "expected a list of daemon ids")
    out = tuple(_name(v, f"{path}[{i}]") for i, v in enumerate(value))
    if len(set(out)) != len(out):
        raise _fail(path, "a daemon id is listed twice")
    return out


def _demand(doc: Any, path: str) -> Demand:
    out: Demand = {}
    for group, per_daemon in _mapping(doc, path).items():
        gpath = f"{path}.{group}"
        _name(group, gpath)
        out[group] = {}
        for daemon, value in _mapping(per_daemon, gpath).items():
            dpath = f"{gpath}.{daemon}"
            _name(daemon, dpath)
            if isinstance(value, Mapping):
                _unknown(value, set(KINDS), dpath)
                kinds = {k: _number(v, f"{dpath}.{k}", 0, 1e12) for k, v in value.items()}
            else:
                kinds = {"publish": _number(value, dpath, 0, 1e12)}
            out[group][daemon] = kinds
    return out


def _sizes(doc: Any, path: str) -> Sizes:
    out: Sizes = {}
    for group, value in _mapping(doc, path).items():
        gpath = f"{path}.{group}"
        _name(group, gpath)
        if isinstance(value, Mapping):
            out[group] = {_name(d, f"{gpath}.{d}"): _int(v, f"{gpath}.{d}", 1, MAX_MESSAGE_BYTES)
                          for d, v in value.items()}
        else:
            out[group] = _int(value, gpath, 1, MAX_MESSAGE_BYTES)
    return out


def _groups(doc: Any, path: str, allow_delete: bool) -> dict[str, Mapping[str, Any] | None]:
    out: dict[str, Mapping[str, Any] | None] = {}
    for name, body in _mapping(doc, path).items():
        gpath = f"{path}.{name}"
        if body is None and allow_delete:
            out[name] = None
            continue
        try:
            ResourceGroup.from_admin(str(name), _mapping(body, gpath), where=gpath)
        except InvalidGroup as exc:
            raise ScenarioError(str(exc)) from None
        out[name] = dict(body or {})
    return out


def parse(doc: Any, default_name: str = "scenario") -> Scenario:
    """Validate a scenario document (already parsed from YAML)."""
    top = _mapping(doc, "scenario")
    _unknown(top, TOP_KEYS, "")
    for required in ("ticks", "daemons", "groups"):
        if required not in top:
            raise _fail(required, "missing (required)")
    ticks = _int(top["ticks"], "ticks", 1, 100_000)
    daemons = _names(top["daemons"], "daemons")
    groups = {n: ResourceGroup.from_admin(n, b or {}) for n, b in _groups(top["groups"], "groups", False).items()}
    transport = _mapping(top.get("transport"), "transport")
    _unknown(transport, TRANSPORT_KEYS, "transport")
    phases = top.get("phases", "spread")
    if phases not in PHASES:
        raise _fail("phases", f"{phases!r} is not one of {', '.join(PHASES)}")
    events: list[Event] = []
    raw_events = top.get("events") or []
    if not isinstance(raw_events, list):
        raise _fail("events", "expected a list")
    for i, ev in enumerate(raw_events):
        epath = f"events[{i}]"
        ev = _mapping(ev, epath)
        _unknown(ev, EVENT_KEYS, epath)
        if "at" not in ev:
            raise _fail(f"{epath}.at", "missing (required)")
        at = _int(ev["at"], f"{epath}.at", 0, ticks - 1)
        events.append(Event(
            at=at,
            demand=_demand(ev.get("demand"), f"{epath}.demand"),
            join=_names(ev.get("join", []), f"{epath}.join"),
            leave=_names(ev.get("leave", []), f"{epath}.leave"),
            crash=_names(ev.get("crash", []), f"{epath}.crash"),
            groups=_groups(ev.get("groups"), f"{epath}.groups", True),
            message_sizes=_sizes(ev.get("message_sizes"), f"{epath}.message_sizes"),
            partition=_names(ev.get("partition", []), f"{epath}.partition"),
            heal=_names(ev.get("heal", []), f"{epath}.heal"),
        ))
        both = set(events[-1].partition) & set(events[-1].heal)
        if both:
            raise _fail(epath, f"daemon {sorted(both)[0]!r} is both partitioned and healed")
    events.sort(key=lambda e: e.at)
    return Scenario(
        name=str(top.get("name", default_name)),
        description=str(top.get("description", "")),
        ticks=ticks,
        daemons=daemons,
        groups=groups,
        demand=_demand(top.get("demand"), "demand"),
        events=tuple(events),
        seed=_int(top.get("seed", 1), "seed", 0, 2**63 - 1),
        substeps=_int(top.get("substeps", 10), "substeps", 2, 100),
        phases=phases,
        message_bytes=_int(top.get("message_bytes", 1000), "message_bytes", 1, MAX_MESSAGE_BYTES),
        message_sizes=_sizes(top.get("message_sizes"), "message_sizes"),
        burst=_number(top.get("burst", Settings.burst), "burst", 0.001, 3600),
        ttl_ticks=_int(top.get("ttl_ticks", Settings.ttl_ticks), "ttl_ticks", 1, 10_000),
        pulsar_ttl_ticks=_int(top.get("pulsar_ttl_ticks", 10), "pulsar_ttl_ticks", 1, 10_000),
        jitter=_number(top.get("jitter", 0.0), "jitter", 0, 0.9),
        loss=_number(transport.get("loss", 0.0), "transport.loss", 0, 1),
        delay=_number(transport.get("delay", 0.0), "transport.delay", 0, 1000),
        duplicate=_number(transport.get("duplicate", 0.0), "transport.duplicate", 0, 1),
    )


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def load(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a YAML file by path."""
    path = Path(name_or_path)
    if not path.exists():
        builtin = BUILTIN_DIR / f"{name_or_path}.yaml"
        if not builtin.exists():
            raise ScenarioError(
                f"{name_or_path}: no such file or built-in scenario (built-ins: {', '.join(builtin_names())})"
            )
        path = builtin
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    try:
        return parse(doc, path.stem)
    except ScenarioError as exc:
        raise ScenarioError(f"{path.name}: {exc}") from None
