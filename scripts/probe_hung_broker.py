"""Probe: the broker freezes (SIGSTOP) with its connections open, then resumes (SIGCONT).

    python scripts/probe_hung_broker.py --freeze 15

A frozen broker is not a dead one: its TCP connections stay up, so the Pulsar
client still says "connected" while nothing is delivered. Starts its own
pulsar-lite broker and 3 daemons on 127.0.0.1 (group `probe`, `--quota` msgs/s,
`--offered` msgs/s spread evenly over the daemons from fixed-rate clients),
freezes the broker for `--freeze` seconds after `--pre` seconds of steady load,
resumes it and watches `--after` seconds more. Prints: admission per whole
second summed over the daemons against the quota; acquire latency during the
fault and the recovery; how long until every daemon's `/readyz` said the broker
does not answer and `rgd_broker_connected` read 0; how long until every daemon's
lease ended (`rgd_lease_valid` 0: it admits nothing, docs/design/protocol.md P4);
peers evicted for silence past their lease (`rgd_evictions_total{reason="ttl"}`,
expected once the freeze outlasts the lease); how long after SIGCONT every daemon
was ready again; RSS. `--source DIR` runs the
daemons from another checkout (e.g. the code before a change).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fault_probe import AcquireLoad, LoadFigures, metric, rss_mb, write_groups  # noqa: E402

from rgd.devtools.daemon_process import DaemonProcess  # noqa: E402
from rgd.transport.embedded_broker import start_or_join  # noqa: E402

DAEMONS = ("a", "b", "c")


def readyz(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=2) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


class Watcher:
    """Samples each daemon's /readyz and a few metrics until stopped (bounded by `seconds`)."""

    def __init__(self, daemons: list[DaemonProcess], seconds: float, every: float = 0.2) -> None:
        self.daemons, self.seconds, self.every = daemons, seconds, every
        self.samples: list[tuple[float, str, int, dict, float, float]] = []  # t, id, status, doc, connected, lease
        self.limits: list[tuple[float, str, float]] = []  # t, id, local msgs/s limit of the probe group
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.time() + self.seconds
        while not self._stop.is_set() and time.time() < deadline:
            for d in self.daemons:
                try:
                    status, doc = readyz(d.url)
                    connected = metric(d.url, "rgd_broker_connected", timeout=2)
                    lease = metric(d.url, "rgd_lease_valid", timeout=2)
                    _, quota = d.get_json("/v1/quota?namespace=probe/ns")
                except (OSError, ValueError, KeyError):
                    continue
                now = time.time()
                self.samples.append((now, d.daemon_id, status, doc, connected, lease))
                limit = quota.get("publish", {}).get("local", {}).get("messages_per_second")
                if limit is not None:
                    self.limits.append((now, d.daemon_id, float(limit)))
            self._stop.wait(self.every)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def limit_sums(self, since: float, until: float) -> list[float]:
        """Per whole second from `since`: the sum over daemons of each one's last limit in it."""
        out = []
        for second in range(int(until - since)):
            last: dict[str, float] = {}
            for t, daemon_id, limit in self.limits:
                if since + second <= t < since + second + 1:
                    last[daemon_id] = limit
            out.append(round(sum(last.values())) if len(last) == len(self.daemons) else -1)
        return out

    def first(self, since: float, until: float, predicate) -> float | None:
        """Seconds from `since` until every daemon had a sample matching `predicate` (None: never)."""
        seen: dict[str, float] = {}
        for t, daemon_id, status, doc, connected, lease in self.samples:
            if since <= t <= until and daemon_id not in seen and predicate(status, doc, connected, lease):
                seen[daemon_id] = t - since
        return max(seen.values()) if len(seen) == len(self.daemons) else None


def merged(loads: list[AcquireLoad]) -> tuple[LoadFigures, list[int]]:
    """All clients' figures together, and admission per whole second summed over daemons."""
    total = LoadFigures()
    per_second: Counter = Counter()
    for load in loads:
        f = load.figures
        total.latencies_ms += f.latencies_ms
        total.errors += f.errors
        total.requests += f.requests
        per_second.update(f.admitted_per_second)
    secs = sorted(per_second)
    return total, [per_second[s] for s in secs[1:-1]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--freeze", type=float, default=15.0, help="seconds the broker stays stopped (at most 120)")
    ap.add_argument("--pre", type=float, default=3.0, help="seconds of measured load before the freeze")
    ap.add_argument("--after", type=float, default=10.0, help="seconds watched after SIGCONT (at most 120)")
    ap.add_argument("--quota", type=int, default=100, help="the probe group's msgs/s")
    ap.add_argument("--offered", type=float, default=150.0, help="msgs/s offered, spread over the 3 daemons")
    ap.add_argument("--tick", type=float, default=1.0)
    ap.add_argument("--show-log", type=int, default=8, help="print the last this many lines of daemon a's log")
    ap.add_argument("--source", default="", help="run the daemons from this checkout (before/after)")
    args = ap.parse_args(argv)
    freeze, after = min(args.freeze, 120.0), min(args.after, 120.0)
    if args.source:
        os.environ["PYTHONPATH"] = str(Path(args.source).resolve())
        os.chdir(args.source)  # `python -m` puts the working directory first on the path
    with tempfile.TemporaryDirectory(prefix="rgd-probe-hung-") as tmp_name:
        tmp = Path(tmp_name)
        broker = start_or_join(tmp / "broker")
        daemons: list[DaemonProcess] = []
        stopped = False
        try:
            cfg = write_groups(tmp / "rgd.yaml", args.quota)
            for name in DAEMONS:
                daemons.append(DaemonProcess(name, [
                    "--pulsar-url", broker.url, "--config", str(cfg), "--tick", str(args.tick),
                    "--data-dir", str(tmp / f"data-{name}"),
                    "--log-dir", str(tmp / f"log-{name}")], log_path=tmp / f"{name}.log").start())
            for d in daemons:
                d.wait_ready(90)
            loads = [AcquireLoad("127.0.0.1", d.port, "probe/ns", clients=1, rate=args.offered / len(daemons))
                     for d in daemons]
            warm = [threading.Thread(target=load.run, args=(4.0,), daemon=True) for load in loads]
            for t in warm:
                t.start()
            for t in warm:
                t.join(30)
            rss_before = {d.daemon_id: rss_mb(d.process.pid) for d in daemons}
            evicted_before = sum(metric(d.url, "rgd_evictions_total", default=0.0) for d in daemons)
            span = args.pre + freeze + after
            watcher = Watcher(daemons, span + 5).start()
            workers = [load.start(span) for load in loads]
            time.sleep(args.pre)
            os.kill(broker.pid, signal.SIGSTOP)
            stopped = True
            frozen_at = time.time()
            time.sleep(freeze)
            os.kill(broker.pid, signal.SIGCONT)
            stopped = False
            resumed_at = time.time()
            for w in workers:
                w.join(span + 30)
            watcher.stop()
            evicted = sum(metric(d.url, "rgd_evictions_total", default=0.0) for d in daemons) - evicted_before
            reconnects = {d.daemon_id: metric(d.url, "rgd_broker_reconnects_total", default=0.0) for d in daemons}
            rss_after = {d.daemon_id: rss_mb(d.process.pid) for d in daemons}
        finally:
            if stopped:
                os.kill(broker.pid, signal.SIGCONT)
            for d in daemons:
                d.stop()
            broker.stop()
        figures, per_second = merged(loads)
        log_lines = {d.daemon_id: (tmp / f"{d.daemon_id}.log").read_text(errors="replace").splitlines()
                     for d in daemons}
    worst = max(per_second, default=0)
    over = sum(1 for n in per_second if n > args.quota * 1.1)
    not_ready = watcher.first(frozen_at, resumed_at, lambda status, doc, c, s: status == 503)
    disconnected = watcher.first(frozen_at, resumed_at, lambda status, doc, c, s: c == 0)
    lease_ended = watcher.first(frozen_at, resumed_at, lambda status, doc, c, lease: lease == 0)
    ready_again = watcher.first(resumed_at, resumed_at + after, lambda status, doc, c, s: status == 200)
    reasons = sorted({str(doc.get("broker_unresponsive")) for t, _, status, doc, _, _ in watcher.samples
                      if frozen_at <= t <= resumed_at and status == 503})

    def secs(x: float | None) -> str:
        return "never" if x is None else f"{x:.1f} s"

    print(f"3 daemons, group of {args.quota} msgs/s, {args.offered:.0f} msgs/s offered; tick {args.tick} s, "
          f"broker frozen {freeze:.0f} s")
    print(f"admitted per whole second (all daemons, {args.pre:.0f} s before, the freeze and {after:.0f} s after): "
          f"max {worst} (quota {args.quota}, limit +10 % {args.quota * 1.1:.0f}); seconds over the limit: {over} "
          f"of {len(per_second)}")
    print(f"  per second: {per_second}")
    print(f"  sum of the daemons' local limits per second from the freeze (-1: not sampled): "
          f"{watcher.limit_sums(frozen_at, resumed_at + after)}")
    print(f"acquire latency: p50 {figures.percentile(0.5):.1f} ms, p99 {figures.percentile(0.99):.1f} ms, "
          f"max {max(figures.latencies_ms, default=float('nan')):.1f} ms ({len(figures.latencies_ms)} asks, "
          f"{figures.errors} errors)")
    print(f"after SIGSTOP: every /readyz 503 after {secs(not_ready)}, every rgd_broker_connected 0 after "
          f"{secs(disconnected)}, every rgd_lease_valid 0 after {secs(lease_ended)}")
    print(f"/readyz broker_unresponsive while frozen: {reasons[:3] or 'nothing'}")
    print(f"peers evicted for silence past their lease (rgd_evictions_total, all daemons): {evicted:.0f}")
    print(f"after SIGCONT: every /readyz 200 after {secs(ready_again)}; sessions opened (rgd_broker_reconnects_total): "
          f"{reconnects}")
    print("RSS MB before -> after: " + ", ".join(
        f"{k} {rss_before[k]:.0f} -> {rss_after[k]:.0f}" for k in rss_before))
    tracebacks = sum(text.count("Traceback") for lines in log_lines.values() for text in lines)
    print(f"log lines per daemon: {({k: len(v) for k, v in log_lines.items()})}; tracebacks: {tracebacks}; a's:")
    for line in log_lines["a"][-args.show_log:] if args.show_log > 0 else []:
        print(f"  | {line[:200]}")
    limit_detect = 3 * args.tick + 1.0
    lease_limit = limit_detect + args.tick  # the lease (3 ticks) from a report up to a tick old, and the polling
    good = (over == 0 and figures.errors == 0 and figures.percentile(0.99) <= 50
            and not_ready is not None and not_ready <= limit_detect
            and disconnected is not None and disconnected <= limit_detect
            and (freeze <= lease_limit or (lease_ended is not None and lease_ended <= lease_limit))
            and ready_again is not None and tracebacks == 0
            and all(rss_after[k] < rss_before[k] + 50 for k in rss_before))
    print("PASS" if good else "FAIL")
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
