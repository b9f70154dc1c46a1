"""Daemon settings: defaults < config file `daemon:` section < RGD_* environment < flags.

One table (`FIELDS`) drives all four sources, `--help` (in the groups of SETTING_GROUPS, shown
whole in docs/operating/configuration.md) and the Kubernetes manifests test, so a setting cannot
exist in one place only.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

# The bucket's default size, in seconds of its rate. Why 0.1 s: the buckets of a group's
# daemons then hold at most 0.1 s of the group's quota between them (their limits sum to
# the quota), so saved tokens add at most 10 % to any 1-second window cluster-wide,
# however they line up after a demand shift (the limiter's ten-message floor makes larger
# buckets at small quotas, and caps their 1-second windows instead: rgd.limiting.second_window).
# A 1 s bucket let one daemon below its limit spend a whole second of its share on top of
# the rate the moment its demand jumped, before any report could leave: 2x the quota in one
# tick at a x10 step. Brokers
# lose nothing by it: a denied ask is told when it will pass (Retry-After), and an ask
# larger than the bucket still passes on a full bucket, into debt.
DEFAULT_BURST_SECONDS = 0.1

# The quota strategies `--strategy` accepts; rgd.quota.calculator.STRATEGIES maps each to its
# allocator (and checks at import that it maps exactly these). Named here, so settings are
# validated without importing the calculator, a layer above.
STRATEGY_NAMES = ("rgd", "pulsar", "doorman-proportional", "doorman-fair", "static")

DEFAULT_TOPIC = "non-persistent://public/default/rgd-usage"
DEFAULT_CONFIG_TOPIC = "persistent://public/default/rgd-config"


class SettingsError(ValueError):
    """A setting with a bad value; the message names the setting and its source."""


UNIX_PREFIX = "unix:"


class ListenAddress(NamedTuple):
    """One address the daemon serves HTTP on: TCP (host, port) or a unix socket (path)."""

    host: str = ""
    port: int = 0
    path: str = ""  # set for a unix socket

    @property
    def is_unix(self) -> bool:
        return bool(self.path)


def parse_listen(value: str) -> list[ListenAddress]:
    """`HOST:PORT`, `unix:/path/rgd.sock`, or several of them separated by commas
    (TCP for the Service and probes, a unix socket for brokers on the same node).
    Raises ValueError naming the bad address."""
    out: list[ListenAddress] = []
    for part in value.split(","):
        item = part.strip()
        if item.startswith(UNIX_PREFIX):
            path = item[len(UNIX_PREFIX):]
            if not path.startswith("/") or path.endswith("/") or len(path.encode()) > 107:
                raise ValueError(f"{item!r}: a unix socket needs an absolute file path of at most 107 bytes")
            out.append(ListenAddress(path=path))
            continue
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"{item!r} is not HOST:PORT or unix:/path")
        out.append(ListenAddress(host, int(port)))
    if len(set(out)) != len(out):
        raise ValueError(f"{value!r} names an address twice")
    return out


# Names of pulsar.CompressionType members by the setting's values. A 5 000-group report is
# mostly group and namespace names: ZSTD carries 0.9 MB in about 60 KB (bench/scale_probe.py).
REPORT_COMPRESSIONS = {"none": "NONE", "lz4": "LZ4", "zlib": "ZLib", "zstd": "ZSTD"}


@dataclass(frozen=True)
class Settings:
    id: str = ""  # filled with the hostname when empty
    listen: str = "127.0.0.1:8080"
    pulsar_url: str = ""  # empty: start or join the embedded pulsar-lite broker
    topic: str = DEFAULT_TOPIC
    config_topic: str = DEFAULT_CONFIG_TOPIC
    tick: float = 1.0
    log_dir: str = "rgd-data/log"
    data_dir: str = "rgd-data"  # embedded broker storage
    config: str = ""  # path of the config file (groups + these settings)
    # token bucket capacity, in seconds of the local limit (DEFAULT_BURST_SECONDS: why 0.1)
    burst: float = DEFAULT_BURST_SECONDS
    max_debt: float = 10.0  # cap on after-the-fact debt, in seconds of the local limit
    ttl_ticks: int = 3  # evict a silent daemon after this many ticks
    report_tolerance: float = 0.10  # PIP-82 suppression: report when usage moved more than this
    # ... and at least every this many ticks (6: the cadence sim/profiles.py's rgd profile is judged with)
    report_every: int = 6
    strategy: str = "rgd"
    pulsar_auth_token: str = ""
    pulsar_auth_token_file: str = ""
    pulsar_tls_trust_certs: str = ""
    pulsar_tls_allow_insecure: bool = False
    pulsar_tls_validate_hostname: bool = False
    archive_uri: str = ""  # directory or fsspec URI for closed log segments
    log_retention: float = 3600.0  # seconds a closed, archived segment stays local
    log_segment_bytes: int = 64 * 1024 * 1024
    log_segment_age: float = 300.0
    log_receipt_payloads: bool = False
    admin_tokens_file: str = ""  # bearer tokens for admin writes, one per line
    report_hmac_keys_file: str = ""  # "key_id:secret" lines; first signs, all verify
    report_compression: str = "zstd"  # Pulsar producer compression of usage reports: none, lz4, zlib, zstd
    event_loop: str = "auto"  # auto (uvloop when installed), uvloop, asyncio
    pulsar_metrics: bool = False  # also export Pulsar's pulsar_resource_group_* metrics
    http_idle_timeout: float = 15.0  # close a connection idle this long; headers, and then the body, get as long
    http_max_connections: int = 4096  # lowered to the fd limit minus a reserve at start
    cluster_process: bool = False  # brokers' asks in this process, the cluster work in a second one
    cluster_thread: bool = False  # brokers' asks on the main thread's loop, the cluster work on a second thread's
    shadow: bool = False  # shadow mode for every group: decide and count, never deny
    cluster_name: str = "standalone"  # this Pulsar cluster's name: the local half of replicatorDispatchRate keys

    @property
    def listen_addresses(self) -> list[ListenAddress]:
        return parse_listen(self.listen)


HELP: dict[str, str] = {
    "id": "this daemon's id in reports, metrics and the usage log; unique in the cluster and the same across "
          "restarts (Kubernetes: the node name)",
    "listen": "HTTP listen address: HOST:PORT, unix:/path/rgd.sock, or both comma-separated "
              "(e.g. 0.0.0.0:8080,unix:/run/rgd/rgd.sock)",
    "pulsar_url": "Pulsar service URL; empty starts or joins an embedded pulsar-lite broker",
    "topic": "non-persistent topic for usage reports",
    "config_topic": "persistent topic carrying admin config changes to every daemon",
    "tick": "seconds between collect -> report -> read -> compute",
    "log_dir": "directory of the usage log segments",
    "data_dir": "directory of the embedded broker's storage",
    "config": "config file (YAML or TOML): daemon settings and resource groups",
    "burst": "token bucket capacity in seconds of the local limit (at least room for ten messages)",
    "max_debt": "cap on usage charged after the fact, in seconds of the local limit",
    "ttl_ticks": "evict a daemon silent for this many ticks",
    "report_tolerance": "skip a group in the report when usage moved less than this fraction",
    "report_every": "report every group at least every this many ticks, however little its usage moved "
                    "(0 or 1: every tick)",
    "strategy": "quota strategy: rgd (max-min fair), pulsar, doorman-proportional, doorman-fair, static",
    "pulsar_auth_token": "Pulsar auth token (prefer the _file variant)",
    "pulsar_auth_token_file": "file holding the Pulsar auth token",
    "pulsar_tls_trust_certs": "CA bundle for pulsar+ssl:// URLs",
    "pulsar_tls_allow_insecure": "accept any broker certificate (testing only)",
    "pulsar_tls_validate_hostname": "check the broker certificate's hostname",
    "archive_uri": "directory or fsspec URI closed log segments are copied to",
    "log_retention": "seconds an archived segment stays on local disk",
    "log_segment_bytes": "roll a log segment at this size",
    "log_segment_age": "roll a log segment at this age in seconds",
    "log_receipt_payloads": "keep full payloads of received reports in the log (debugging)",
    "admin_tokens_file": "file of bearer tokens allowed to change config (empty: admin writes open on loopback only)",
    "report_hmac_keys_file": "file of key_id:secret lines to sign and verify reports",
    "report_compression": "compression of published usage reports (Pulsar producer): none, lz4, zlib or zstd; "
                          "consumers decompress whatever they receive",
    "event_loop": "auto (uvloop when installed: about 20 % more batch decisions/s), uvloop or asyncio",
    "pulsar_metrics": ("export Pulsar's own resource-group metrics too (pulsar_resource_group_*, labels ResourceGroup, "
                       "MonitoringClass) for Pulsar dashboards"),
    "http_idle_timeout": ("close an HTTP connection idle for this many seconds; a request's headers, and then its "
                          "body, must arrive within as long (a late body: 408)"),
    "http_max_connections": "HTTP connections kept open at most (capped at the fd limit minus 128); "
                            "the oldest idle ones close to make room",
    "cluster_process": "answer brokers (/v1/acquire, /v1/usage, /v1/quota) in this process and do the cluster "
                       "work (Pulsar, usage map, calculator, reports, usage log; every other route) in a second "
                       "one, so no ask waits behind it: for thousands of groups among many daemons",
    "cluster_thread": "as cluster_process, but the cluster work runs in a second thread of this process (one "
                      "interpreter: less memory; asks wait for the GIL, switched every 1 ms, and for garbage "
                      "collections)",
    "shadow": "shadow mode for every group: every decision is made and counted, brokers are always told "
              "allowed (the real decision beside it, under \"shadow\"); per group: shadowMode: true",
    "cluster_name": "this Pulsar cluster's name (Pulsar's clusterName): replicatorDispatchRate entries keyed "
                    "'CLUSTER_NAME->REMOTE' apply here",
}


# What an empty or computed default means, where printing it would say nothing ('' ) or
# mislead: `--help` shows these words instead of the value.
DEFAULT_MEANS: dict[str, str] = {
    "id": "the hostname",
    "pulsar_url": "start or join the embedded broker",
    "config": "none",
    "pulsar_auth_token": "none",
    "pulsar_auth_token_file": "none",
    "pulsar_tls_trust_certs": "the system's CA bundle",
    "archive_uri": "none: segments stay local",
    "admin_tokens_file": "none: admin writes from loopback only",
    "report_hmac_keys_file": "none: reports unsigned",
}


class SettingGroup(NamedTuple):
    """A titled group of settings, one section of `rgd run --help` and of the docs' table."""

    title: str
    description: str
    names: tuple[str, ...]


# Every setting in exactly one group (tests/unit/test_cli_help_text.py checks it), in the
# order a newcomer needs them.
SETTING_GROUPS: tuple[SettingGroup, ...] = (
    SettingGroup("configuration", "where the daemon's settings and resource groups come from", ("config",)),
    SettingGroup("network", "where brokers reach the daemon over HTTP, and how long connections may idle",
                 ("listen", "http_idle_timeout", "http_max_connections")),
    SettingGroup("cluster", "who this daemon is and how the daemons agree on shares",
                 ("id", "cluster_name", "tick", "strategy", "ttl_ticks", "report_tolerance", "report_every")),
    SettingGroup("pulsar", "the broker and topics the usage reports travel on",
                 ("pulsar_url", "data_dir", "topic", "config_topic", "report_compression")),
    SettingGroup("limits", "the local token buckets brokers' asks are decided by, and whether a denial is enforced",
                 ("burst", "max_debt", "shadow")),
    SettingGroup("usage log", "the record of every report, its segments and archive",
                 ("log_dir", "log_segment_bytes", "log_segment_age", "log_retention", "archive_uri",
                  "log_receipt_payloads")),
    SettingGroup("security", "who may change groups, sign reports, and how to reach a secured Pulsar",
                 ("admin_tokens_file", "report_hmac_keys_file", "pulsar_auth_token", "pulsar_auth_token_file",
                  "pulsar_tls_trust_certs", "pulsar_tls_allow_insecure", "pulsar_tls_validate_hostname")),
    SettingGroup("metrics", "what /metrics exports besides rgd's own", ("pulsar_metrics",)),
    SettingGroup("layout", "how the daemon's work is split over event loops, threads and processes",
                 ("event_loop", "cluster_process", "cluster_thread")),
)


def shown_default(name: str) -> str:
    """A setting's default as `--help` and the docs show it: words for an empty or computed
    one, on/off for a switch, the value otherwise."""
    if name in DEFAULT_MEANS:
        return DEFAULT_MEANS[name]
    default = FIELDS[name].default
    if isinstance(default, bool):
        return "on" if default else "off"
    return str(default)


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true/false, got {text!r}")


def _converter(default: Any) -> Callable[[Any], Any]:
    if isinstance(default, bool):
        return lambda v: v if isinstance(v, bool) else _parse_bool(str(v))
    if isinstance(default, int):
        return lambda v: int(v) if not isinstance(v, bool) else _bad(v)
    if isinstance(default, float):
        return lambda v: float(v) if not isinstance(v, bool) else _bad(v)
    return lambda v: v if isinstance(v, str) else _bad(v)


def _bad(v: Any) -> Any:
    raise ValueError(f"wrong type {type(v).__name__}")


FIELDS = {f.name: f for f in fields(Settings)}

# Settings a release removed, with why: a config file, an RGD_* variable or a flag that still
# sets one is an error that says so (not the generic "unknown setting"), so an upgrade that
# kept an old key learns what replaced it instead of guessing at a typo.
REMOVED_SETTINGS: dict[str, str] = {
    "outage_grace": (
        "removed: the cluster protocol runs on acknowledgements and leases now (docs/design/protocol.md), "
        "so there is no grace and no safe share to fall back to; a daemon cut off the topic admits nothing "
        "from its lease's end (about --ttl-ticks ticks) until peers acknowledge it again. Delete the key "
        "(docs/operating/upgrades.md)"
    ),
}


def env_name(name: str) -> str:
    return "RGD_" + name.upper()


def merge(base: Settings, values: Mapping[str, Any], source: str) -> Settings:
    """Apply `values` (from one source) over `base`, converting and naming errors."""
    changes: dict[str, Any] = {}
    for key, raw in values.items():
        name = key.replace("-", "_")
        if name in REMOVED_SETTINGS:
            raise SettingsError(f"{source}: {key}: {REMOVED_SETTINGS[name]}")
        if name not in FIELDS:
            raise SettingsError(f"{source}: {key}: unknown setting (known: {', '.join(FIELDS)})")
        try:
            changes[name] = _converter(FIELDS[name].default)(raw)
        except (TypeError, ValueError) as exc:
            raise SettingsError(f"{source}: {key}: {exc}") from exc
    return validate(replace(base, **changes), source)


def from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The RGD_* variables set, removed settings' included (so `merge` names them)."""
    return {name: environ[env_name(name)] for name in (*FIELDS, *REMOVED_SETTINGS) if env_name(name) in environ}


def validate(s: Settings, source: str = "settings") -> Settings:
    def fail(key: str, why: str) -> None:
        raise SettingsError(f"{source}: {key}: {why}")

    try:
        parse_listen(s.listen)
    except ValueError as exc:
        fail("listen", str(exc))
    if not 0.05 <= s.tick <= 3600:
        fail("tick", f"{s.tick} is out of range (0.05..3600 seconds)")
    if s.burst <= 0 or s.burst > 3600:
        fail("burst", f"{s.burst} is out of range (>0..3600 seconds)")
    if s.max_debt < 0:
        fail("max_debt", "must be >= 0")
    if s.ttl_ticks < 1:
        fail("ttl_ticks", "must be >= 1")
    if not 0 <= s.report_tolerance < 10:
        fail("report_tolerance", "must be a fraction >= 0")
    if s.report_every < 0:
        fail("report_every", "must be >= 0")
    if s.report_compression not in REPORT_COMPRESSIONS:
        fail("report_compression", f"{s.report_compression!r} is not one of {', '.join(REPORT_COMPRESSIONS)}")
    if s.http_idle_timeout <= 0:
        fail("http_idle_timeout", "must be > 0 seconds")
    if s.http_max_connections < 1:
        fail("http_max_connections", "must be >= 1")
    if s.event_loop not in ("auto", "uvloop", "asyncio"):
        fail("event_loop", f"{s.event_loop!r} is not one of auto, uvloop, asyncio")
    if s.pulsar_url and not s.pulsar_url.startswith(("pulsar://", "pulsar+ssl://")):
        fail("pulsar_url", f"{s.pulsar_url!r} must start with pulsar:// or pulsar+ssl://")
    for key in ("topic", "config_topic"):
        value = getattr(s, key)
        if not value.startswith(("persistent://", "non-persistent://")):
            fail(key, f"{value!r} must be a full topic name (persistent:// or non-persistent://)")
    if s.archive_uri:
        from rgd.config.storage import StorageSetupError, check_uri

        try:
            check_uri(s.archive_uri)
        except StorageSetupError as exc:
            fail("archive_uri", str(exc))
    if s.cluster_process and s.cluster_thread:
        fail("cluster_thread", "cluster_process is set too: the cluster work runs in a process or in a thread, "
                               "not both")
    from rgd.config.groups import is_name

    if not is_name(s.cluster_name):
        fail("cluster_name", f"{s.cluster_name!r} is not a valid cluster name (ASCII letters, digits and _ - = : .)")
    if s.strategy not in STRATEGY_NAMES:
        fail("strategy", f"{s.strategy!r} is not one of {', '.join(sorted(STRATEGY_NAMES))}")
    return s


def with_defaults(s: Settings) -> Settings:
    return s if s.id else replace(s, id=socket.gethostname())


def resolve(config_daemon: Mapping[str, Any], environ: Mapping[str, str], flags: Mapping[str, Any],
            config_path: str = "") -> Settings:
    """Layer the four sources in order; each error names its source."""
    s = Settings()
    s = merge(s, config_daemon, f"{config_path or 'config file'} daemon")
    s = merge(s, from_env(environ), "environment")
    s = merge(s, flags, "command line")
    return with_defaults(s)


__all__ = [
    "DEFAULT_BURST_SECONDS", "DEFAULT_CONFIG_TOPIC", "DEFAULT_MEANS", "DEFAULT_TOPIC", "FIELDS", "HELP",
    "REMOVED_SETTINGS", "REPORT_COMPRESSIONS", "SETTING_GROUPS", "STRATEGY_NAMES", "UNIX_PREFIX", "ListenAddress",
    "SettingGroup", "Settings", "SettingsError", "env_name", "from_env", "merge", "parse_listen", "resolve",
    "shown_default", "validate", "with_defaults",
]
