"""A cluster of real `rgd run` processes on the test session's broker, for integration tests."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from rgd.devtools.daemon_process import DaemonProcess
from tests.support.live import write_config

# `rgd run` flags of each daemon layout, for tests that must hold in all: one process, the
# brokers' process beside a cluster process (`--cluster-process`), or beside a cluster thread
# (`--cluster-thread`; both in tests/test_cluster_process.py).
CLUSTER_PROCESS = ["--cluster-process"]
CLUSTER_THREAD = ["--cluster-thread"]
LAYOUTS = {"one-process": [], "cluster-process": CLUSTER_PROCESS, "cluster-thread": CLUSTER_THREAD}


@dataclass
class Cluster:
    broker_url: str
    workdir: Path
    quota: float = 300
    tick: float = 1.0
    ttl_ticks: int = 3
    extra: list[str] = field(default_factory=list)
    daemons: dict[str, DaemonProcess] = field(default_factory=dict)

    def __post_init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.topic = f"non-persistent://public/default/usage-{tag}"
        self.config_topic = f"persistent://public/default/config-{tag}"
        self.config = write_config(
            self.workdir / "groups.yaml", {"gold": {"publishRateInMsgs": self.quota}}, tenants={"acme": "gold"}
        )

    def start(self, daemon_id: str, wait: bool = True) -> DaemonProcess:
        d = DaemonProcess(
            daemon_id,
            ["--pulsar-url", self.broker_url, "--config", str(self.config), "--topic", self.topic,
             "--config-topic", self.config_topic, "--tick", str(self.tick), "--ttl-ticks", str(self.ttl_ticks),
             "--log-dir", str(self.workdir / "logs" / daemon_id), "--data-dir", str(self.workdir), *self.extra],
            log_path=self.workdir / f"{daemon_id}.out",
        ).start()
        self.daemons[daemon_id] = d
        if wait:
            d.wait_ready()
        return d

    def start_members(self, *daemon_ids: str) -> None:
        """Start `daemon_ids` together; return once each is ready, holds all the others as
        members, and two ticks more have run (every one has reported to every other)."""
        for daemon_id in daemon_ids:
            self.start(daemon_id, wait=False)
        for daemon_id in daemon_ids:
            self.daemons[daemon_id].wait_ready()
        wait_until(lambda: all(set(self.daemons[d].get_json("/readyz")[1].get("members", ())) == set(daemon_ids)
                               for d in daemon_ids), 15)
        self.wait_ticks(2)

    def stop_all(self) -> None:
        for d in self.daemons.values():
            d.stop()

    def metric(self, daemon_id: str, name: str, **labels: str) -> float:
        with urllib.request.urlopen(self.daemons[daemon_id].url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            m = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
            if not m:
                continue
            have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m.group(2))
        return total

    def ticks(self, daemon_id: str) -> int:
        """The ticks the daemon has run (its /readyz detail)."""
        _, doc = self.daemons[daemon_id].get_json("/readyz")
        return int(doc["ticks"])

    def wait_ticks(self, n: int, timeout: float | None = None) -> None:
        """Until every daemon has run `n` more ticks than now: with n = 2 after the load
        stopped, the tick that was running (it reports the last asks) and a whole idle one."""
        start = {d: self.ticks(d) for d in self.daemons}
        wait_until(lambda: all(self.ticks(d) >= t + n for d, t in start.items()),
                   timeout if timeout is not None else 10 * (n + 1) * self.tick)

    def local_limit(self, daemon_id: str) -> float:
        _, doc = self.daemons[daemon_id].get_json("/v1/quota?namespace=acme/x")
        return doc["publish"]["local"]["messages_per_second"]


def wait_until(predicate, timeout: float, interval: float = 0.1) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout}s")
        time.sleep(interval)
    return time.monotonic() - start
