"""Our own recent report entries per group, to answer "what may peers hold of us now?".

A peer folds our report for a group some time after we publish it (the delivery
delay, plus the time it takes to recompute); until then it holds one of our older
entries. So at time `now`, with a fold window W, any peer holds either the newest
entry we published before now - W, or one published since. Counting our own
demand as the smallest of those (`as_seen`) means an increase is granted once
its report has been out for W and a decrease at once: the calculator's safety
argument (rgd/quota/calculator.py) then holds for any delivery delay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rgd.quota.model import PeerUsage, min_usage


@dataclass
class OwnHistory:
    entries: dict[str, list[tuple[float, PeerUsage]]] = field(default_factory=dict)

    def add(self, group: str, at: float, usage: PeerUsage) -> None:
        self.entries.setdefault(group, []).append((at, usage))

    def as_seen(self, group: str, now: float, window: float) -> PeerUsage | None:
        """The smallest of our entries a peer may hold at `now`; None if a peer may hold
        nothing of ours for the group (we never reported it before now - window)."""
        hist = self.entries.get(group)
        if not hist:
            return None
        cutoff = now - window
        base_index = None
        for i in range(len(hist) - 1, -1, -1):
            if hist[i][0] <= cutoff:
                base_index = i
                break
        if base_index is None:
            return None
        out = hist[base_index][1]
        for _, usage in hist[base_index + 1:]:
            out = min_usage(out, usage)
        return out

    def pending(self, now: float, window: float) -> list[str]:
        """Groups with an entry not yet out for the window: their own share may still grow."""
        return [g for g, h in self.entries.items() if h and h[-1][0] > now - window]

    def crossed(self, after: float, until: float) -> list[str]:
        """Groups with an entry published in (after, until]: as_seen moves for them when its
        cutoff (now - window) passes from one end to the other, and only for them."""
        out = []
        for group, hist in self.entries.items():
            for at, _ in reversed(hist):
                if at <= after:
                    break
                if at <= until:
                    out.append(group)
                    break
        return out

    def prune(self, now: float, window: float) -> None:
        """Keep, per group, the newest entry older than the window and everything newer."""
        cutoff = now - window
        for hist in self.entries.values():
            keep_from = 0
            for i in range(len(hist) - 1, -1, -1):
                if hist[i][0] <= cutoff:
                    keep_from = i
                    break
            if keep_from:
                del hist[:keep_from]

    def forget(self, group: str) -> None:
        self.entries.pop(group, None)


__all__ = ["OwnHistory"]
