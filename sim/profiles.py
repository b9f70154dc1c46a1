"""How the cluster around each strategy behaves: report suppression, eviction, announcements.

The strategies are compared on the same simulated daemon; what differs besides
the allocation function is what the real systems do around it:
- `rgd` (and the Doorman and static allocations, which run on rgd's daemon): the
  daemon's defaults, PIP-82 suppression at 10 % / at least every 6th tick, a
  silent daemon evicted after `ttl_ticks` (3), and a full report as soon as a new
  member shows up, so a newcomer's map is complete by its second tick, and
  between ticks an early report when a group's demand moves and a recompute on
  every report received (rgd/cluster/node.py `react`);
- `pulsar`: Pulsar's ResourceGroupService constants, 5 % tolerance and a report at
  least every 5 rounds (at most 4 suppressed), a dead broker's usage kept for
  600 s (10 periods of 60 s: `pulsar_ttl_ticks`), no announcement, and nothing
  between ticks.
"""

from __future__ import annotations

from dataclasses import dataclass

from rgd.cluster.suppression import SuppressionPolicy

RGD_SUPPRESSION = SuppressionPolicy.every(0.10, 6)  # rgd run's defaults: --report-tolerance 0.1 --report-every 6
PULSAR_SUPPRESSION = SuppressionPolicy(tolerance=0.05, max_skipped_ticks=4)


@dataclass(frozen=True, slots=True)
class Profile:
    suppression: SuppressionPolicy
    ttl_ticks: int
    announce: bool  # publish a full report when a new member appears
    react: bool = True  # between ticks: early reports on a demand shift, recompute on receipt

    @property
    def safety_ttl_ticks(self) -> int:
        """A group entry not confirmed for this long is dropped even without evidence
        (rgd/cluster/map_keeper.py): three refresh periods plus the TTL."""
        return 3 * (self.suppression.max_skipped_ticks + 1) + self.ttl_ticks


def profile_for(strategy: str, ttl_ticks: int, pulsar_ttl_ticks: int) -> Profile:
    if strategy == "pulsar":
        return Profile(PULSAR_SUPPRESSION, pulsar_ttl_ticks, announce=False, react=False)
    return Profile(RGD_SUPPRESSION, ttl_ticks, announce=True)
