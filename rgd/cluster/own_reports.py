"""What we reported, by sequence: the source of the acknowledged-minimum rule and of the lease.

A peer holds our state as of some sequence at or after the last one it acknowledged. So of
our own demand we may count only the smallest figure any of those states had (`as_held`):
then no peer counts us below what we count ourselves, which is premise P2 of the safety
argument (docs/design/protocol.md). And a peer that hears nothing from us evicts us its lease
after it last heard us, which is no earlier than our send time of the report it last
acknowledged plus that lease (`lease_end`): past it we must admit nothing (premise P4).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import reduce
from itertools import takewhile
from operator import itemgetter

from rgd.quota.model import PeerUsage, min_usage

__all__ = ["OwnReports"]

_SEQUENCE, _STATE, _IDLE = itemgetter(0), itemgetter(1), type(None)  # of a history item (sequence, state)


@dataclass
class OwnReports:
    sequence: int = 0
    # (sequence, our clock at send, the lease it announced), oldest first.
    sent: deque[tuple[int, float, float]] = field(default_factory=deque)
    # Per group: (sequence, what peers fold from it) for every report that named it, oldest
    # first; None is idle. Pruned to the state as of the oldest acknowledged sequence.
    history: dict[str, list[tuple[int, PeerUsage | None]]] = field(default_factory=dict)
    # Per group: the last sequence that named it (a report with base b names every group
    # whose last sequence is after b), in the order of those sequences (`record` keeps it).
    named_at: dict[str, int] = field(default_factory=dict)

    def next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    def record(self, sequence: int, at: float, lease: float, named: dict[str, PeerUsage | None]) -> None:
        """Report `sequence` went out at `at` naming `named` (group -> what peers fold)."""
        self.sent.append((sequence, at, lease))
        for name, usage in named.items():
            self.named_at.pop(name, None)  # to the end: named_at stays in the order of its sequences
            self.named_at[name] = sequence
            history = self.history.setdefault(name, [])
            if history and history[-1][0] == sequence:
                history[-1] = (sequence, usage)
            else:
                history.append((sequence, usage))

    def unsent(self, sequence: int) -> None:
        """Report `sequence` never left us (no broker): as if it had not been made."""
        if self.sent and self.sent[-1][0] == sequence:
            self.sent.pop()
        for name, history in list(self.history.items()):
            if history and history[-1][0] == sequence:
                history.pop()
                if not history:
                    del self.history[name]
        for name in [n for n, s in self.named_at.items() if s == sequence]:
            del self.named_at[name]  # named again by the next report with any base
        self.sequence = sequence - 1

    def latest(self, group: str) -> PeerUsage | None:
        history = self.history.get(group)
        return history[-1][1] if history else None

    def as_held(self, group: str, acked: int) -> PeerUsage | None:
        """The smallest of our figures for `group` a peer that acknowledged `acked` may hold:
        the state as of `acked` and every later one (None: some peer may hold us idle)."""
        states = self.held_states(group, acked)
        return None if states is None else reduce(min_usage, states)

    def held_states(self, group: str, acked: int) -> tuple[PeerUsage, ...] | None:
        """Each of our states of `group` a peer that acknowledged `acked` may hold, oldest
        first: the state as of `acked` and every later one (None: some peer may hold us idle)."""
        history = self.history.get(group) or []
        start = bisect_right(history, acked, key=_SEQUENCE) - 1
        if start < 0:
            return None  # the state as of `acked` did not name it: idle there
        states = tuple(map(_STATE, history[start:]))
        return None if _IDLE in map(type, states) else states

    def sent_before(self, at: float) -> int:
        """The last of our sequences sent at or before `at` (the first we keep if none is)."""
        last = self.sent[0][0] if self.sent else 0
        for seq, sent_at, _ in self.sent:
            if sent_at > at:
                break
            last = seq
        return last

    def changed_after(self, base: int) -> list[str]:
        """Groups named by a report after `base` (sorted). Read from the newest naming back, so
        a report costs what changed since `base`, not a pass over every group we ever named."""
        return sorted(takewhile(lambda name: self.named_at[name] > base, reversed(self.named_at)))

    def active(self) -> list[str]:
        """Groups whose latest state has demand (what a whole-state report names)."""
        return sorted(n for n, h in self.history.items() if h and h[-1][1] is not None)

    def lease_end(self, acked: Iterable[int]) -> float:
        """Until when peers that acknowledged these sequences keep us (our clock). A peer evicts
        us the lease announced in the last report it heard after hearing it; that report is one
        of ours at or after the oldest acknowledged, and it heard it no earlier than we sent it:
        so no peer evicts us before the earliest send time plus announced lease among them.
        -inf when some peer acknowledged nothing (it may not know us)."""
        acks = list(acked)
        if not acks:
            return math.inf
        oldest = min(acks)
        if oldest <= 0 or not self.sent or self.sent[0][0] > oldest:
            return -math.inf  # pruned: older than anything we keep, so long past
        return min((at + lease for seq, at, lease in self.sent if seq >= oldest), default=-math.inf)

    def prune(self, acked: int, sent_before: float) -> None:
        """Forget what no peer can still hold: reports before `acked` (every live peer's
        acknowledgement is at or after it). A send time is kept until `sent_before` as well: a
        member we do not know yet may acknowledge a report we sent before we heard it, and
        its lease counts from that report."""
        while len(self.sent) > 1 and self.sent[0][0] < acked and self.sent[0][1] < sent_before:
            self.sent.popleft()
        for name in list(self.history):
            history = self.history[name]
            keep = 0
            for i, (seq, _) in enumerate(history):
                if seq <= acked:
                    keep = i
            if keep:
                del history[:keep]
            if len(history) == 1 and history[0][1] is None and history[0][0] <= acked:
                del self.history[name]
                self.named_at.pop(name, None)

    def forget(self, group: str) -> None:
        self.history.pop(group, None)
        self.named_at.pop(group, None)
