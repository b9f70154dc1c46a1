"""Probe: the usage log's disk fills up (a real tmpfs), then space returns.

    sudo python scripts/probe_disk_full.py --segments 4096 67108864

Needs root (it mounts a small tmpfs for daemon a's `--log-dir` and unmounts it
at the end). For each `--segments` size: starts daemons a and b (a's log on the
tmpfs, b's elsewhere; both on an embedded broker), drives acquires at a, fills
the tmpfs to ENOSPC for `--hold` seconds, then frees it. Prints, per size:
acquire latency and admission per second against the quota during the fault;
whether a's ticks and its receipts of b's reports went on; what /readyz and
rgd_usage_log_failing said; how long after space returned the log wrote again;
a's log lines about the fault and tracebacks; RSS. `--source DIR` runs the
daemons from another checkout (before/after).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fault_probe import AcquireLoad, metric, rss_mb, write_groups  # noqa: E402

from rgd.devtools.daemon_process import DaemonProcess  # noqa: E402

TICK = 0.1  # short, so the log fills the last free page of a full disk within a second or two


def readyz(url: str) -> dict:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=2) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read() or b"{}")


def fill(directory: Path) -> Path:
    """Write until the file system says ENOSPC; returns the filler file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (65536, 4096, 1):  # down to the last byte, partial pages included
            chunk = b"\0" * size
            while True:
                try:
                    fh.write(chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return filler


def run_once(segment_bytes: int, args: argparse.Namespace, tmp: Path) -> bool:
    mnt = tmp / f"tmpfs-{segment_bytes}"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.tmpfs_mb}m", "tmpfs", str(mnt)], check=True)
    daemons: list[DaemonProcess] = []
    try:
        cfg = write_groups(tmp / "rgd.yaml", args.quota)
        common = ["--config", str(cfg), "--data-dir", str(tmp / "data"), "--tick", str(TICK)]
        a = DaemonProcess("a", [*common, "--log-dir", str(mnt / "log"), "--log-segment-bytes", str(segment_bytes)],
                          log_path=tmp / f"a-{segment_bytes}.log")
        b = DaemonProcess("b", [*common, "--log-dir", str(tmp / f"log-b-{segment_bytes}")],
                          log_path=tmp / f"b-{segment_bytes}.log")
        daemons += [a.start(), b.start()]
        a.wait_ready(90)
        b.wait_ready(90)
        load = AcquireLoad("127.0.0.1", a.port, "probe/ns")
        load.run(3.0)
        rss_before = rss_mb(a.process.pid)
        worker = load.start(args.hold + 2.0)
        time.sleep(1.0)
        ticks0, received0 = readyz(a.url).get("ticks", 0), metric(a.url, "rgd_reports_received_total")
        filler = fill(mnt)
        filled_at = time.time()
        seen_degraded, seen_failing = "", 0.0
        while time.time() < filled_at + args.hold:
            doc = readyz(a.url)
            if doc.get("degraded"):
                seen_degraded = doc["degraded"][0]
            seen_failing = max(seen_failing, metric(a.url, "rgd_usage_log_failing", default=0.0))
            time.sleep(0.5)
        ticks1, received1 = readyz(a.url).get("ticks", 0), metric(a.url, "rgd_reports_received_total")
        worker.join(30)
        during = load.figures
        filler.unlink()
        freed = time.time()
        recovered_s = float("nan")
        while time.time() < freed + 15:
            if metric(a.url, "rgd_usage_log_failing", default=0.0) == 0 and not readyz(a.url).get("degraded"):
                recovered_s = time.time() - freed
                break
            time.sleep(0.1)
        rss_after = rss_mb(a.process.pid)
    finally:
        for d in daemons:
            d.stop()
        subprocess.run(["umount", str(mnt)], check=False)
    text = (tmp / f"a-{segment_bytes}.log").read_text(errors="replace")
    lines = [ln for ln in text.splitlines() if "usage log" in ln]
    tracebacks = text.count("Traceback")
    worst = max(during.whole_seconds(), default=0)
    held = filled_at + args.hold - filled_at
    print(f"--- segments of {segment_bytes} bytes, disk full for {held:.0f} s (tmpfs {args.tmpfs_mb} MB)")
    print(f"acquire latency: p50 {during.percentile(0.5):.1f} ms, p99 {during.percentile(0.99):.1f} ms, "
          f"max {max(during.latencies_ms, default=float('nan')):.1f} ms; {during.errors} errors")
    print(f"admitted per whole second: max {worst} (quota {args.quota}, limit +10 % {args.quota * 1.1:.0f})")
    print(f"while full: ticks {ticks1 - ticks0}, reports received from b {received1 - received0:.0f} "
          f"(tick {TICK} s: {held / TICK:.0f} expected)")
    print(f"/readyz degraded: {seen_degraded or 'nothing'}; rgd_usage_log_failing max {seen_failing:.0f}")
    print(f"writing again {recovered_s:.1f} s after space returned")
    print(f"a's log lines about the usage log: {len(lines)}; tracebacks: {tracebacks}")
    for ln in lines[:4]:
        print(f"  | {ln[:160]}")
    print(f"RSS: {rss_before:.0f} MB before, {rss_after:.0f} MB after")
    good = (during.errors == 0 and during.percentile(0.99) <= 50 and worst <= args.quota * 1.1
            and ticks1 - ticks0 >= 0.8 * held / TICK and received1 - received0 >= 0.8 * held / TICK
            and seen_failing == 1
            and bool(seen_degraded) and recovered_s == recovered_s and tracebacks == 0 and len(lines) == 2)
    print("PASS" if good else "FAIL")
    return good


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--segments", type=int, nargs="+", default=[4096, 64 * 1024 * 1024],
                    help="--log-segment-bytes values to try")
    ap.add_argument("--hold", type=float, default=8.0, help="seconds the disk stays full (at most 120)")
    ap.add_argument("--tmpfs-mb", type=int, default=4)
    ap.add_argument("--quota", type=int, default=200)
    ap.add_argument("--source", default="", help="run the daemons from this checkout (before/after)")
    args = ap.parse_args(argv)
    args.hold = min(args.hold, 120.0)
    if os.geteuid() != 0:
        raise SystemExit("this probe mounts a tmpfs and needs root; tests/system/test_disk_faults.py injects "
                         "the same ENOSPC without root")
    if args.source:
        os.environ["PYTHONPATH"] = str(Path(args.source).resolve())
        os.chdir(args.source)  # `python -m` puts the working directory first on the path
    with tempfile.TemporaryDirectory(prefix="rgd-probe-disk-") as tmp:
        results = [run_once(size, args, Path(tmp)) for size in args.segments]
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
