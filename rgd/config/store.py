"""The effective group config: the file as declarative base, admin changes on top.

Admin changes are `ConfigChange` records keyed by what they change
(`group/<name>`, `topic/<persistent://t/ns/x>`, `namespace/<t/ns>`, `tenant/<t>`), each with a version
(wall-clock ms, then origin daemon id as a tie-break). The highest version per
key wins (last-writer-wins register), so applying a change twice, or in any
order, gives the same state: a broker that redelivers, or a daemon replaying
the config topic from the start, cannot corrupt the config. A change with
`value=None` is a tombstone: it removes the key even if the file defines it.

A group value may carry fields this daemon does not know (written by a newer
rgd during a rolling upgrade): they are ignored, as the admin API ignores them,
rather than refusing the whole change and leaving this daemon's config behind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rgd.config.groups import GroupRegistry, InvalidGroup, ResourceGroup, check_name, check_namespace, check_topic

# Key prefix -> the GroupRegistry table an attachment change edits.
ATTACHMENT_TABLES = {"topic": "topics", "namespace": "namespaces", "tenant": "tenants"}


@dataclass(frozen=True, slots=True)
class ConfigChange:
    key: str  # "group/<name>" | "topic/<persistent://t/ns/x>" | "namespace/<tenant/ns>" | "tenant/<tenant>"
    value: Any  # group: admin v2 rates mapping; attachment: group name; None = delete
    version_ms: int
    origin: str

    @property
    def version(self) -> tuple[int, str]:
        return (self.version_ms, self.origin)

    def encode(self) -> bytes:
        return json.dumps(
            {"key": self.key, "value": self.value, "version_ms": self.version_ms, "origin": self.origin},
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> ConfigChange:
        """Parse and validate a change from the config topic (raises ValueError naming the field)."""
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"config change: not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise ValueError("config change: expected an object")
        key, value = doc.get("key"), doc.get("value")
        version, origin = doc.get("version_ms"), doc.get("origin")
        if not isinstance(key, str) or not isinstance(origin, str):
            raise ValueError("config change: key and origin must be strings")
        if isinstance(version, bool) or not isinstance(version, int):
            raise ValueError("config change: version_ms must be an integer")
        change = cls(key, value, version, origin)
        change.validate()
        return change

    def validate(self) -> None:
        kind, _, name = self.key.partition("/")
        if kind == "group":
            check_name("resource group", name)
            if self.value is not None:
                ResourceGroup.from_admin(name, self.value, strict=False)
        elif kind == "topic":
            check_topic(name)
        elif kind == "namespace":
            check_namespace(name)
        elif kind == "tenant":
            check_name("tenant", name)
        else:
            raise InvalidGroup(f"config change: key {self.key!r} must start with group/, topic/, namespace/ or tenant/")
        if kind != "group" and self.value is not None:
            check_name("resource group", self.value)


@dataclass
class ConfigStore:
    base: GroupRegistry = field(default_factory=GroupRegistry)
    overlay: dict[str, ConfigChange] = field(default_factory=dict)
    effective: GroupRegistry = field(default_factory=GroupRegistry)
    generation: int = 0  # bumps on every effective change; the limiter/daemon compare it
    # This daemon's Pulsar cluster name: which `replicatorDispatchRate` entries apply here
    # (GroupRegistry.with_budgets). Pulsar's standalone cluster is named "standalone".
    local_cluster: str = "standalone"

    def __post_init__(self) -> None:
        self._rebuild()

    def set_base(self, registry: GroupRegistry) -> None:
        self.base = registry
        self._rebuild()

    def apply(self, change: ConfigChange) -> bool:
        """Fold one change; True if it was newer than what we had for its key."""
        current = self.overlay.get(change.key)
        if current is not None and current.version >= change.version:
            return False
        self.overlay[change.key] = change
        self._rebuild()
        return True

    def _rebuild(self) -> None:
        reg = self.base.copy()
        for change in self.overlay.values():
            kind, _, name = change.key.partition("/")
            if kind == "group":
                if change.value is None:
                    reg.groups.pop(name, None)
                else:
                    reg.groups[name] = ResourceGroup.from_admin(name, change.value, strict=False)
            else:
                table = getattr(reg, ATTACHMENT_TABLES[kind])
                if change.value is None:
                    table.pop(name, None)
                else:
                    table[name] = change.value
        # Attachments to a group that no longer exists resolve to "unlimited" rather than
        # failing: config changes arrive one key at a time and may be briefly inconsistent.
        reg.with_budgets(self.local_cluster)
        self.effective = reg
        self.generation += 1


__all__ = ["ATTACHMENT_TABLES", "ConfigChange", "ConfigStore"]
