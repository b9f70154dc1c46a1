"""Probe: 2,000 idle and slow connections held open against a daemon with a 1024 fd limit.

    python scripts/probe_idle_connections.py --idle 2000 --nofile 1024

Starts one daemon (embedded broker) on 127.0.0.1 with its descriptor limit
lowered to `--nofile` (RLIMIT_NOFILE, inherited by the daemon process), drives
acquires at a fixed schedule, then opens `--idle` connections that send
nothing (half of them a partial request header, as a slowloris would) and
holds them for `--hold` seconds, asking /metrics and /healthz once a second
on fresh connections meanwhile. Prints acquire latency and errors during the
hold, admission per second against the quota, the /metrics and /healthz
answers, the daemon's shed counters, how many held connections the daemon
closed, and RSS. `--source DIR` runs the daemon from another checkout.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
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


def get_status(url: str, timeout: float = 2.0) -> int:
    """Status of one request on a new connection (0 when none came back)."""
    data = None
    if url.endswith("/v1/acquire"):
        data = b'{"namespace": "probe/ns", "kind": "publish", "messages": 1}'
    try:
        with urllib.request.urlopen(url, data=data, timeout=timeout) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=int, default=2000, help="connections held open (at most 5000)")
    ap.add_argument("--nofile", type=int, default=1024, help="the daemon's RLIMIT_NOFILE")
    ap.add_argument("--hold", type=float, default=12.0, help="seconds the connections are held")
    ap.add_argument("--idle-timeout", type=float, default=5.0, help="the daemon's --http-idle-timeout")
    ap.add_argument("--quota", type=int, default=200)
    ap.add_argument("--source", default="", help="run the daemon from this checkout (before/after)")
    args = ap.parse_args(argv)
    idle = min(args.idle, 5000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = idle + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        raise SystemExit(f"this probe needs {need} descriptors itself; the hard limit is {hard}")
    extra: list[str] = []
    if args.source:
        os.environ["PYTHONPATH"] = str(Path(args.source).resolve())
        os.chdir(args.source)  # `python -m` puts the working directory first on the path
    else:
        extra = ["--http-idle-timeout", str(args.idle_timeout)]
    with tempfile.TemporaryDirectory(prefix="rgd-probe-conns-") as tmp:
        cfg = write_groups(Path(tmp) / "rgd.yaml", args.quota)
        d = DaemonProcess("probe", ["--config", str(cfg), "--data-dir", f"{tmp}/data", "--log-dir", f"{tmp}/log",
                                    *extra], log_path=Path(tmp) / "daemon.log")
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(args.nofile, soft), hard))
        try:
            d.start()  # the daemon (and the broker it starts) inherit the lowered limit
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
        held: list[socket.socket] = []
        try:
            d.wait_ready(90)
            limits = Path(f"/proc/{d.process.pid}/limits").read_text()
            print(f"daemon fd limit: {limits.split('Max open files')[1].split()[0]}")
            load = AcquireLoad("127.0.0.1", d.port, "probe/ns")
            load.run(3.0)
            rss_before = rss_mb(d.process.pid)
            worker = load.start(args.hold + 4.0)
            time.sleep(1.0)
            connect_failed = 0
            for i in range(idle):
                try:
                    s = socket.create_connection(("127.0.0.1", d.port), timeout=2.0)
                    if i % 2:
                        s.sendall(b"POST /v1/acquire HTTP/1.1\r\nHost: probe\r\n")  # never finished
                    held.append(s)
                except OSError:
                    connect_failed += 1
            ops: dict[str, list[int]] = {"/v1/acquire": [], "/metrics": [], "/healthz": []}
            until = time.time() + args.hold
            while time.time() < until:
                for path, answers in ops.items():
                    answers.append(get_status(d.url + path))
                time.sleep(1.0)
            worker.join(30)
            during = load.figures
            closed_by_server = 0
            for s in held:
                s.setblocking(False)
                try:
                    if s.recv(65536) == b"":
                        closed_by_server += 1
                except BlockingIOError:
                    pass
                except OSError:
                    closed_by_server += 1
            rss_after = rss_mb(d.process.pid)
            shed = metric(d.url, "rgd_http_connections_shed_total", default=float("nan"))
            limit = metric(d.url, "rgd_http_connection_limit", default=float("nan"))
        finally:
            for s in held:
                s.close()
            d.stop()
    quota_limit = args.quota * 1.1
    worst = max(during.whole_seconds(), default=0)
    ok_ops = {p: sum(1 for a in answers if a in (200, 429)) for p, answers in ops.items()}
    print(f"held {len(held)} connections ({connect_failed} failed to connect), half with a partial header")
    print(f"acquire latency while held: p50 {during.percentile(0.5):.1f} ms, p99 {during.percentile(0.99):.1f} ms, "
          f"max {max(during.latencies_ms, default=float('nan')):.1f} ms; {during.errors} errors "
          f"of {during.requests} asks")
    print(f"admitted per whole second: max {worst} (quota {args.quota}, limit +10 % {quota_limit:.0f})")
    for p, answers in ops.items():
        print(f"{p} on a new connection: {ok_ops[p]} of {len(answers)} answered (200, or 429 for a denial)")
    print(f"connection limit {limit:.0f}; rgd_http_connections_shed_total {shed:.0f}; "
          f"held connections closed by the daemon: {closed_by_server} of {len(held)}")
    print(f"RSS: {rss_before:.0f} MB before, {rss_after:.0f} MB after")
    good = (during.errors == 0 and during.percentile(0.99) <= 50 and worst <= quota_limit
            and all(ok_ops[p] == len(a) for p, a in ops.items()) and closed_by_server == len(held))
    print("PASS" if good else "FAIL")
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
