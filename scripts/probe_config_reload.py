"""Probe: acquire latency and admission while a 10,000-group config file reloads repeatedly.

    python scripts/probe_config_reload.py --groups 10000 --reloads 8

Starts one daemon (embedded broker) on 127.0.0.1 with a config of `--groups`
groups plus the probe's own group (quota `--quota` msgs/s), drives closed-loop
acquires, and rewrites the file `--reloads` times, `--every` seconds apart,
alternating two contents of the same size (so mtime+size alone would not tell
them apart within a second). Prints acquire p50/p99/max without and with the
reloads, the worst whole second of admission against the quota, RSS, and how
many reloads the daemon counted. `--source DIR` runs the daemon from another
checkout (e.g. the code before a change) for a before/after comparison.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fault_probe import AcquireLoad, metric, rss_mb, write_groups  # noqa: E402

from rgd.devtools.daemon_process import DaemonProcess  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--reloads", type=int, default=8, help="file rewrites (bounded: at most 100)")
    ap.add_argument("--every", type=float, default=1.5, help="seconds between rewrites")
    ap.add_argument("--quota", type=int, default=200, help="the probe group's msgs/s")
    ap.add_argument("--baseline", type=float, default=5.0, help="seconds of load without reloads")
    ap.add_argument("--source", default="", help="run the daemon from this checkout (before/after)")
    args = ap.parse_args(argv)
    reloads = min(args.reloads, 100)
    if args.source:
        os.environ["PYTHONPATH"] = str(Path(args.source).resolve())
        os.chdir(args.source)  # `python -m` puts the working directory first on the path
    with tempfile.TemporaryDirectory(prefix="rgd-probe-config-") as tmp:
        cfg = write_groups(Path(tmp) / "rgd.yaml", args.quota, args.groups, salt=0)
        print(f"config: {args.groups} groups, {cfg.stat().st_size / 1024:.0f} KB")
        d = DaemonProcess("probe", ["--config", str(cfg), "--data-dir", f"{tmp}/data", "--log-dir", f"{tmp}/log"],
                          log_path=Path(tmp) / "daemon.log")
        d.start()
        try:
            d.wait_ready(90)
            load = AcquireLoad("127.0.0.1", d.port, "probe/ns")
            load.run(3.0)  # warm-up: drains the bucket, the share follows demand
            base = load.run(args.baseline)
            rss_before = rss_mb(d.process.pid)
            ok_before = metric(d.url, "rgd_config_reloads_total", default=0.0)
            worker = load.start(reloads * args.every + 2.0)
            for i in range(reloads):
                time.sleep(args.every)
                write_groups(cfg, args.quota, args.groups, salt=(i + 1) % 2)
            worker.join(60)
            during = load.figures
            time.sleep(max(2.0, args.every))
            rss_after = rss_mb(d.process.pid)
            reloaded = metric(d.url, "rgd_config_reloads_total", default=0.0) - ok_before
        finally:
            d.stop()
    limit = args.quota * 1.1
    worst = max(during.whole_seconds(), default=0)
    print(f"acquire latency without reloads: p50 {base.percentile(0.5):.1f} ms, p99 {base.percentile(0.99):.1f} ms, "
          f"max {max(base.latencies_ms, default=float('nan')):.1f} ms ({len(base.latencies_ms)} asks)")
    print(f"acquire latency during {reloads} reloads: p50 {during.percentile(0.5):.1f} ms, "
          f"p99 {during.percentile(0.99):.1f} ms, max {max(during.latencies_ms, default=float('nan')):.1f} ms "
          f"({len(during.latencies_ms)} asks, {during.errors} errors)")
    print(f"admitted per whole second during reloads: max {worst} (quota {args.quota}, limit +10 % {limit:.0f})")
    print(f"reloads counted by the daemon (rgd_config_reloads_total): {reloaded:.0f} of {reloads}")
    print(f"RSS: {rss_before:.0f} MB before the reloads, {rss_after:.0f} MB after")
    good = (during.percentile(0.99) <= 50 and worst <= limit and during.errors == 0 and reloaded >= reloads)
    print("PASS" if good else "FAIL")
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
