"""PIP-82 report suppression: skip a group whose usage barely moved, but not forever.

Rules, per group, each tick:
- never reported before and not idle -> report;
- went idle since the last report -> report at once (peers must see the zero);
- idle and already reported idle -> skip (nothing to say; the heartbeat keeps us alive);
- any figure moved more than `tolerance` (relative) since the last report -> report;
- otherwise report anyway once `max_skipped_ticks` ticks have been skipped.

Pure: the daemon and the simulator (and the `pulsar` strategy's 5 % / 5-round
variant) run this same function.
"""

from __future__ import annotations

from collections.abc import Container, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Figures = Sequence[float]  # the numbers of one group's report, compared element-wise
K = TypeVar("K", bound=Hashable)  # what names a group: its name in the daemon, an index in the simulator


@dataclass(frozen=True, slots=True)
class SuppressionPolicy:
    tolerance: float = 0.10  # relative change that forces a report
    max_skipped_ticks: int = 5  # report at least every K+1 ticks

    @classmethod
    def every(cls, tolerance: float, report_every: int) -> SuppressionPolicy:
        """The policy of `--report-tolerance` and `--report-every N`: a steady group is
        reported on every Nth tick, so N - 1 ticks are skipped between (N of 0 or 1: every
        tick). Pulsar's setting counts the skipped rounds instead, hence two names."""
        return cls(tolerance, max(report_every - 1, 0))

    @property
    def enabled(self) -> bool:
        return self.tolerance > 0 and self.max_skipped_ticks > 0


@dataclass(slots=True)
class SuppressionState(Generic[K]):
    last_sent: dict[K, tuple[float, ...]] = field(default_factory=dict)
    skipped: dict[K, int] = field(default_factory=dict)


def _is_idle(figures: Figures) -> bool:
    return not any(figures)


def moved(old: Figures, new: Figures, tolerance: float) -> bool:
    """Some figure changed by more than `tolerance` relative to the larger of the two."""
    for a, b in zip(old, new):
        base = max(abs(a), abs(b))
        if base and abs(a - b) > tolerance * base:
            return True
    return len(old) != len(new)


def select_reports(
    policy: SuppressionPolicy, state: SuppressionState[K], current: Mapping[K, Figures],
    always: Container[K] = (),
) -> tuple[list[K], list[K]]:
    """Which groups to put in this tick's report, and which were suppressed.

    `current` holds this tick's figures per group; a group missing from it is
    treated as idle. A group in `always` that is not idle is sent however little
    it moved. Updates `state` as if the selected groups were sent.
    """
    send: list[K] = []
    suppressed: list[K] = []
    keys = set(current) | set(state.last_sent)
    for key in keys:
        figures = tuple(current.get(key, ()))
        last = state.last_sent.get(key)
        idle = _is_idle(figures)
        if last is None:
            if idle:
                continue
            decision = True
        elif idle and _is_idle(last):
            # Nothing new to say about an idle group: forget it until it wakes.
            state.last_sent.pop(key, None)
            state.skipped.pop(key, None)
            continue
        elif idle:
            decision = True  # went idle: say so at once
        elif not policy.enabled:
            decision = True
        else:
            decision = (
                key in always
                or moved(last, figures, policy.tolerance)
                or state.skipped.get(key, 0) >= policy.max_skipped_ticks
            )
        if decision:
            send.append(key)
            state.last_sent[key] = figures if figures else tuple(0.0 for _ in last or ())
            state.skipped[key] = 0
        else:
            suppressed.append(key)
            state.skipped[key] = state.skipped.get(key, 0) + 1
    return send, suppressed


__all__ = ["Figures", "SuppressionPolicy", "SuppressionState", "moved", "select_reports"]
