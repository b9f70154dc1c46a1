"""whatif.html: one self-contained page comparing now and proposed, in the fairness report's style.

The charts and the stylesheet are the fairness report's (rgd.fairness.html: inline SVG,
no script), so the two pages read alike and open offline from a file.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rgd.fairness.html import CSS, esc, fmt, line_chart, time_label
from rgd.whatif.offered import ADMITTED_MESSAGES, THROTTLED_MESSAGES, OfferedLoad
from rgd.whatif.replay import DimFigures, Replay

__all__ = ["HEADER", "MAX_CHARTED", "REPLAY_TOLERANCE", "SUBHEADER", "charted_dims", "render_page", "replay_error"]

MAX_CHARTED = 12  # groups and kinds with charts: the page stays readable (and small) with thousands of groups
REPLAY_TOLERANCE = 0.02  # the replay under the logged quotas should admit within 2 % of what the logs say


def replay_error(logged: DimFigures, now: DimFigures) -> float | None:
    """How far the replay under the logged quotas is from the logged admitted total (a fraction)."""
    if logged.admitted_messages <= 0:
        return None
    return (now.admitted_messages - logged.admitted_messages) / logged.admitted_messages


def charted_dims(rep: Replay, errors: dict[tuple[str, str], float | None]) -> list[tuple[str, str]]:
    """Which (group, kind)s get charts, at most MAX_CHARTED: those the changes name, then the largest
    moves of admitted messages, then the largest differences between the replay and the log."""
    named = {c.group for c in rep.changes}

    def rank(key: tuple[str, str]) -> tuple[bool, float, float, tuple[str, str]]:
        moved = abs(rep.proposed[key].admitted_messages - rep.now[key].admitted_messages)
        return key[0] not in named, -moved, -abs(errors.get(key) or 0.0), key

    return sorted(rep.now, key=rank)[:MAX_CHARTED]


def _quota_text(q: tuple[float, float] | None) -> str:
    if q is None or (q[0] < 0 and q[1] < 0):
        return "unlimited"
    parts = [f"{fmt(q[0])} msg/s" if q[0] >= 0 else "", f"{fmt(q[1])} B/s" if q[1] >= 0 else ""]
    return ", ".join(p for p in parts if p)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f} %"


def _card(label: str, value: str, bad: bool = False) -> str:
    return f'<div class="card"><b class="{"bad" if bad else ""}">{esc(value)}</b><span>{esc(label)}</span></div>'


def _row(cells: list[Any], bad: set[int] | None = None) -> str:
    return "<tr>" + "".join(f'<td class="{"bad" if bad and i in bad else ""}">{esc(c)}</td>'
                            for i, c in enumerate(cells)) + "</tr>"


# Two header rows: what is compared, then which run (cells of a run read left to right: log, now, proposed).
HEADER = [("group", 1), ("kind", 1), ("quota at the end", 2), ("admitted", 4), ("throttled", 2), ("Jain", 2),
          ("overshoot", 2), ("replay vs log", 1)]
SUBHEADER = ["", "", "now", "proposed", "log", "now", "proposed", "change", "now", "proposed", "now", "proposed",
             "now", "proposed", ""]


def render_page(rep: Replay, load: OfferedLoad, source: str) -> str:
    keys = sorted(rep.now)
    errors = {k: replay_error(rep.logged[k], rep.now[k]) for k in keys}
    worst = max((abs(e) for e in errors.values() if e is not None), default=None)
    estimated = sum(load.total(g, k, ADMITTED_MESSAGES, filled=True) for g, k in keys)
    admitted = sum(load.total(g, k, ADMITTED_MESSAGES) for g, k in keys)
    changes = ", ".join(str(c) for c in rep.changes) or "none (the logged quotas)"
    span = load.seconds
    t0 = load.start_ms / 1000
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>rgd what-if replay</title>"
           f"<style>{CSS}</style></head><body>",
           "<h1>rgd what-if replay</h1>",
           f'<p class="muted">{esc(source)} &middot; {span} s from {esc(time_label(t0, span))} to '
           f'{esc(time_label(t0 + span, span))} UTC &middot; {len(load.daemons)} daemons &middot; '
           f'{len(load.groups)} groups &middot; strategy {esc(rep.strategy)}</p>',
           f"<p><b>Proposed:</b> {esc(changes)}</p>"]
    out.append('<div class="cards">' + "".join([
        _card("proposed changes", str(len(rep.changes))),
        _card("admitted now (msgs)", fmt(sum(rep.now[k].admitted_messages for k in keys))),
        _card("admitted proposed (msgs)", fmt(sum(rep.proposed[k].admitted_messages for k in keys))),
        _card("throttled now (msgs)", fmt(sum(rep.now[k].throttled_messages for k in keys))),
        _card("throttled proposed (msgs)", fmt(sum(rep.proposed[k].throttled_messages for k in keys))),
        _card("worst replay vs log", "-" if worst is None else f"{worst * 100:.1f} %",
              worst is not None and worst > REPLAY_TOLERANCE),
        _card("logged admitted estimated", f"{estimated / admitted * 100:.1f} %" if admitted else "-"),
    ]) + "</div>")
    out.append("<h2>Per group: now vs proposed</h2>")
    out.append('<p class="muted">Now: the logged load replayed under the logged quotas. Proposed: the same load '
               "under the proposed quotas. Admitted and throttled are totals over the log, in messages; Jain is the "
               "mean over the seconds of Jain's index of each daemon's admitted rate over its max-min fair share "
               "of the demand (1 = fair); overshoot is the worst second's cluster usage above the quota. "
               f"Replay vs log: the replay under the logged quotas against the logged admitted total (within "
               f"{REPLAY_TOLERANCE * 100:.0f} % it reproduces the log; a figure in red does not).</p>")
    head = ("<tr>" + "".join(f'<th colspan="{n}">{esc(c)}</th>' for c, n in HEADER) + "</tr><tr>"
            + "".join(f"<th>{esc(c)}</th>" for c in SUBHEADER) + "</tr>")
    rows = []
    for g, kind in keys:
        lg, now, pr = rep.logged[(g, kind)], rep.now[(g, kind)], rep.proposed[(g, kind)]
        change = ((pr.admitted_messages - now.admitted_messages) / now.admitted_messages
                  if now.admitted_messages else None)
        err = errors[(g, kind)]
        rows.append(_row([
            g, kind, _quota_text(rep.quotas_now.get((g, kind))), _quota_text(rep.quotas_proposed.get((g, kind))),
            fmt(lg.admitted_messages), fmt(now.admitted_messages), fmt(pr.admitted_messages), _pct(change),
            fmt(now.throttled_messages), fmt(pr.throttled_messages), fmt(now.jain_mean), fmt(pr.jain_mean),
            f"{now.overshoot_pct:.1f} %", f"{pr.overshoot_pct:.1f} %", _pct(err)],
            {14} if err is not None and abs(err) > REPLAY_TOLERANCE else set()))
    out.append(f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>")
    charted = charted_dims(rep, errors)
    out.append("<h2>Per group, second by second</h2>")
    if len(charted) < len(keys):
        out.append(f'<p class="muted">The {len(charted)} groups and kinds the proposal changes most (those it names '
                   f"first); the other {len(keys) - len(charted)} are in the table above and in whatif.json.</p>")
    xs = t0 + np.arange(span)
    for g, kind in charted:
        lg, now, pr = rep.logged[(g, kind)], rep.now[(g, kind)], rep.proposed[(g, kind)]
        unit = now.unit or pr.unit or "messages"
        demand = np.zeros(span)
        for (gg, _, kk), a in load.counts.items():
            if gg == g and kk == kind:
                demand += a[ADMITTED_MESSAGES] + a[THROTTLED_MESSAGES]
        out.append(f'<div class="group"><h3>{esc(g)} &middot; {esc(kind)} ({esc(unit)})</h3>')
        series: list[tuple[str, Any, str, bool]] = [
            ("quota now", now.quota, "#e15759", True), ("quota proposed", pr.quota, "#b07aa1", True),
                  ("admitted (log)", lg.admitted, "#bab0ac", False), ("admitted now", now.admitted, "#4e79a7", False),
                  ("admitted proposed", pr.admitted, "#f28e2b", False)]
        if unit == "messages":
            series.append(("demand", demand, "#76b7b2", True))
        out.append(line_chart(xs, [(n, np.asarray(v, dtype=float), c, d) for n, v, c, d in series], f"{unit}/s",
                              title="Admitted per second: now vs proposed"))
        out.append(line_chart(xs, [("Jain now", np.asarray(now.jain, dtype=float), "#4e79a7", False),
                                   ("Jain proposed", np.asarray(pr.jain, dtype=float), "#f28e2b", False),
                                   ("Jain (log)", np.asarray(lg.jain, dtype=float), "#bab0ac", True)],
                              "Jain index", y_min=0.0, y_max=1.0, title="Fairness per second"))
        out.append("</div>")
    out.append("<h2>How the logs were read</h2>")
    accounted = (
        f"{load.accounted_ticks} of the ticks came from tick accounting frames (docs/tick-accounting.md): every "
        "group and kind a daemon's limiter knew, exactly what it admitted and throttled, whatever was published; "
        "the published reports of those logs are not read again. ") if load.accounted_ticks else ""
    out.append(
        f"<p>{load.logged_entries} group entries of tick reports, from {len(load.daemons)} daemons; every daemon's "
        f"offered load is what it admitted plus what it throttled, second by second. {esc(accounted)}"
        "Suppressed groups (logs of an rgd without tick accounting): a daemon "
        "leaves a group out of its tick report while none of its figures moved by more than the report tolerance "
        "since it last sent them (PIP-82 suppression), and reports at once a group that went idle. So a group "
        "absent between two reports is taken as unchanged since its last report, at that report's rates, for as "
        f"long as the daemon kept publishing: {load.suppressed_entries} entries were filled in that way, "
        f"{fmt(estimated)} of the {fmt(admitted)} admitted messages of the log. A daemon's silence of more than a "
        "few ticks, a leaving report or a new incarnation ends what is carried.</p>"
        "<p>The replay offers each daemon the same load in every second under both quotas: a broker's denied "
        "batches are dropped, not retried (as the simulator's brokers do), so a lower quota shows as more "
        "throttled messages, not as load moved later. Each daemon's message size in a group is its mean over "
        "the log. Restatements and receipts carry no new counts and are not read.</p>")
    spans = "; ".join(f"{d}: " + ", ".join(f"{s.start}-{s.end} s{' (left)' if s.graceful else ''}" for s in sp)
                      for d, sp in sorted(load.spans.items()))
    out.append(f'<h2>Run</h2><p class="muted">Daemons, seconds from the start: {esc(spans)}.</p>')
    out.append("</body></html>")
    return "\n".join(out)

