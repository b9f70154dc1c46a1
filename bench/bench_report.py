"""Benchmark of the Spark fairness report: group rows per second, end to end.

Usage:
    python bench/bench_report.py [--scale 1.0] [--daemons 100] [--groups 100] [--ticks 3600]
                                 [--logs DIR] [--out DIR] [--master local[2]] [--baseline-segments 12]

Full size (scale 1): 100 daemons x 100 groups x 3 600 ticks = 36 M group rows
in 360 000 reports, plus ~36 M receipts, ~6.8 GB of segments (generated once
by bench/make_logs.py and reused while the parameters match). Target: at
least 600 000 group rows/s through `run_report` on local[2], end to end
(Spark start-up, decode, analysis, every output written).

Checks (all must hold, or the script exits 1): the admitted and throttled totals
per group equal what the generator wrote (its logs suppress unchanged groups in
the published reports, as daemons do: the totals must come from the tick
accounting); every receipt is counted; the lost reports the report finds
equal the receipts the generator dropped between the first and the last
report each receiver heard from each publisher. A drop before a receiver's
first or after its last report from a publisher leaves no gap in the
sequence numbers it saw, so no reader of the logs can count it: the
generator counts those apart (`receipts_lost` is the total it dropped).

Baseline, in the same run: a plain single-process Python decode of the same
segments with the protobuf library (`rgd.fairness.decode.decode_segment_python`:
frames read and CRC-checked by rgd.usage_log, every report parsed, every group
field touched, no analysis at all). It is timed on a sample of segments spread
over the set and its rate applied to the whole (`--baseline-segments 0` times
all of them); the ratio compares the two rates.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_logs import generate

from rgd.fairness.decode import decode_segment_python

GENERATOR = 2  # bench/make_logs.py's format: logs of an older one are generated again (2: tick accounting)


def ensure_logs(logs: Path, daemons: int, groups: int, ticks: int, segment_mib: int) -> dict:
    """Generate the logs unless `logs` already holds the same set (bench-info.json)."""
    want = {"daemons": daemons, "groups": groups, "ticks": ticks, "segment_mib": segment_mib}
    info_path = logs / "bench-info.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        if info.get("params") == want and info.get("generator") == GENERATOR:
            print(f"[bench] reusing {logs} ({info['bytes'] / 1e9:.2f} GB, {info['segments']} segments)",
                  file=sys.stderr)
            return info
    if logs.exists():
        shutil.rmtree(logs)
    print(f"[bench] generating {daemons} x {groups} x {ticks} into {logs}", file=sys.stderr)
    info = generate(logs, daemons, groups, ticks, segment_bytes=segment_mib << 20)
    info["params"] = want
    info["generator"] = GENERATOR
    info_path.write_text(json.dumps(info))
    return info


def baseline(logs: Path, sample: int) -> dict:
    segs = sorted(p for p in logs.iterdir() if p.suffix == ".seg")
    picked = segs if sample <= 0 or sample >= len(segs) else [segs[i * len(segs) // sample] for i in range(sample)]
    rows = frames = receipts = 0
    nbytes = 0
    t0 = time.perf_counter()
    for p in picked:
        data = p.read_bytes()
        nbytes += len(data)
        f, g, r = decode_segment_python(data, str(p))
        frames, rows, receipts = frames + f, rows + g, receipts + r
    dt = time.perf_counter() - t0
    total_bytes = sum(p.stat().st_size for p in segs)
    return {"segments_timed": len(picked), "segments_total": len(segs), "seconds": round(dt, 2),
            "group_rows": rows, "receipts": receipts, "group_rows_per_s": round(rows / dt, 1),
            "bytes_per_s": round(nbytes / dt, 1),
            "extrapolated_seconds_for_all": round(dt * total_bytes / max(nbytes, 1), 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the 3 600 ticks (e.g. 0.05 for a smoke run)")
    ap.add_argument("--daemons", type=int, default=100)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--ticks", type=int, default=3600)
    ap.add_argument("--segment-mib", type=int, default=32)
    ap.add_argument("--logs", default=os.path.join(tempfile.gettempdir(), "rgd-bench-logs"))
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "rgd-bench-report"))
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--baseline-segments", type=int, default=12, help="0: time the baseline on every segment")
    ap.add_argument("--target", type=float, default=600_000.0)
    a = ap.parse_args(argv)
    ticks = max(1, round(a.ticks * a.scale))
    logs = Path(a.logs) / f"d{a.daemons}-g{a.groups}-t{ticks}"
    info = ensure_logs(logs, a.daemons, a.groups, ticks, a.segment_mib)

    from rgd.fairness.job import run_report

    t0 = time.perf_counter()
    summary = run_report(str(logs), a.out, master=a.master, progress=True)
    wall = time.perf_counter() - t0
    rows = summary["input"]["group_rows"]
    base = baseline(logs, a.baseline_segments)
    result = {
        "command": "python " + " ".join(shlex.quote(x) for x in [sys.argv[0], *(argv or sys.argv[1:])]),
        "master": a.master, "daemons": a.daemons, "groups": a.groups, "ticks": ticks,
        "segments": summary["input"]["segments"], "bytes": summary["input"]["bytes"],
        "group_rows": rows, "receipts": summary["input"]["receipts"],
        "seconds": round(wall, 2), "group_rows_per_s": round(rows / wall, 1),
        "target_rows_per_s": a.target, "meets_target": rows / wall >= a.target,
        "stage_seconds": summary.get("timings_s"),
        "baseline_python_decode": base,
        "speedup_vs_baseline": round((rows / wall) / base["group_rows_per_s"], 2) if base["group_rows_per_s"] else None,
        "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg(),
        "checks": {"admitted_totals_match": all(
            summary["groups"][g]["totals"]["publish_messages_admitted"] == v
            for g, v in info["expected"]["admitted_messages"].items()),
            "throttled_totals_match": all(
            summary["groups"][g]["totals"]["publish_messages_throttled"] == v
            for g, v in info["expected"]["throttled_messages"].items()),
            "accounting_source": summary["accounting"]["source"],
            "receipts_match": summary["input"]["receipts"] == info["receipts"],
            "lost_match": summary["loss"]["lost"] == info["receipts_lost_between_heard"],
            "lost_reports": summary["loss"]["lost"],
            "lost_written_between_heard": info["receipts_lost_between_heard"],
            "lost_written_total": info["receipts_lost"]},
    }
    result["checks_hold"] = all(v for k, v in result["checks"].items() if k.endswith("_match"))
    print(json.dumps(result, indent=2))
    return 0 if result["checks_hold"] else 1


if __name__ == "__main__":
    sys.exit(main())
