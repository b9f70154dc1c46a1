"""Output: the Markdown comparison table and the machine-readable JSON (pure formatting)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sim.invariant import TOLERANCE as INVARIANT_TOLERANCE
from sim.metrics import HOLD, OVER_GRACE, SLACK, TOLERANCE, Metrics

LEGEND = f"""\
- **fair share**: from the judge (sim/oracle.py, no code shared with any strategy): max-min fair over
  offered load (the whole messages that arrived at each daemon in the tick); where a group limits
  messages and bytes both, the lexicographic max-min of dominant shares (DRF with demand caps), and a
  daemon whose bytes bind is judged in bytes.
- **converge**: ticks from the moment a change is observable (the next tick for demand, join and
  leave and a new group; the TTL for a crash; at once for a quota change) until every daemon is within
  {TOLERANCE:.0%} of its fair share (+{SLACK:.1%} of the quota of its dominant dimension, + one message) \
and the cluster's
  usage of every limited dimension within {TOLERANCE:.0%} of the fair allocation's (min(quota, demand) in
  one dimension), for {HOLD} ticks in a row; worst change of the run; `never` if some change never converges.
- **overshoot**: the worst tick's cluster usage above the quota, over every limited dimension.
  **over quota**: share of ticks more than {OVER_GRACE:.0%} above it.
- **util** (usage of the binding dimension / its quota, or admitted / demand when the fair allocation
  meets every demand) and **Jain** (of admitted / fair share, one message off counted as none): mean over \
the converged part of each
  change (its last half if it never converges), worst change.
- **report B**: bytes of usage reports published per daemon per tick (protobuf, after suppression).
- **invariant**: episodes in which the limits the live daemons granted themselves summed to more than the
  quota + {INVARIANT_TOLERANCE:.0%} in a group, kind and dimension (checked twice per sub-step, sim/invariant.py),
  and the worst one's excess over the quota; partitioned daemons count, crashed ones do not.
"""


def _num(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def _violations(m: Metrics) -> str:
    if not m.invariant_violations or m.worst_violation_pct is None:
        return "0"
    return f"{m.invariant_violations} ({m.worst_violation_pct:+.1f})"


def markdown(results: Sequence[Metrics], descriptions: Mapping[str, str] | None = None) -> str:
    descriptions = descriptions or {}
    lines = [
        "| scenario | strategy | converge (ticks) | overshoot % | over quota % | util % | Jain | report B "
        "| invariant: violations (worst %) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    last = None
    for m in results:
        name = f"`{m.scenario}`" if m.scenario != last else ""
        last = m.scenario
        ttc = "never" if m.ticks_to_converge is None else str(m.ticks_to_converge)
        util = None if m.utilization is None else m.utilization * 100
        lines.append(
            f"| {name} | {m.strategy} | {ttc} | {m.overshoot_pct:.1f} | {m.over_quota_share * 100:.0f} "
            f"| {_num(util, '.1f')} | {_num(m.jain, '.3f')} | {m.report_bytes_per_daemon_tick:.0f} "
            f"| {_violations(m)} |"
        )
    out = ["## Strategy comparison", "", *lines, "", LEGEND]
    if descriptions:
        out += ["Scenarios:", ""]
        out += [f"- `{n}`: {d}" for n, d in sorted(descriptions.items())]
        out.append("")
    return "\n".join(out)


def summary(results: Iterable[Metrics], max_ticks: int = 3, max_overshoot: float = 10.0) -> str:
    """One line per strategy: how many scenarios it handles within rgd's targets."""
    per: dict[str, list[Metrics]] = {}
    for m in results:
        per.setdefault(m.strategy, []).append(m)
    lines = []
    for strategy, ms in per.items():
        ok = sum(
            1 for m in ms
            if m.ticks_to_converge is not None and m.ticks_to_converge <= max_ticks
            and m.overshoot_pct <= max_overshoot
        )
        worst = max(m.overshoot_pct for m in ms)
        broken = [m for m in ms if m.invariant_violations]
        worst_inv = max(broken, key=lambda m: m.worst_violation_pct or 0.0, default=None)
        invariant = (f"; invariant violated in {len(broken)} scenario(s), "
                     f"{sum(m.invariant_violations for m in ms)} episode(s), worst "
                     f"{worst_inv.worst_violation_pct:+.1f} % in {worst_inv.scenario}: {worst_inv.worst_violation}"
                     if worst_inv is not None and worst_inv.worst_violation_pct is not None
                     else "; invariant never violated")
        lines.append(
            f"- {strategy}: {ok}/{len(ms)} scenarios converge within {max_ticks} ticks without overshooting "
            f"more than {max_overshoot:g} %; worst overshoot {worst:.1f} %{invariant}"
        )
    return "\n".join(lines)


def to_json(results: Sequence[Metrics], descriptions: Mapping[str, str], extra: Mapping[str, Any]) -> str:
    doc = {
        "definitions": {
            "tolerance": TOLERANCE, "slack_of_quota": SLACK, "hold_ticks": HOLD, "over_grace": OVER_GRACE,
        },
        **extra,
        "scenarios": dict(sorted(descriptions.items())),
        "results": [m.to_json() for m in results],
    }
    return json.dumps(doc, indent=2, sort_keys=False, allow_nan=False, default=str)
