"""`rgd whatif`: replay usage logs through the simulator under proposed quotas (DESIGN.md section 9).

`run_whatif(logs, out_dir, sets, strategy)` reads the logs (logged: the tick counts;
offered: each daemon's offered load per group, kind and second), checks the proposed
changes against the logged groups (proposal), runs the simulator with the logged quotas
and with the proposed ones (replay), and writes whatif.html (page) and whatif.json to
`out_dir`; it returns the text summary the command prints. The simulator is imported
only when a replay runs (replay.SimulatorMissing when it is absent).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rgd.whatif.logged import LogReadError, read_ticks
from rgd.whatif.offered import rebuild
from rgd.whatif.page import REPLAY_TOLERANCE, render_page, replay_error
from rgd.whatif.proposal import ProposalError, check_groups, parse_changes
from rgd.whatif.replay import Replay, ReplayError, SimulatorMissing, replay

__all__ = ["LogReadError", "ProposalError", "ReplayError", "SimulatorMissing", "run_whatif", "summary_text"]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def summary_text(rep: Replay) -> str:
    """The table the command prints: admitted and throttled messages, Jain and overshoot, now -> proposed."""
    lines = [f"{'group':<16} {'kind':<8} {'admitted log':>12} {'now':>9} {'proposed':>9} {'throttled now':>13} "
             f"{'proposed':>9} {'Jain now':>8} {'proposed':>8} {'over now':>8} {'proposed':>8}"]
    for g, kind in sorted(rep.now):
        lg, now, pr = rep.logged[(g, kind)], rep.now[(g, kind)], rep.proposed[(g, kind)]
        jn = "-" if now.jain_mean is None else f"{now.jain_mean:.3f}"
        jp = "-" if pr.jain_mean is None else f"{pr.jain_mean:.3f}"
        lines.append(f"{g:<16} {kind:<8} {_num(lg.admitted_messages):>12} {_num(now.admitted_messages):>9} "
                     f"{_num(pr.admitted_messages):>9} {_num(now.throttled_messages):>13} "
                     f"{_num(pr.throttled_messages):>9} {jn:>8} {jp:>8} {now.overshoot_pct:>7.1f}% "
                     f"{pr.overshoot_pct:>7.1f}%")
    return "\n".join(lines)


def run_whatif(logs: str, out_dir: str, sets: Sequence[str], strategy: str = "rgd") -> tuple[str, list[str]]:
    """Replay `logs` now and under `sets`; write whatif.html and whatif.json to `out_dir`.

    Returns (summary table, warnings). Raises LogReadError, ProposalError, ReplayError, SimulatorMissing."""
    changes = parse_changes(sets)
    ticks, stats = read_ticks(logs)
    load = rebuild(ticks)
    check_groups(changes, load.groups)
    rep = replay(load, changes, strategy)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "whatif.html").write_text(render_page(rep, load, logs))
    doc: dict[str, Any] = {
        "source": logs, "strategy": strategy, "changes": [str(c) for c in rep.changes],
        "start_ms": load.start_ms, "seconds": load.seconds, "daemons": load.daemons,
        "reports": stats.reports, "accounting_frames": stats.accounting_frames, "segments": stats.segments,
        "suppressed_entries_filled": load.suppressed_entries,
        "groups": {f"{g}/{k}": {"logged": rep.logged[(g, k)].to_json(), "now": rep.now[(g, k)].to_json(),
                                "proposed": rep.proposed[(g, k)].to_json(),
                                "replay_error": replay_error(rep.logged[(g, k)], rep.now[(g, k)])}
                   for g, k in sorted(rep.now)},
    }
    (out / "whatif.json").write_text(json.dumps(doc, indent=1) + "\n")
    warnings = []
    for (g, k), f in sorted(rep.now.items()):
        err = replay_error(rep.logged[(g, k)], f)
        if err is not None and abs(err) > REPLAY_TOLERANCE:
            warnings.append(f"{g}/{k}: the replay under the logged quotas admits {err * 100:+.1f} % of what the "
                            f"logs say (more than {REPLAY_TOLERANCE * 100:.0f} %): read its proposed figures "
                            "with that in mind")
    return summary_text(rep), warnings
