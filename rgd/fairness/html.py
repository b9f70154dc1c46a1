"""report.html: one self-contained page, charts as inline SVG drawn here (no script, no CDN).

Why server-side SVG: the page must open offline, from a file, years later;
inline SVG needs no JavaScript to render, prints, and a headless browser can
check it by counting <polyline>/<path> elements. The chart helpers are pure
functions from numbers to SVG text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Union, overload

import numpy as np
import pandas as pd

# What a chart takes as a series: a list, a numpy array or a pandas column.
Values = Union[Sequence[float], np.ndarray, "pd.Series[float]"]

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac"]
QUOTA_COLOR = "#e15759"  # the quota, on every chart; no daemon is ever drawn in it
# One colour per daemon for the whole page (the same daemon, the same colour in every group):
# no red or pink, which read as the quota, and no grey, which is "others".
DAEMON_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#17becf",
                  "#8c564b", "#1f3b73", "#6b8e23", "#c49c94"]
OTHERS_COLOR = "#bab0ac"
W, H = 575, 230
PAD_L, PAD_R, PAD_T, PAD_B = 56, 10, 24, 30


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def fmt(x: Any, digits: int = 3) -> str:
    """Numbers for people: 1.23k, 45.6M, 0.987; '-' for missing."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    try:
        f = float(x)
    except (TypeError, ValueError):
        return esc(x)
    if math.isnan(f):
        return "-"
    if math.isinf(f):
        return "∞"
    a = abs(f)
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= div:
            return f"{f / div:.{digits}g}{unit}"
    if f == int(f) and a < 1e3:
        return str(int(f))
    return f"{f:.{digits}g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round axis ticks covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else [0.0]
    raw = (hi - lo) / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    out = []
    v = start
    while v <= hi + step * 1e-9:
        if v >= lo - step * 1e-9:
            out.append(round(v, 12))
        v += step
    return out


def daemon_colors(daemons: Sequence[str]) -> dict[str, str]:
    """Each daemon's colour, fixed for the page: by its place among all the run's daemons, sorted."""
    return {d: DAEMON_PALETTE[i % len(DAEMON_PALETTE)] for i, d in enumerate(sorted(set(daemons)))}


def time_label(t: float, span: float) -> str:
    d = datetime.fromtimestamp(t, tz=UTC)
    return d.strftime("%H:%M:%S" if span < 86400 else "%m-%d %H:%M")


class Frame:
    """Maps data coordinates onto the plot area of one chart."""

    def __init__(self, x0: float, x1: float, y0: float, y1: float, w: int = W, h: int = H) -> None:
        self.x0, self.x1 = x0, (x1 if x1 > x0 else x0 + 1)
        self.y0, self.y1 = y0, (y1 if y1 > y0 else y0 + 1)
        self.w, self.h = w, h

    @overload
    def x(self, v: float) -> float: ...
    @overload
    def x(self, v: np.ndarray) -> np.ndarray: ...

    def x(self, v: np.ndarray | float) -> Any:
        return PAD_L + (np.asarray(v) - self.x0) / (self.x1 - self.x0) * (self.w - PAD_L - PAD_R)

    @overload
    def y(self, v: float) -> float: ...
    @overload
    def y(self, v: np.ndarray) -> np.ndarray: ...

    def y(self, v: np.ndarray | float) -> Any:
        return self.h - PAD_B - (np.asarray(v) - self.y0) / (self.y1 - self.y0) * (self.h - PAD_T - PAD_B)

    def axes(self, y_label: str) -> str:
        parts = [f'<rect x="{PAD_L}" y="{PAD_T}" width="{self.w - PAD_L - PAD_R}" '
                 f'height="{self.h - PAD_T - PAD_B}" class="plot"/>']
        for v in nice_ticks(self.y0, self.y1):
            yy = self.y(v)
            parts.append(f'<line x1="{PAD_L}" x2="{self.w - PAD_R}" y1="{yy:.1f}" y2="{yy:.1f}" class="grid"/>'
                         f'<text x="{PAD_L - 6}" y="{yy + 4:.1f}" class="yl">{esc(fmt(v))}</text>')
        span = self.x1 - self.x0
        for v in nice_ticks(self.x0, self.x1, 6):
            xx = self.x(v)
            # A label centred on the plot's right (or left) edge would run out of the picture.
            anchor = ("end" if xx > self.w - PAD_R - 24 else "start" if xx < PAD_L + 24 else "middle")
            parts.append(f'<text x="{xx:.1f}" y="{self.h - 10}" class="xl" text-anchor="{anchor}">'
                         f'{esc(time_label(v, span))}</text>')
        parts.append(f'<text x="{PAD_L}" y="{PAD_T - 8}" class="yt">{esc(y_label)}</text>')
        return "".join(parts)


def _points(fr: Frame, xs: np.ndarray, ys: np.ndarray) -> str:
    ok = np.isfinite(xs) & np.isfinite(ys)
    px, py = fr.x(xs[ok]), fr.y(ys[ok])
    return " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, py))


def line_chart(xs: Values, series: list[tuple[str, Values, str, bool]], y_label: str,
               y_min: float | None = 0.0, y_max: float | None = None, title: str = "") -> str:
    """SVG line chart; series: (name, ys, color, dashed)."""
    x = np.asarray(xs, dtype=float)
    ys_all = [np.asarray(s[1], dtype=float) for s in series]
    finite = np.concatenate([y[np.isfinite(y)] for y in ys_all]) if ys_all else np.zeros(0)
    lo = y_min if y_min is not None else (float(finite.min()) if finite.size else 0.0)
    hi = y_max if y_max is not None else (float(finite.max()) * 1.05 if finite.size else 1.0)
    if hi <= lo:
        hi = lo + 1.0
    fr = Frame(float(np.nanmin(x)) if x.size else 0.0, float(np.nanmax(x)) if x.size else 1.0, lo, hi)
    body = [fr.axes(y_label)]
    legend = []
    for (name, _, color, dashed), y in zip(series, ys_all):
        dash = ' stroke-dasharray="5,4"' if dashed else ""
        body.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.6"{dash} '
                    f'points="{_points(fr, x, np.clip(y, lo, hi))}"><title>{esc(name)}</title></polyline>')
        legend.append((name, color))
    return _svg(body, legend, title)


def stacked_chart(xs: Values, layers: list[tuple[str, Values, str]], y_label: str,
                  overlay: tuple[str, Values, str] | None = None, title: str = "") -> str:
    """SVG stacked areas (e.g. each daemon's admitted rate), optionally a line on top (the quota)."""
    x = np.asarray(xs, dtype=float)
    stack = np.zeros_like(x)
    tops = []
    for _, ys, _ in layers:
        y = np.nan_to_num(np.asarray(ys, dtype=float), nan=0.0)
        tops.append((stack.copy(), stack + y))
        stack = stack + y
    hi = float(np.nanmax(stack)) if stack.size else 1.0
    if overlay is not None:
        ov = np.asarray(overlay[1], dtype=float)
        if np.isfinite(ov).any():
            hi = max(hi, float(np.nanmax(ov[np.isfinite(ov)])))
    fr = Frame(float(x.min()) if x.size else 0.0, float(x.max()) if x.size else 1.0, 0.0, hi * 1.05 or 1.0)
    body = [fr.axes(y_label)]
    legend = []
    for (name, _, color), (lo_y, hi_y) in zip(layers, tops):
        px = fr.x(x)
        up = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, fr.y(hi_y)))
        down = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px[::-1], fr.y(lo_y)[::-1]))
        body.append(f'<path class="area" data-daemon="{esc(name)}" d="M{up} L{down} Z" fill="{color}" '
                    f'fill-opacity="0.85" stroke="none"><title>{esc(name)}</title></path>')
        legend.append((name, color))
    if overlay is not None:
        name, ys, color = overlay
        body.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" '
                    f'stroke-dasharray="6,3" points="{_points(fr, x, np.asarray(ys, dtype=float))}">'
                    f'<title>{esc(name)}</title></polyline>')
        legend.append((name, color))
    return _svg(body, legend, title)


def _svg(body: list[str], legend: list[tuple[str, str]], title: str) -> str:
    leg = "".join(f'<span class="key"><i style="background:{c}"></i>{esc(n)}</span>' for n, c in legend)
    cap = f"<figcaption>{esc(title)}</figcaption>" if title else ""
    return (f'<figure class="chart">{cap}<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" '
            f'width="{W}" height="{H}" role="img">{"".join(body)}</svg><div class="legend">{leg}</div></figure>')


def table(df: pd.DataFrame, columns: list[tuple[str, str]], max_rows: int = 50) -> str:
    """HTML table; columns: (field, header)."""
    if df is None or len(df) == 0:
        return '<p class="muted">none</p>'
    head = "".join(f"<th>{esc(h)}</th>" for _, h in columns)
    rows = []
    for _, r in df.head(max_rows).iterrows():
        rows.append("<tr>" + "".join(f"<td>{esc(fmt(r.get(c)) if not isinstance(r.get(c), str) else r.get(c))}</td>"
                                     for c, _ in columns) + "</tr>")
    more = f'<p class="muted">{len(df) - max_rows} more rows in the Parquet tables</p>' if len(df) > max_rows else ""
    return f'<table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>{more}'


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1180px;
color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 6px}.muted{color:#777}.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:130px}
.card b{display:block;font-size:18px}.card span{color:#666;font-size:12px}
table{border-collapse:collapse;margin:6px 0;font-size:12.5px}td,th{border:1px solid #ddd;padding:3px 7px;
text-align:right;white-space:nowrap}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
figure.chart{margin:8px 8px 8px 0;display:inline-block;vertical-align:top;width:575px}\
figcaption{font-weight:600;font-size:13px}
svg .plot{fill:#fff;stroke:#ccc}svg .grid{stroke:#eee}svg text{font-size:10.5px;fill:#555}
svg .yl{text-anchor:end}svg .yt{font-weight:600}
.legend{font-size:11.5px}summary{cursor:pointer;color:#444}.key{margin-right:10px;white-space:nowrap}\
.key i{display:inline-block;width:10px;
height:10px;margin-right:4px;vertical-align:middle}.bad{color:#b00020}.group{border-top:2px solid #eee;margin-top:20px}
"""


def _span_text(span: dict[str, Any]) -> str:
    """First and last tick as UTC times: the header's tick count covers every daemon's reports,
    a group's count only the ticks it had figures in, so it can be smaller."""
    first, last = span.get("first_s"), span.get("last_s")
    if first is None or last is None or not (math.isfinite(first) and math.isfinite(last)):
        return "no reports"
    return f"{time_label(first, last - first)} to {time_label(last, last - first)} UTC"


def _card(label: str, value: Any, bad: bool = False) -> str:
    return f'<div class="card"><b class="{"bad" if bad else ""}">{esc(fmt(value))}</b><span>{esc(label)}</span></div>'


def _most_lost_first(kv: tuple[str, int]) -> int:
    return -kv[1]


def render_report(summary: dict[str, Any], chart_ticks: pd.DataFrame, chart_shares: pd.DataFrame, worst: pd.DataFrame,
                  conv: pd.DataFrame, delay_ticks: pd.DataFrame, daemons: pd.DataFrame, charted: list[str]) -> str:
    """The whole page from the summary and the (already small) chart tables."""
    s = summary
    colors = daemon_colors(list(s["daemons"]) + (list(chart_shares["daemon"].unique()) if len(chart_shares) else []))
    dmg = s["damage"]
    inp = s["input"]
    loss: dict[str, Any] = s["loss"]
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>rgd fairness report</title>"
           f"<style>{CSS}</style></head><body>",
           "<h1>rgd fairness report</h1>",
           f'<p class="muted">{esc(s["source"])} &middot; {esc(s["span"]["ticks"])} ticks of {esc(s["grid_ms"])} ms '
           f'from the first report to the last ({esc(_span_text(s["span"]))}) '
           f'&middot; {len(s["daemons"])} daemons &middot; {len(s["groups"])} groups</p>']
    dims_all = [d for g in s["groups"].values() for d in g["dims"].values()]
    worst_over = max((d.get("overshoot_ratio_max") or 0 for d in dims_all), default=0)
    jains = [d.get("jain_mean") for d in dims_all if d.get("jain_mean") is not None]
    out.append('<div class="cards">' + "".join([
        _card("group rows", inp["group_rows"]), _card("receipts", inp["receipts"]),
        _card("segments", inp["segments"]),
        _card("worst overshoot (x quota)", worst_over, worst_over > 0.05),
        _card("mean Jain index", float(np.mean(jains)) if jains else None),
        _card("reports lost", loss["lost"], loss["lost"] > 0),
        _card("loss ratio", loss["ratio"]),
        _card("report delay p50 ms", s["delay_ms"]["p50"]), _card("report delay p99 ms", s["delay_ms"]["p99"]),
        _card("staleness p99 ms", s["staleness_ms"]["p99"]),
        _card("damaged segments", dmg["segments_damaged"], dmg["segments_damaged"] > 0),
    ]) + "</div>")
    out.append(_accounting_section(s))
    # damage
    out.append("<h2>Log damage</h2>")
    out.append(f'<p>{dmg["corrupt_regions"]} corrupt regions ({dmg["bytes_skipped"]} bytes skipped), '
               f'{dmg["torn_tail_bytes"]} torn-tail bytes, {dmg["frames_lost_in_segments"]} frames lost inside '
               f'segments and {dmg["frames_lost_between_segments"]} between them, {dmg["bad_payloads"]} reports '
               f'that do not parse, {dmg["segments_skipped"]} segments skipped.</p>')
    if dmg["problems"]:
        out.append("<ul>" + "".join(f"<li><code>{esc(p)}</code></li>" for p in dmg["problems"][:30]) + "</ul>")
    # per group charts
    out.append("<h2>Charted groups</h2>")
    out.append(f'<p class="muted">{len(charted)} groups with the largest fair error or overshoot; every group is in '
               "the Parquet tables.</p>")
    out.append(HOW_TO_READ)
    for gname in charted:
        ct = chart_ticks[chart_ticks["group"] == gname] if len(chart_ticks) else chart_ticks
        if ct is None or len(ct) == 0:
            continue
        dims = sorted(ct["dim"].unique(), key=lambda d: ("messages" not in d, d))
        dim = dims[0]
        ct = ct[ct["dim"] == dim].sort_values("time_s")
        out.append(f'<div class="group"><h3>{esc(gname)} &middot; {esc(dim)}</h3>')
        x = ct["time_s"].to_numpy()
        out.append(line_chart(x, [("quota", ct["quota"], QUOTA_COLOR, True),
                                  ("admitted", ct["admitted"], "#4e79a7", False),
                                  ("demand", ct["demand"], "#bab0ac", True)], f"{dim}/s",
                              title="Quota vs admitted"))
        sh = chart_shares[(chart_shares["group"] == gname) & (chart_shares["dim"] == dim)] \
            if len(chart_shares) else chart_shares
        if sh is not None and len(sh):
            top = sh.groupby("daemon")["admitted"].sum().sort_values(ascending=False)
            keep = list(top.index[:8])
            piv = sh.assign(d=np.where(sh["daemon"].isin(keep), sh["daemon"], "others")) \
                .pivot_table(index="time_s", columns="d", values="admitted", aggfunc="sum").fillna(0).sort_index()
            # In name order, so the layers stack the same way in every group.
            order = sorted(d for d in keep if d in piv.columns) + (["others"] if "others" in piv.columns else [])
            layers = [(d, piv[d].to_numpy(), colors.get(d, OTHERS_COLOR)) for d in order]
            qx = ct.set_index("time_s")["quota"].reindex(piv.index, method="nearest")
            out.append(stacked_chart(piv.index.to_numpy(), layers, f"{dim}/s", ("quota", qx.to_numpy(), QUOTA_COLOR),
                                     title="Admitted by daemon (stacked)"))
        top_y = max(1.0, float(np.nanmax(ct[["jain", "fair_error", "overshoot_ratio_max"]].to_numpy(dtype=float),
                                         initial=0.0)))
        # The axis starts a little below 0, so a line that stays at 0 (no overshoot) is drawn
        # above the plot's frame instead of on it.
        out.append(line_chart(x, [("Jain index", ct["jain"], "#59a14f", False),
                                  ("fair error (x quota)", ct["fair_error"], "#f28e2b", False),
                                  ("max overshoot (x quota)", ct["overshoot_ratio_max"], QUOTA_COLOR, True)],
                              "index", y_min=-0.04 * top_y, y_max=top_y, title="Fairness"))
        wg = worst[(worst["group"] == gname) & (worst["dim"] == dim)].head(5) if len(worst) else worst
        if wg is not None and len(wg):
            wg = wg.assign(when=[time_label(t, 0) for t in wg["time_s"]])
            out.append("<p><b>Worst moments</b></p>" + table(wg, [
                ("when", "time (UTC)"), ("quota", "quota/s"), ("admitted", "admitted/s"), ("demand", "demand/s"),
                ("overshoot_ratio", "overshoot"), ("fair_error", "fair error"), ("jain", "Jain"),
                ("n_present", "daemons"), ("daemon", "farthest daemon")]))
        cg = conv[(conv["group"] == gname) & (conv["dim"] == dim)] if len(conv) else conv
        if cg is not None and len(cg):
            done = int(cg["converged"].sum())
            out.append(f'<p>Convergence: after {len(cg)} events (the start, a daemon joining or leaving, or '
                       f'demand moving the fair split by over {fmt(s["options"].get("shift_threshold", 0.1))} of '
                       f'the quota), {done} converged: fair error and overshoot both within '
                       f'{fmt(s["options"].get("tolerance", 0.05))} of the quota for '
                       f'{esc(s["options"].get("hold_ticks", 3))} ticks in a row; '
                       f'median {fmt(cg[cg["converged"]]["seconds"].median())} s, '
                       f'max {fmt(cg[cg["converged"]]["seconds"].max())} s. '
                       f'{len(cg) - done} did not: the next event came first, or the run ended.</p>')
        out.append("</div>")
    # receipts
    out.append("<h2>Reports: loss, delay, staleness</h2>")
    out.append(f'<p>{loss["lost"]} of {loss["expected"]} reports lost between first and last heard '
               f'(ratio {fmt(loss["ratio"])}), {loss["duplicates"]} duplicates.</p>')
    out.append('<p><b>Delay</b> is the time from a report\'s publish (the publisher\'s clock) to its arrival at a '
               'receiving daemon (the receiver\'s clock, as logged with the receipt): the topic\'s delivery time, '
               'plus any clock skew between the two hosts. The receiver folds what arrived within one react '
               'interval (a twentieth of a tick) after that. <b>Staleness</b> is the age of the newest report from '
               'a publisher just before the next one arrives (how old the receiver\'s view of that daemon got): '
               'up to about a tick while every tick\'s report arrives (less where early reports come between '
               'ticks), more where reports were suppressed or lost.</p>')
    out.append(f'<p>Over all receipts: delay mean {fmt(s["delay_ms"]["mean"])} ms, median (p50) '
               f'{fmt(s["delay_ms"]["p50"])}, p99 {fmt(s["delay_ms"]["p99"])}, max {fmt(s["delay_ms"]["max"])}; '
               f'staleness median {fmt(s["staleness_ms"]["p50"])} ms, p99 {fmt(s["staleness_ms"]["p99"])}, '
               f'max {fmt(s["staleness_ms"]["max"])}. The charts show, per tick, the mean and the max delay of that '
               'tick\'s receipts, and the largest staleness.</p>')
    if delay_ticks is not None and len(delay_ticks):
        dt = delay_ticks.groupby("bucket").agg(n=("n", "sum"), s=("delay_sum", "sum"), mx=("delay_max", "max"),
                                               st=("stale_max", "max")).reset_index()
        step = max(1, len(dt) // 300)
        dt = dt.assign(b=dt["bucket"] // step).groupby("b").agg(bucket=("bucket", "min"), n=("n", "sum"),
                                                               s=("s", "sum"), mx=("mx", "max"), st=("st", "max"))
        xs = dt["bucket"].to_numpy() * s["grid_ms"] / 1000.0
        # Two charts: delay is milliseconds, staleness about a tick; on one axis delay is flat.
        out.append(line_chart(xs, [("mean delay", (dt["s"] / dt["n"]).to_numpy(), "#4e79a7", False),
                                   ("max delay", dt["mx"].to_numpy(), "#f28e2b", True)], "delay ms",
                              title="Report delay, per tick"))
        out.append(line_chart(xs, [("max staleness", dt["st"].to_numpy(), "#76b7b2", False)], "staleness ms",
                              title="Report staleness, per tick"))
    publisher_rows: list[tuple[str, int]] = sorted(loss["by_publisher"].items(), key=_most_lost_first)
    by_pub = pd.DataFrame(publisher_rows, columns=["daemon", "lost"])
    receiver_rows: list[tuple[str, int]] = sorted(loss["by_receiver"].items(), key=_most_lost_first)
    by_recv = pd.DataFrame(receiver_rows, columns=["daemon", "lost"])
    out.append("<h3>Lost by publisher</h3>" + table(by_pub, [("daemon", "publisher"), ("lost", "lost")], 20))
    out.append("<h3>Lost by receiver</h3>" + table(by_recv, [("daemon", "receiver"), ("lost", "lost")], 20))
    # groups overview
    rows = []
    for gname, g in sorted(s["groups"].items()):
        for dim, d in sorted(g["dims"].items()):
            rows.append({"group": gname, "dim": dim, **{k: v for k, v in d.items() if k != "convergence"},
                         "conv_median": d["convergence"]["median_s"], "conv_events": d["convergence"]["events"],
                         "admitted_total": g.get("totals", {}).get(f"{dim}_admitted")})
    out.append(f"<h2>All groups</h2><details><summary>{len(rows)} rows: one per group and dimension with a "
               "quota</summary>")
    out.append(table(pd.DataFrame(rows), [
        ("group", "group"), ("dim", "dimension"), ("ticks", "ticks measured"), ("quota_mean", "quota/s"),
        ("admitted_mean", "admitted/s"), ("demand_mean", "demand/s"), ("admitted_total", "admitted total"),
        ("overshoot_ratio_max", "max overshoot"), ("ticks_over_quota", "ticks over"),
        ("utilization_mean", "utilization"), ("jain_mean", "Jain mean"), ("jain_min", "Jain min"),
        ("fair_error_mean", "fair error"), ("conv_events", "events"), ("conv_median", "conv. median s")],
        max_rows=500))
    out.append("</details>")
    events = ", ".join(f"{n} {e}" for e, n in sorted((s.get("membership_events") or {}).items())) or "none"
    timings = ", ".join(f"{k} {fmt(v)} s" for k, v in (s.get("timings_s") or {}).items()) or "-"
    def names(key: str) -> str:
        return ", ".join(s.get(key, [])) or "none"

    out.append(f'<h2>Run</h2><p class="muted">Membership events: {esc(events)}. Daemons stopped (a clean '
               f'shutdown: leaving report, final accounting): {esc(names("daemons_stopped"))}. Crashed or '
               f'killed: {esc(names("daemons_crashed"))}. Evicted by peers after falling silent: '
               f'{esc(names("daemons_evicted"))}. Report stages: {esc(timings)}.</p>')
    out.append("</body></html>")
    return "\n".join(out)


HOW_TO_READ = (
    '<p class="muted">Per tick and group: <b>admitted</b> is what all daemons let through, <b>demand</b> what '
    'brokers asked for (admitted + throttled), the <b>quota</b> (red, dashed, on every chart) the group\'s '
    'cluster-wide limit. A daemon\'s <b>fair share</b> is its max-min fair part of the quota: nobody gets more '
    'than it asks for, the rest is split equally. <b>Fair error</b> is the worst daemon\'s distance from its fair '
    'share, as a fraction of the quota (0 = every daemon got its share). <b>Overshoot</b> is how far the cluster '
    'admitted beyond the quota, as a fraction of it. The <b>Jain index</b> of the daemons\' admitted/fair ratios '
    'is 1 when each got its fair share. Each daemon has one colour on the whole page.</p>')


def _accounting_section(s: dict[str, Any]) -> str:
    """Where the totals come from, and what they may be missing (summary "accounting")."""
    acct = s.get("accounting") or {}
    daemons = acct.get("daemons", {})
    out = ["<h2>Accounting</h2>"]
    if acct.get("source") == "tick accounting":
        out.append("<p>Totals are the daemons' own tick accounting: every message each daemon's limiter "
                   "answered, logged once per tick whether or not a report was published, so they equal what "
                   "brokers were told.</p>")
    elif acct.get("source") == "published reports only":
        out.append('<p class="bad">These logs carry no tick accounting (written by an older rgd): the totals '
                   "cover published reports only. Ticks whose report was suppressed or lost are missing from "
                   "them; the per-tick rates fill those ticks with the last reported figures.</p>")
    else:
        out.append(f'<p class="bad">Mixed logs: the totals of {esc(", ".join(acct.get("daemons_published_only", [])))} '
                   "cover published reports only (no tick accounting in their logs); the other daemons' totals "
                   "are their tick accounting.</p>")
    rows = []
    for name, d in sorted(daemons.items()):
        if d.get("source") != "tick accounting":
            rows.append(f"<li>{esc(name)}: published reports only</li>")
            continue
        line = f"{esc(name)}: {d['ended']}"
        if d.get("crashes"):
            when = datetime.fromtimestamp(d["last_collect_ms"] / 1000.0, tz=UTC).strftime("%H:%M:%S.%f")[:-3]
            line = (f'<span class="bad">{esc(name)}: crashed (its log ends without a final accounting frame); what '
                    f"it admitted after {when} UTC, its last accounting, is not in these totals (at most one "
                    f"tick)</span>")
        if d.get("missing_frames"):
            line += (f'; <span class="bad">{d["missing_frames"]} accounting frames lost from its log, holding '
                     f'{d["missing_admitted_messages"]} admitted messages not in these totals</span>')
        rows.append(f"<li>{line}</li>")
    if rows:
        out.append("<ul>" + "".join(rows) + "</ul>")
    return "".join(out)


__all__ = [
    "CSS",
    "DAEMON_PALETTE",
    "HOW_TO_READ",
    "OTHERS_COLOR",
    "PAD_B",
    "PAD_L",
    "PAD_R",
    "PAD_T",
    "PALETTE",
    "QUOTA_COLOR",
    "Frame",
    "H",
    "W",
    "daemon_colors",
    "esc",
    "fmt",
    "line_chart",
    "nice_ticks",
    "render_report",
    "stacked_chart",
    "table",
    "time_label"
]
