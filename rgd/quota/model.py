"""Inputs and outputs of the quota calculator (pure data, no I/O).

The usage map stores `PeerUsage` values directly, so what the daemon folds from
the topic and what the simulator fabricates are the same type, and the
calculator sees no difference between the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rgd.config.groups import KINDS

INF = math.inf


@dataclass(frozen=True, slots=True)
class KindRates:
    """One kind (publish, dispatch, replication) of one group on one daemon, per second, as last reported."""

    admitted_messages: float = 0.0
    admitted_bytes: float = 0.0
    throttled_messages: float = 0.0
    throttled_bytes: float = 0.0
    limit_messages: float = INF  # the local limit that was in force; INF = unlimited
    limit_bytes: float = INF

    @property
    def demand_messages(self) -> float:
        """Demand = admitted + throttled (PIP-406 style): what the brokers asked for."""
        return self.admitted_messages + self.throttled_messages

    @property
    def demand_bytes(self) -> float:
        return self.admitted_bytes + self.throttled_bytes

    @property
    def mean_message(self) -> float:
        """The mean message asked for, in bytes (0: no message asked for)."""
        return self.demand_bytes / self.demand_messages if self.demand_messages else 0.0

    @property
    def idle(self) -> bool:
        return not (self.admitted_messages or self.admitted_bytes
                    or self.throttled_messages or self.throttled_bytes)


IDLE = KindRates()


@dataclass(frozen=True, slots=True)
class PeerUsage:
    """One daemon's last report for one group: one KindRates per kind (rgd.config.groups.KINDS).

    `replication` comes after `reports` so that positional construction of the first
    three fields keeps its meaning."""

    publish: KindRates = IDLE
    dispatch: KindRates = IDLE
    reports: int = 1  # how many reports for this group folded from this daemon (history)
    replication: KindRates = IDLE

    def kind(self, kind: str) -> KindRates:
        rates: KindRates = getattr(self, kind)  # kind is one of KINDS, each a KindRates field
        return rates

    @property
    def idle(self) -> bool:
        return self.publish.idle and self.dispatch.idle and self.replication.idle


def min_kind(a: KindRates, b: KindRates) -> KindRates:
    """The smaller demand and usage of two entries, dimension by dimension."""
    if a is IDLE and b is IDLE:
        return IDLE  # what the lines below would build (every figure 0, limits INF): kept shared
    adm_m = min(a.admitted_messages, b.admitted_messages)
    adm_b = min(a.admitted_bytes, b.admitted_bytes)
    return KindRates(
        adm_m, adm_b,
        min(a.demand_messages, b.demand_messages) - adm_m,
        min(a.demand_bytes, b.demand_bytes) - adm_b,
        a.limit_messages, a.limit_bytes,
    )


def min_usage(a: PeerUsage, b: PeerUsage) -> PeerUsage:
    kinds = {k: min_kind(a.kind(k), b.kind(k)) for k in KINDS}
    return PeerUsage(**kinds, reports=max(a.reports, b.reports))


# kind -> (messages/s, bytes/s); INF = unlimited.
GroupLimits = dict[str, tuple[float, float]]
