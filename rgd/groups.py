"""Resource groups and their attachment to tenants and namespaces (PIP-82, Pulsar admin v2).

A group holds four rates (-1 = unlimited). A namespace resolves to its own
attachment first, then its tenant's; a namespace with neither is unlimited.
This module is pure data + validation: the config file, the admin API and the
cluster config topic all build groups through `ResourceGroup.from_admin`, so
one set of rules names every bad field the same way.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

KINDS = ("publish", "dispatch")

# Admin v2 field names, in the order Pulsar lists them.
RATE_FIELDS = (
    "publishRateInMsgs",
    "publishRateInBytes",
    "dispatchRateInMsgs",
    "dispatchRateInBytes",
)
UNLIMITED = -1.0
# A rate above this is a typo, not a limit (about 1e15 msg/s or bytes/s).
MAX_RATE = 1e15

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,127}$")


class InvalidGroup(ValueError):
    """A group, attachment or name that does not validate; the message names the field."""


def check_name(what: str, value: Any) -> str:
    """Group and tenant names: Pulsar's charset, bounded length."""
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise InvalidGroup(
            f"{what}: {value!r} is not a valid name "
            "(letters, digits, '.', '_', '-'; up to 128 characters)"
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


def check_rate(field_name: str, value: Any) -> float:
    """-1 means unlimited; otherwise a finite number >= 0 (0 blocks the kind)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidGroup(f"{field_name}: expected a number (-1 = unlimited), got {value!r}")
    rate = float(value)
    if rate == UNLIMITED:
        return UNLIMITED
    if not math.isfinite(rate) or rate < 0 or rate > MAX_RATE:
        raise InvalidGroup(
            f"{field_name}: {value!r} is out of range (-1 for unlimited, or 0..{MAX_RATE:.0e})"
        )
    return rate


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """One group's configured cluster-wide quota, per second."""

    name: str
    publish_msgs: float = UNLIMITED
    publish_bytes: float = UNLIMITED
    dispatch_msgs: float = UNLIMITED
    dispatch_bytes: float = UNLIMITED

    def rates(self, kind: str) -> tuple[float, float]:
        """(messages/s, bytes/s) for 'publish' or 'dispatch'; -1 = unlimited."""
        if kind == "publish":
            return self.publish_msgs, self.publish_bytes
        return self.dispatch_msgs, self.dispatch_bytes

    def to_admin(self) -> dict[str, Any]:
        """Pulsar admin v2 JSON shape."""
        return {
            "publishRateInMsgs": _admin_number(self.publish_msgs),
            "publishRateInBytes": _admin_number(self.publish_bytes),
            "dispatchRateInMsgs": _admin_number(self.dispatch_msgs),
            "dispatchRateInBytes": _admin_number(self.dispatch_bytes),
        }

    @classmethod
    def from_admin(
        cls, name: str, body: Any, base: "ResourceGroup | None" = None, where: str = ""
    ) -> "ResourceGroup":
        """Build from an admin v2 mapping. Missing fields keep `base`'s value (PUT of a
        partial body updates, like pulsar-admin's `resourcegroups update`); unknown
        fields are an error so a misspelt limit is never silently unlimited."""
        prefix = f"{where}." if where else ""
        check_name(f"{prefix}name", name)
        if not isinstance(body, Mapping):
            raise InvalidGroup(f"{where or 'body'}: expected an object with {', '.join(RATE_FIELDS)}")
        unknown = sorted(set(body) - set(RATE_FIELDS))
        if unknown:
            raise InvalidGroup(
                f"{prefix}{unknown[0]}: unknown field (expected one of {', '.join(RATE_FIELDS)})"
            )
        current = base.to_admin() if base else {}
        values = [
            check_rate(f"{prefix}{f}", body[f]) if f in body else float(current.get(f, UNLIMITED))
            for f in RATE_FIELDS
        ]
        return cls(name, *values)


def _admin_number(rate: float) -> float | int:
    return int(rate) if rate == int(rate) else rate


@dataclass(slots=True)
class GroupRegistry:
    """Groups plus tenant/namespace attachments, with a resolve cache for the hot path."""

    groups: dict[str, ResourceGroup] = field(default_factory=dict)
    namespaces: dict[str, str] = field(default_factory=dict)  # "tenant/ns" -> group
    tenants: dict[str, str] = field(default_factory=dict)  # tenant -> group
    _cache: dict[str, ResourceGroup | None] = field(default_factory=dict, repr=False)

    def resolve(self, namespace: str) -> ResourceGroup | None:
        """The group that limits `namespace` (namespace attachment wins over tenant)."""
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

    def namespaces_of(self, group: str) -> list[str]:
        """Attachments of a group, for the admin API and reports."""
        return sorted(
            [ns for ns, g in self.namespaces.items() if g == group]
            + [t for t, g in self.tenants.items() if g == group]
        )

    def copy(self) -> "GroupRegistry":
        return GroupRegistry(dict(self.groups), dict(self.namespaces), dict(self.tenants))

    def validate_attachments(self) -> None:
        """Every attachment must name a defined group."""
        for what, table in (("namespaces", self.namespaces), ("tenants", self.tenants)):
            for key, group in table.items():
                if group not in self.groups:
                    raise InvalidGroup(f"{what}.{key}: resource group {group!r} is not defined")


def registry_from_mapping(doc: Mapping[str, Any], where: str = "") -> GroupRegistry:
    """Parse the `resourcegroups` / `namespaces` / `tenants` sections of a config document."""
    reg = GroupRegistry()
    groups = doc.get("resourcegroups") or {}
    if not isinstance(groups, Mapping):
        raise InvalidGroup(f"{where}resourcegroups: expected a mapping of name -> rates")
    for name, body in groups.items():
        reg.groups[str(name)] = ResourceGroup.from_admin(
            str(name), body or {}, where=f"{where}resourcegroups.{name}"
        )
    for section, check in (("namespaces", check_namespace), ("tenants", None)):
        table = doc.get(section) or {}
        if not isinstance(table, Mapping):
            raise InvalidGroup(f"{where}{section}: expected a mapping of name -> resource group")
        target = reg.namespaces if section == "namespaces" else reg.tenants
        for key, group in table.items():
            if check is not None:
                check(key, f"{where}{section}.{key}")
            else:
                check_name(f"{where}{section}.{key}", key)
            check_name(f"{where}{section}.{key}", group)
            target[str(key)] = group
    reg.validate_attachments()
    return reg

