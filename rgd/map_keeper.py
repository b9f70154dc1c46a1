"""Usage-map upkeep that survives report loss: evidence-based group expiry and tombstones.

Expiring a group entry by age alone, and forgetting a member silent for the
TTL, both make a busy peer look idle or gone under report loss; every daemon
that believes so hands itself that peer's share, and the cluster overshoots
until the peer's next periodic report (up to report_every + 1 ticks under
suppression). The keeper applies two rules on top of the map (they need only
what a report already carries):
- a peer's group entry is dropped when K + 1 *consecutive* reports of that peer
  (sequence numbers without a gap) did not mention the group: an active group is
  in at least one of any K + 1 consecutive reports, so the peer went idle and its
  "idle" report was lost. Otherwise the entry stays until `safety_ttl`;
- a member evicted for silence leaves a tombstone; if it speaks again with the
  same incarnation it was only unlucky, and its group entries come back at once.
A restarted member (new incarnation) loses the entries of its old incarnation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rgd.usage_map import Entry, FoldResult, UsageMap
from rgd.wire.usage_report_pb2 import UsageReport


@dataclass
class MapKeeper:
    usage_map: UsageMap
    self_id: str
    refresh_reports: int  # K + 1: an active group is in one of any this many consecutive reports
    ttl_seconds: float  # member eviction after silence
    safety_ttl_seconds: float  # an entry unconfirmed this long goes anyway
    streak: dict[tuple[str, str], int] = field(default_factory=dict)  # (member, group) -> reports without it
    tombstones: dict[str, tuple[int, float, dict[str, Entry]]] = field(default_factory=dict)

    def fold(self, report: UsageReport, now: float) -> tuple[FoldResult, bool]:
        """Fold one report; returns the result and whether the sender is new to us."""
        sender = report.daemon_id
        known = self.usage_map.members.get(sender)
        result = self.usage_map.fold(report, now)
        if not result.accepted or report.leaving:
            if report.leaving:
                self.tombstones.pop(sender, None)
                self._forget_streaks(sender)
            return result, False
        new = known is None or known.incarnation != report.incarnation
        if known is not None and known.incarnation != report.incarnation:
            self._drop_old_incarnation(report)
        if known is None:
            self._restore(report)
        mentioned = {g.group for g in report.groups}
        for group, entries in self.usage_map.groups.items():
            if sender not in entries:
                continue
            key = (sender, group)
            if group in mentioned:
                self.streak[key] = 0
            elif result.lost or new:
                # A gap, whatever report reveals it (an early report or restatement too): the
                # group may have been in the lost report.
                self.streak[key] = 0
            elif report.restatement:
                continue  # an early or announcement report names only some groups: no evidence
            else:
                self.streak[key] = self.streak.get(key, 0) + 1
        return result, new

    def _drop_old_incarnation(self, report: UsageReport) -> None:
        mentioned = {g.group for g in report.groups}
        for group, entries in self.usage_map.groups.items():
            if group not in mentioned:
                entries.pop(report.daemon_id, None)
        self._forget_streaks(report.daemon_id)

    def _restore(self, report: UsageReport) -> None:
        tomb = self.tombstones.pop(report.daemon_id, None)
        if tomb is None or tomb[0] != report.incarnation:
            return
        mentioned = {g.group for g in report.groups}
        for group, entry in tomb[2].items():
            if group not in mentioned:
                self.usage_map.groups.setdefault(group, {}).setdefault(report.daemon_id, entry)

    def _forget_streaks(self, member: str) -> None:
        for key in [k for k in self.streak if k[0] == member]:
            del self.streak[key]

    def evict_silent(self, now: float) -> list[str]:
        um = self.usage_map
        snapshot = {
            d: (m.incarnation, {g: e[d] for g, e in um.groups.items() if d in e})
            for d, m in um.members.items() if d != self.self_id and now - m.last_seen > self.ttl_seconds
        }
        gone = um.evict_silent(now, self.ttl_seconds, keep=self.self_id)
        for d in gone:
            incarnation, entries = snapshot[d]
            self.tombstones[d] = (incarnation, now, entries)
        for d in [d for d, (_, at, _) in self.tombstones.items() if now - at > self.safety_ttl_seconds]:
            del self.tombstones[d]
        return gone

    def expire_groups(self, now: float) -> int:
        dropped = 0
        for group, entries in self.usage_map.groups.items():
            for member in list(entries):
                if member == self.self_id:
                    continue
                idle = self.streak.get((member, group), 0) >= self.refresh_reports
                if idle or now - entries[member].updated > self.safety_ttl_seconds:
                    del entries[member]
                    self.streak.pop((member, group), None)
                    dropped += 1
        for group in [g for g, e in self.usage_map.groups.items() if not e]:
            del self.usage_map.groups[group]
        return dropped
