"""Resource groups and their attachment to topics, namespaces and tenants (PIP-82, Pulsar admin v2).

A group holds two rates (messages/s, bytes/s; -1 = unlimited) per kind of
traffic, in the fields of Pulsar's `ResourceGroup` policy: publish, dispatch and
replication dispatch. A request resolves to its topic's attachment first, then
its namespace's, then its tenant's (Pulsar: topic over namespace); with none it
is unlimited. This module is pure data + validation: the config file, the admin
API and the cluster config topic all build groups through
`ResourceGroup.from_admin`, so one set of rules names every bad field the same way.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rgd.config.json_kinds import shown

KINDS = ("publish", "dispatch", "replication")

# Admin v2 field names per kind (messages/s, bytes/s), as Pulsar's ResourceGroup names them.
KIND_FIELDS: dict[str, tuple[str, str]] = {
    "publish": ("publishRateInMsgs", "publishRateInBytes"),
    "dispatch": ("dispatchRateInMsgs", "dispatchRateInBytes"),
    "replication": ("replicationDispatchRateInMsgs", "replicationDispatchRateInBytes"),
}
RATE_FIELDS = tuple(f for kind in KINDS for f in KIND_FIELDS[kind])
# Beside the rates: Pulsar's per-remote-cluster replication map (see ReplicatorRate) and rgd's
# shadow mode (decide and count, never deny: docs/operating/shadow-mode.md).
REPLICATOR_FIELD = "replicatorDispatchRate"
SHADOW_FIELD = "shadowMode"
# Every field a ResourceGroup's admin body may carry: the one list unknown fields are found
# and near misses suggested from (a field Pulsar's ResourceGroup gains is added here).
ADMIN_BODY_FIELDS: tuple[str, ...] = (*RATE_FIELDS, REPLICATOR_FIELD, SHADOW_FIELD)
# Pulsar's DispatchRate fields, as the map's values carry them (messages/s, bytes/s; the
# other two are accepted and ignored, as Pulsar's resource groups ignore them).
DISPATCH_RATE_MSGS = "dispatchThrottlingRateInMsg"
DISPATCH_RATE_BYTES = "dispatchThrottlingRateInByte"
DISPATCH_RATE_FIELDS = (DISPATCH_RATE_MSGS, DISPATCH_RATE_BYTES, "ratePeriodInSecond", "relativeToPublishRate")
MAX_REPLICATOR_ENTRIES = 1000
MAX_RATE_PERIOD = 2**31 - 1  # Pulsar's DispatchRate.ratePeriodInSecond is a Java int
UNLIMITED = -1.0
# A rate above this is a typo, not a limit (about 1e15 msg/s or bytes/s).
MAX_RATE = 1e15

# Pulsar's NamedEntity rule for tenant, namespace, cluster and topic names, applied as
# Java applies it: Pattern.matches on the whole string, and Java's \w is ASCII-only.
# (Empty is refused besides: an empty name cannot be a path segment.)
_NAME_RE = re.compile(r"[-=:.\w]+", re.ASCII)
TOPIC_DOMAINS = ("persistent", "non-persistent")


class InvalidGroup(ValueError):
    """A group, attachment or name that does not validate; the message names the field."""


def is_name(value: str) -> bool:
    """Pulsar's name rule (see check_name), as a test."""
    return _NAME_RE.fullmatch(value) is not None


def check_name(what: str, value: Any) -> str:
    """Group, tenant and namespace names: Pulsar's `^[-=:.\\w]*$` (ASCII letters, digits, _ - = : .)."""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise InvalidGroup(
            f"{what}: {value!r} is not a valid name "
            "(ASCII letters, digits and _ - = : . as Pulsar allows)"
        )
    return value


def check_namespace(value: Any, what: str = "namespace") -> str:
    """A namespace is 'tenant/ns'."""
    if not isinstance(value, str) or value.count("/") != 1:
        raise InvalidGroup(f"{what}: {value!r} must be 'tenant/namespace'")
    tenant, ns = value.split("/")
    check_name(f"{what} tenant", tenant)
    check_name(f"{what} name", ns)
    return value


def check_topic(value: Any, what: str = "topic") -> str:
    """A full topic name 'persistent://tenant/namespace/topic' (or non-persistent://)."""
    topic = value if isinstance(value, str) else ""
    domain, sep, rest = topic.partition("://")
    parts = rest.split("/")
    if not sep or domain not in TOPIC_DOMAINS or len(parts) != 3 or not parts[2]:
        raise InvalidGroup(f"{what}: {value!r} must be 'persistent://tenant/namespace/topic'")
    check_namespace(f"{parts[0]}/{parts[1]}", what)
    check_name(f"{what} local name", parts[2])
    return topic


_PARTITION = re.compile(r"-partition-\d+$")


def base_topic(topic: str) -> str:
    """A partition's policies are its partitioned topic's, as in Pulsar."""
    return _PARTITION.sub("", topic)


def check_rate(field_name: str, value: Any) -> float:
    """-1 means unlimited; otherwise a finite number >= 0 (0 blocks the kind)."""
    expected = f"-1 (unlimited) or a number in 0..{MAX_RATE:.0f}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidGroup(f"{field_name}: expected {expected}, got {shown(value)}")
    rate = float(value)
    if rate == UNLIMITED:
        return UNLIMITED
    if not math.isfinite(rate) or rate < 0 or rate > MAX_RATE:
        raise InvalidGroup(f"{field_name}: out of range, expected {expected}")
    return rate


def replicator_key(local_cluster: str, remote_cluster: str) -> str:
    """The key of Pulsar's `replicatorDispatchRate` map for replication from `local_cluster`
    to `remote_cluster`: DispatchRateLimiter.getReplicatorDispatchRateKey's format. The map
    lives in a config shared by every cluster (Pulsar's global configuration store), which
    is why the key names the local cluster too: an entry for another local cluster is kept
    and does not apply here."""
    return f"{local_cluster}->{remote_cluster}"


class ReplicatorRate(NamedTuple):
    """One entry of `replicatorDispatchRate`: the per-second rates for one local->remote key."""

    key: str
    messages: float
    nbytes: float


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """One group's configured cluster-wide quota, per second."""

    name: str
    publish_msgs: float = UNLIMITED
    publish_bytes: float = UNLIMITED
    dispatch_msgs: float = UNLIMITED
    dispatch_bytes: float = UNLIMITED
    replication_msgs: float = UNLIMITED
    replication_bytes: float = UNLIMITED
    # Per remote cluster replication rates (sorted by key); a remote cluster without an entry
    # replicates under the replication rates above, shared, as in Pulsar.
    replicator_rates: tuple[ReplicatorRate, ...] = ()
    shadow_mode: bool = False  # decide and count, but never deny

    def rates(self, kind: str) -> tuple[float, float]:
        """(messages/s, bytes/s) of one of KINDS; -1 = unlimited."""
        if kind == "publish":
            return self.publish_msgs, self.publish_bytes
        if kind == "dispatch":
            return self.dispatch_msgs, self.dispatch_bytes
        return self.replication_msgs, self.replication_bytes

    def to_admin(self) -> dict[str, Any]:
        """Pulsar admin v2 JSON shape (every rate field; -1 = unlimited), `replicatorDispatchRate`
        as Pulsar's map of DispatchRate objects when it has entries (a Java client reads an absent
        map as the empty one it starts with), and `shadowMode` only when on (rgd's own)."""
        doc: dict[str, Any] = {
            field_name: _admin_number(rate)
            for kind in KINDS
            for field_name, rate in zip(KIND_FIELDS[kind], self.rates(kind))
        }
        if self.replicator_rates:
            doc[REPLICATOR_FIELD] = {
                r.key: {DISPATCH_RATE_MSGS: _admin_number(r.messages), DISPATCH_RATE_BYTES: _admin_number(r.nbytes),
                        "ratePeriodInSecond": 1, "relativeToPublishRate": False}
                for r in self.replicator_rates
            }
        if self.shadow_mode:
            doc[SHADOW_FIELD] = True
        return doc

    @classmethod
    def from_admin(
        cls, name: str, body: Any, base: ResourceGroup | None = None, where: str = "",
        strict: bool = True,
    ) -> ResourceGroup:
        """Build from an admin v2 mapping. Missing (or null) fields keep `base`'s value,
        as Pulsar's update does (read-modify-write). Unknown fields: with `strict` (the
        config file) an error, so a misspelt limit is never silently unlimited; without
        (the admin API, the config topic) ignored, as Pulsar ignores them; the caller
        names them with `unknown_fields`."""
        prefix = f"{where}." if where else ""
        check_name(f"{prefix}name", name)
        if not isinstance(body, Mapping):
            raise InvalidGroup(f"{where or 'body'}: expected an object with {', '.join(RATE_FIELDS)}")
        unknown = unknown_fields(body)
        if unknown and strict:
            near = nearest_field(unknown[0])
            hint = f"did you mean {near!r}? " if near else ""
            raise InvalidGroup(
                f"{prefix}{unknown[0]}: unknown field ({hint}expected one of {', '.join(ADMIN_BODY_FIELDS)})"
            )
        current = base.to_admin() if base else {}
        values = [
            check_rate(f"{prefix}{f}", body[f]) if body.get(f) is not None
            else float(current.get(f, UNLIMITED))
            for f in RATE_FIELDS
        ]
        replicators = (check_replicator_rates(f"{prefix}{REPLICATOR_FIELD}", body[REPLICATOR_FIELD])
                       if body.get(REPLICATOR_FIELD) is not None else (base.replicator_rates if base else ()))
        shadow = body.get(SHADOW_FIELD)
        if shadow is not None and not isinstance(shadow, bool):
            raise InvalidGroup(f"{prefix}{SHADOW_FIELD}: expected true or false, got {shown(shadow)}")
        shadow_mode = shadow if shadow is not None else (base.shadow_mode if base else False)
        pm, pb, dm, db, rm, rb = values
        return cls(name, pm, pb, dm, db, rm, rb, replicator_rates=replicators, shadow_mode=shadow_mode)


def check_replicator_rates(where: str, value: Any) -> tuple[ReplicatorRate, ...]:
    """Pulsar's `replicatorDispatchRate`: {"LOCAL->REMOTE": DispatchRate}. Keys are kept as
    given (an entry for another local cluster is legitimate and unused here); values carry
    Pulsar's DispatchRate fields, a missing rate being -1 (unlimited) as in Pulsar."""
    if not isinstance(value, Mapping):
        raise InvalidGroup(f"{where}: expected an object of 'local->remote' cluster keys -> DispatchRate")
    if len(value) > MAX_REPLICATOR_ENTRIES:
        raise InvalidGroup(f"{where}: {len(value)} entries, at most {MAX_REPLICATOR_ENTRIES}")
    out = []
    for key, rate in value.items():
        if not isinstance(key, str) or not key or len(key) > 512:
            raise InvalidGroup(f"{where}: {shown(key)} is not a key (expected 'local->remote' cluster names)")
        at = f"{where}.{key}"
        if not isinstance(rate, Mapping):
            raise InvalidGroup(f"{at}: expected a DispatchRate object with {', '.join(DISPATCH_RATE_FIELDS)}")
        unknown = sorted(str(k) for k in rate if k not in DISPATCH_RATE_FIELDS)
        if unknown:
            raise InvalidGroup(f"{at}.{unknown[0]}: unknown field (expected one of {', '.join(DISPATCH_RATE_FIELDS)})")
        msgs, nbytes = (check_rate(f"{at}.{f}", rate[f]) if rate.get(f) is not None else UNLIMITED
                        for f in (DISPATCH_RATE_MSGS, DISPATCH_RATE_BYTES))
        period = rate.get("ratePeriodInSecond")
        if period is not None and (isinstance(period, bool) or not isinstance(period, int)
                                   or not 1 <= period <= MAX_RATE_PERIOD):
            raise InvalidGroup(f"{at}.ratePeriodInSecond: expected a whole number of seconds in 1..{MAX_RATE_PERIOD}, "
                               f"got {shown(period)}")
        relative = rate.get("relativeToPublishRate")
        if relative is not None and not isinstance(relative, bool):
            raise InvalidGroup(f"{at}.relativeToPublishRate: expected true or false, got {shown(relative)}")
        out.append(ReplicatorRate(key, msgs, nbytes))
    return tuple(sorted(out))


def unknown_fields(body: Mapping[Any, Any]) -> list[str]:
    """Keys of an admin body that are not among ADMIN_BODY_FIELDS, sorted (for warnings)."""
    return sorted(str(k) for k in body if k not in ADMIN_BODY_FIELDS)


def nearest_field(name: str) -> str | None:
    """The known admin field `name` is most likely a misspelling of (`publishRateInMsg` ->
    `publishRateInMsgs`), or None when none is close."""
    by_folded = {f.lower(): f for f in ADMIN_BODY_FIELDS}
    close = difflib.get_close_matches(name.lower(), by_folded, n=1, cutoff=0.8)
    return by_folded[close[0]] if close else None


# A (group, remote cluster) replication budget the cluster shares like a group of its own:
# named GROUP@REMOTE. '@' is outside Pulsar's name rule (check_name), which every group,
# tenant, namespace and cluster name passes, so a budget's name is never a group's and splits
# back unambiguously. Only metrics' and stats' internals see it: they show group and
# remote_cluster apart (split_budget).
BUDGET_SEP = "@"


def budget_name(group: str, remote_cluster: str) -> str:
    return f"{group}{BUDGET_SEP}{remote_cluster}"


def split_budget(name: str) -> tuple[str, str]:
    """(group, remote cluster) of a budget name; a group's own name gives (name, "")."""
    group, _, remote = name.partition(BUDGET_SEP)
    return group, remote


def replication_budgets(groups: Mapping[str, ResourceGroup], local_cluster: str) -> dict[str, ResourceGroup]:
    """The per-remote-cluster replication budgets of `groups` for this cluster: for each entry
    keyed `local_cluster->REMOTE`, a budget named budget_name(group, REMOTE) holding that
    entry's rates as its replication rates (publish and dispatch unlimited: only replication
    to REMOTE is asked against it), in the group's shadow mode. Entries for other local
    clusters, or naming a remote that is not a valid cluster name, give none."""
    prefix = replicator_key(local_cluster, "")
    out: dict[str, ResourceGroup] = {}
    for group in groups.values():
        for r in group.replicator_rates:
            if not r.key.startswith(prefix):
                continue
            remote = r.key[len(prefix):]
            if not is_name(remote):
                continue
            name = budget_name(group.name, remote)
            out[name] = ResourceGroup(name, replication_msgs=r.messages, replication_bytes=r.nbytes,
                                      shadow_mode=group.shadow_mode)
    return out


_QUOTA_ATTRS = ("publish_msgs", "publish_bytes", "dispatch_msgs", "dispatch_bytes",
                "replication_msgs", "replication_bytes")


def higher_quota(a: ResourceGroup, b: ResourceGroup) -> ResourceGroup:
    """Two configs of one group merged rate by rate, the higher one (unlimited is highest).
    For judging what a peer may have admitted around a config change: a peer's report
    covers a tick it may have spent under either config."""
    def higher(x: float, y: float) -> float:
        return UNLIMITED if x < 0 or y < 0 else max(x, y)
    pm, pb, dm, db, rm, rb = (higher(getattr(a, f), getattr(b, f)) for f in _QUOTA_ATTRS)
    return ResourceGroup(b.name, pm, pb, dm, db, rm, rb, replicator_rates=b.replicator_rates,
                         shadow_mode=b.shadow_mode)


class QuotaCeilings(Mapping[str, ResourceGroup]):
    """The configured groups as peers' reports are judged by around config changes: a
    group that changed lately counts with the higher of its current and earlier quotas
    (higher_quota). `earlier` holds, per recent change, only the groups it changed (their
    config before it). Lazy on purpose: only the groups a report names are looked up; a
    reload that changes every one of 10,000 groups used to merge all of them on the event
    loop (~150 ms), and every report received copied the whole registry."""

    __slots__ = ("current", "earlier")

    def __init__(self, current: Mapping[str, ResourceGroup], earlier: list[Mapping[str, ResourceGroup]]) -> None:
        self.current = current
        self.earlier = earlier

    def __getitem__(self, name: str) -> ResourceGroup:
        group = self.current[name]  # a group not configured now is not judged (KeyError)
        for changed in self.earlier:
            before = changed.get(name)
            if before is not None:
                group = higher_quota(before, group)
        return group

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.current)

    def __len__(self) -> int:
        return len(self.current)


def _admin_number(rate: float) -> float | int:
    return int(rate) if rate == int(rate) else rate


@dataclass(slots=True)
class GroupRegistry:
    """Groups plus topic/namespace/tenant attachments, with a resolve cache for the hot path."""

    groups: dict[str, ResourceGroup] = field(default_factory=dict)
    namespaces: dict[str, str] = field(default_factory=dict)  # "tenant/ns" -> group
    tenants: dict[str, str] = field(default_factory=dict)  # tenant -> group
    topics: dict[str, str] = field(default_factory=dict)  # "persistent://t/ns/topic" -> group
    _cache: dict[str, ResourceGroup | None] = field(default_factory=dict, repr=False)
    # The groups plus their per-remote-cluster replication budgets (replication_budgets), as
    # set by with_budgets; None: there are none, the budgets are the groups.
    budgets: dict[str, ResourceGroup] | None = field(default=None, repr=False)

    def budget_map(self) -> dict[str, ResourceGroup]:
        """Everything the cluster shares a quota of: the groups and the replication budgets."""
        return self.groups if self.budgets is None else self.budgets

    def with_budgets(self, local_cluster: str) -> None:
        """Derive the replication budgets of this cluster from the groups (after any change)."""
        derived = replication_budgets(self.groups, local_cluster)
        self.budgets = {**self.groups, **derived} if derived else None

    def replication_budget(self, group: ResourceGroup, remote_cluster: str) -> ResourceGroup:
        """What a replication ask to `remote_cluster` is limited by: the group's entry for that
        cluster, else (Pulsar's fallback) the group's own replication rates, shared by every
        remote cluster without an entry."""
        if self.budgets is None:
            return group
        return self.budgets.get(budget_name(group.name, remote_cluster), group)

    def resolve(self, namespace: str, topic: str | None = None) -> ResourceGroup | None:
        """The group that limits a request: its topic's attachment (a partition's is its
        partitioned topic's), else its namespace's, else its tenant's."""
        if topic is not None and self.topics:
            name = self.topics.get(topic) or self.topics.get(base_topic(topic))
            if name is not None and name in self.groups:
                return self.groups[name]
        try:
            return self._cache[namespace]
        except KeyError:
            pass
        name = self.namespaces.get(namespace)
        if name is None:
            name = self.tenants.get(namespace.partition("/")[0])
        group = self.groups.get(name) if name is not None else None
        if len(self._cache) > 100_000:  # bounded: namespaces come from clients
            self._cache.clear()
        self._cache[namespace] = group
        return group

    def applied_to_topic(self, topic: str) -> str | None:
        """The group in force for a topic (Pulsar's `applied=true`): topic, namespace, tenant."""
        name = self.topics.get(topic)
        if name is None:
            tenant_ns = topic.partition("://")[2].rsplit("/", 1)[0]
            name = self.namespaces.get(tenant_ns) or self.tenants.get(tenant_ns.partition("/")[0])
        return name

    def namespaces_of(self, group: str) -> list[str]:
        """Attachments of a group (topics, namespaces, tenants), for the admin API and reports."""
        return sorted(
            [ns for ns, g in self.namespaces.items() if g == group]
            + [t for t, g in self.tenants.items() if g == group]
            + [t for t, g in self.topics.items() if g == group]
        )

    def copy(self) -> GroupRegistry:
        return GroupRegistry(dict(self.groups), dict(self.namespaces), dict(self.tenants), dict(self.topics))

    def validate_attachments(self) -> None:
        """Every attachment must name a defined group."""
        for what, table in (("namespaces", self.namespaces), ("tenants", self.tenants), ("topics", self.topics)):
            for key, group in table.items():
                if group not in self.groups:
                    raise InvalidGroup(f"{what}.{key}: resource group {group!r} is not defined")


# Config-file sections of attachments, each also a GroupRegistry table.
ATTACHMENT_SECTIONS = ("topics", "namespaces", "tenants")


def registry_from_mapping(doc: Mapping[str, Any], where: str = "") -> GroupRegistry:
    """Parse the `resourcegroups` / `topics` / `namespaces` / `tenants` sections of a config document."""
    reg = GroupRegistry()
    groups = doc.get("resourcegroups") or {}
    if not isinstance(groups, Mapping):
        raise InvalidGroup(f"{where}resourcegroups: expected a mapping of name -> rates")
    for name, body in groups.items():
        reg.groups[str(name)] = ResourceGroup.from_admin(
            str(name), body or {}, where=f"{where}resourcegroups.{name}"
        )
    checks = {"topics": check_topic, "namespaces": check_namespace}
    for section in ATTACHMENT_SECTIONS:
        table = doc.get(section) or {}
        if not isinstance(table, Mapping):
            raise InvalidGroup(f"{where}{section}: expected a mapping of name -> resource group")
        target = getattr(reg, section)
        for key, group in table.items():
            if section == "tenants":
                check_name(f"{where}{section}.{key}", key)
            else:
                checks[section](key, f"{where}{section}.{key}")
            check_name(f"{where}{section}.{key}", group)
            target[str(key)] = group
    reg.validate_attachments()
    return reg


__all__ = [
    "ADMIN_BODY_FIELDS", "ATTACHMENT_SECTIONS", "BUDGET_SEP", "DISPATCH_RATE_BYTES", "DISPATCH_RATE_FIELDS",
    "DISPATCH_RATE_MSGS", "KINDS", "KIND_FIELDS", "MAX_RATE", "MAX_RATE_PERIOD", "MAX_REPLICATOR_ENTRIES",
    "RATE_FIELDS", "REPLICATOR_FIELD", "SHADOW_FIELD", "TOPIC_DOMAINS", "UNLIMITED",
    "GroupRegistry", "InvalidGroup", "QuotaCeilings", "ReplicatorRate", "ResourceGroup", "base_topic", "budget_name",
    "check_name", "check_namespace", "check_rate", "check_replicator_rates", "check_topic", "higher_quota",
    "is_name", "nearest_field", "registry_from_mapping", "replication_budgets", "replicator_key", "split_budget",
    "unknown_fields",
]
