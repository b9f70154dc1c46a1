"""What every fault probe measures while its fault lasts, against one real daemon process.

- admission per wall-clock second against the group's quota (the limit under
  test: at most quota + 10 % in every whole second);
- acquire latency from a client on a kept-alive connection (p50, p99, max);
- the daemon's RSS before and after (no unbounded growth);
- a metric or /readyz field that shows the fault.

The probes (scripts/probe_*.py) start the daemon, apply their fault during
`measure`, and print one figure per line with the command that made it.
Everything listens on 127.0.0.1 and every loop ends at a deadline.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["AcquireLoad", "LoadFigures", "metric", "rss_mb", "write_groups"]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def metric(url: str, name: str, timeout: float = 5.0, default: float | None = None) -> float:
    """The sum of `name`'s samples from /metrics; `default` (or KeyError) when it has none."""
    with urllib.request.urlopen(url + "/metrics", timeout=timeout) as resp:
        text = resp.read().decode()
    found = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    if not found:
        if default is None:
            raise KeyError(name)
        return default
    return sum(float(x) for x in found)


def write_groups(path: Path, quota: int, extra_groups: int = 0, salt: int = 0) -> Path:
    """A config with group `probe` (quota msgs/s, namespace probe/ns) and `extra_groups` more."""
    lines = ["resourcegroups:", f"  probe: {{publishRateInMsgs: {quota}}}"]
    lines += [f"  g{i:05d}: {{publishRateInMsgs: {1000 + salt}, dispatchRateInMsgs: 500}}"
              for i in range(extra_groups)]
    lines += ["namespaces:", "  probe/ns: probe"]
    lines += [f"  t{i:05d}/ns: g{i:05d}" for i in range(0, extra_groups, 2)]
    # Written in place, as an editor would (not parsed here: parsing would stall this
    # process's client threads and show up as the daemon's latency).
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class LoadFigures:
    latencies_ms: list[float] = field(default_factory=list)
    admitted_per_second: Counter = field(default_factory=Counter)
    admitted_at: list[float] = field(default_factory=list)  # wall time of each allowed answer
    errors: int = 0
    requests: int = 0

    def percentile(self, q: float) -> float:
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")

    def whole_seconds(self) -> list[int]:
        """Admitted per whole second (the first and last, partial, left out)."""
        secs = sorted(self.admitted_per_second)
        return [self.admitted_per_second[s] for s in secs[1:-1]]


class AcquireLoad:
    """Acquires (one message each) at a fixed schedule from `clients` kept-alive connections.

    Latency counts from when an ask was due, not when it was sent (as wrk2 does): a
    client stuck behind a stalled daemon would otherwise hide the stall by asking less.
    """

    def __init__(self, host: str, port: int, namespace: str, clients: int = 2, rate: float = 200.0,
                 timeout: float = 10.0) -> None:
        self.host, self.port, self.namespace = host, port, namespace
        self.clients, self.timeout = clients, timeout
        self.interval = 1.0 / rate  # per client
        self.figures = LoadFigures()
        self._lock = threading.Lock()

    def _client(self, deadline: float) -> None:
        body = json.dumps({"namespace": self.namespace, "kind": "publish", "messages": 1})
        conn: http.client.HTTPConnection | None = None
        due = time.perf_counter()
        while time.time() < deadline:
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            started, due = due, due + self.interval
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                conn.request("POST", "/v1/acquire", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                doc = json.loads(resp.read())
                ok = resp.status in (200, 429)  # 429: a decision too (denied)
            except (OSError, http.client.HTTPException, ValueError):
                ok, doc = False, {}
                if conn is not None:
                    conn.close()
                conn = None
            elapsed = (time.perf_counter() - started) * 1000
            with self._lock:
                f = self.figures
                f.requests += 1
                if not ok:
                    f.errors += 1
                    continue
                f.latencies_ms.append(elapsed)
                if doc.get("allowed"):
                    at = time.time()
                    f.admitted_per_second[int(at)] += 1
                    f.admitted_at.append(at)
        if conn is not None:
            conn.close()

    def run(self, seconds: float) -> LoadFigures:
        """Drive load for `seconds` (bounded); returns what was measured."""
        self.figures = LoadFigures()
        deadline = time.time() + seconds
        threads = [threading.Thread(target=self._client, args=(deadline,), daemon=True) for _ in range(self.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + self.timeout + 5)
        return self.figures

    def start(self, seconds: float) -> threading.Thread:
        t = threading.Thread(target=self.run, args=(seconds,), daemon=True)
        t.start()
        return t
