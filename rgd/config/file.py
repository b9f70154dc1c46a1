"""The config file: daemon settings plus resource groups, YAML or TOML.

```yaml
daemon:                # optional; every key is also a flag and an RGD_* variable
  id: node-1
  tick: 1.0
resourcegroups:
  gold: {publishRateInMsgs: 1000, publishRateInBytes: -1}
topics:                # "persistent://tenant/ns/topic" -> group (wins over the namespace's)
  persistent://acme/orders/audit: gold
namespaces:            # "tenant/ns" -> group (wins over the tenant's)
  acme/orders: gold
tenants:               # tenant -> group
  acme: gold
```

Errors name the key path (`resourcegroups.gold.publishRateInMsgs: ...`). The
daemon re-reads the file when it changes and keeps the last good version when
a new one does not validate.
"""

from __future__ import annotations

import hashlib
import logging
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rgd.config.groups import GroupRegistry, InvalidGroup, registry_from_mapping

TOP_LEVEL_KEYS = ("daemon", "resourcegroups", "topics", "namespaces", "tenants")

log = logging.getLogger("rgd.config")

# libyaml's loader parses a 10,000-group file about four times faster than the
# pure-Python one; PyYAML wheels ship it, a source build without libyaml does not.
YAML_LOADER: type = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
_warned_pure = False


def _load_yaml(text: bytes) -> object:
    global _warned_pure
    if YAML_LOADER is yaml.SafeLoader and not _warned_pure:
        _warned_pure = True
        log.warning("PyYAML has no libyaml here: config files parse with the pure-Python loader, "
                    "about 4x slower (still off the event loop); install PyYAML with libyaml for speed")
    return yaml.load(text, Loader=YAML_LOADER)


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class ConfigDocument:
    path: str
    digest: str  # sha256 of the bytes, to notice real changes
    daemon: Mapping[str, Any]
    registry: GroupRegistry


def parse_config(text: bytes, path: str) -> ConfigDocument:
    """Parse and validate; raise ConfigError naming what is wrong."""
    doc: object  # YAML may hold any value at the top level: checked below
    try:
        if path.endswith(".toml"):
            doc = tomllib.loads(text.decode("utf-8"))
        else:
            doc = _load_yaml(text) if text.strip() else {}
    except (yaml.YAMLError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {'TOML' if path.endswith('.toml') else 'YAML'}: {exc}") from exc
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping with keys {', '.join(TOP_LEVEL_KEYS)}")
    unknown = sorted(set(map(str, doc)) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown key (expected {', '.join(TOP_LEVEL_KEYS)})")
    daemon = doc.get("daemon") or {}
    if not isinstance(daemon, Mapping):
        raise ConfigError(f"{path}: daemon: expected a mapping of setting -> value")
    try:
        registry = registry_from_mapping(doc)
    except InvalidGroup as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    return ConfigDocument(path, hashlib.sha256(text).hexdigest(), dict(daemon), registry)


def load_config(path: str | Path) -> ConfigDocument:
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    return parse_config(text, str(p))



__all__ = ["YAML_LOADER", "ConfigDocument", "ConfigError", "load_config", "parse_config"]
