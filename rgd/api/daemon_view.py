"""What the HTTP API reads of a daemon: the seam between the routes and the daemon's wiring.

The routes and the scrape-time collectors need a handful of things (the limiter, the
effective config, a way to submit an admin change, the state /metrics shows). They are
written against this protocol, not against `rgd.daemon.wiring.Daemon`, so the API layer
never imports the layer above it: the daemon satisfies the protocol and hands itself to
`rgd.api.app.build_app`, and a test can serve the routes in-process from a small stand-in
without a broker, a tick or a usage log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

if TYPE_CHECKING:
    from rgd.api.connection_guard import ConnectionGuard
    from rgd.api.fairness_gauges import Fairness
    from rgd.api.metrics import Metrics
    from rgd.cluster.usage_map import UsageMap
    from rgd.config.groups import GroupRegistry, ResourceGroup
    from rgd.config.settings import Settings
    from rgd.config.store import ConfigChange, ConfigStore
    from rgd.limiting.limiter import Limiter
    from rgd.usage_log.guard import LogGuard


class GroupsInForce(Protocol):
    """The groups in force: a daemon's ConfigStore, or the serving process's copy of the
    cluster process's groups."""

    @property
    def effective(self) -> GroupRegistry: ...


class AskView(Protocol):
    """What the broker routes (acquire, usage, quota) read: the serving process of
    `--cluster-process` answers them too, from its own limiter, and has nothing else."""

    @property
    def settings(self) -> Settings: ...

    @property
    def config(self) -> GroupsInForce: ...

    @property
    def limiter(self) -> Limiter: ...


class RoutesView(AskView, Protocol):
    """What the admin and operations routes read and call, on top of the broker routes'."""

    @property
    def config(self) -> ConfigStore: ...

    @property
    def admin_tokens(self) -> frozenset[str]: ...

    @property
    def metrics(self) -> Metrics: ...

    async def submit_change(self, change: ConfigChange) -> bool:
        """Apply an admin change here and queue it for the cluster; False while Pulsar is
        unreachable (the change is in force here and waits for the session)."""
        ...

    def group_stats(self, group: ResourceGroup) -> dict[str, Any]: ...

    def refresh_liveness(self) -> bool: ...

    def readiness(self) -> tuple[bool, dict[str, Any]]: ...


class ObservedState(AskView, Protocol):
    """What the scrape-time collectors (rgd.api.metrics, rgd.api.pulsar_metrics) read, on
    top of what the broker routes do."""

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def usage_map(self) -> UsageMap: ...

    @property
    def last_local_rates(self) -> dict[tuple[str, str], tuple[float, float]]: ...

    @property
    def fairness(self) -> dict[tuple[str, str, str], Fairness]:
        """(budget, kind, unit) -> the live fairness gauges, from the usage map (read by a scrape)."""
        ...

    @property
    def inbox(self) -> asyncio.Queue[Any]: ...

    @property
    def inbox_bytes(self) -> int: ...

    @property
    def behind_serving_process(self) -> bool: ...

    @property
    def connection_guard(self) -> ConnectionGuard | None: ...

    @property
    def log_guard(self) -> LogGuard | None: ...

    def log_lag(self) -> list[tuple[str, str, float]] | None: ...


# What the routes serve, on the aiohttp application (both set by rgd.api.app.build_app).
ASKS: web.AppKey[AskView] = web.AppKey("asks")
DAEMON: web.AppKey[RoutesView] = web.AppKey("daemon")

__all__ = ["ASKS", "DAEMON", "AskView", "GroupsInForce", "ObservedState", "RoutesView"]
