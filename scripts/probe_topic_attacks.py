"""Probe: crafted usage reports published on the topic of 3 live daemons.

    python scripts/probe_topic_attacks.py                  # signed and unsigned clusters
    python scripts/probe_topic_attacks.py --modes signed --attacks replay,huge_report

Starts a broker (pulsar-lite, on 127.0.0.1) and, per mode, 3 daemons sharing
group `probe` (100 msgs/s) with 50 acquires/s offered to each (150/s in all),
then runs each attack for `--seconds` while the load runs, publishing crafted
bytes with pulsar-client on the usage topic:

  replay         a 4th daemon's genuine reports (signed with the cluster's key in
                 signed mode), captured while it ran, replayed in order after it left
  impersonate    a report as live daemon d1 with sequence 2^62 saying d1 is idle
  forged_leave   `leaving` reports as d1 and d2 (huge sequences), every 0.5 s
  sybil_burst    10,000 made-up daemon ids, one report each claiming demand, at once
  sybil_demand   20 made-up ids reporting 100/s of demand every second
  huge_report    one report with 100,000 group entries, every second
  absurd_rate    2^53 messages admitted over a 1 ms tick, every second

In signed mode (the DaemonSet's default) the attacker has no key: only `replay`
carries valid signatures. Per attack it prints admission per whole second summed
over the daemons (at most quota + 10 % = 110; and at least 90: with 150/s offered, less means
shares were stolen), acquire latency p99 and max over all daemons (counted from when each ask
was due), the members the daemons' /readyz listed, RSS before and after, and
rgd_reports_rejected_total's growth by reason (admission from the attack's start:
the load runs 4 s before it; latency over the whole load); then PASS or FAIL (admission
90..110 in every second, p99 <= 50 ms, RSS growth <= 20 MB per daemon, the attack
visible in a metric or rejected). The exit status is the signed rows' verdict
(the deployed default); unsigned rows show what anyone who can publish to the
topic can do without signing. `--source DIR` runs the daemons from another
checkout (before/after). Every loop ends at a deadline; everything it starts
is stopped.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import pulsar  # noqa: E402
from fault_probe import AcquireLoad, LoadFigures, rss_mb, write_groups  # noqa: E402

from rgd.devtools.daemon_process import DaemonProcess  # noqa: E402
from rgd.transport.embedded_broker import start_or_join  # noqa: E402
from rgd.wire.usage_report_pb2 import UsageReport  # noqa: E402

MP = multiprocessing.get_context("spawn")
QUOTA = 100
WARMUP = 4.0  # seconds of load before each attack: shares have settled when it starts
PER_DAEMON = 50.0
IDS = ("d1", "d2", "d3")
KEYS = "k1:probe-cluster-secret-0123456789abcdef\n"
ATTACKS = ("replay", "impersonate", "forged_leave", "sybil_burst", "sybil_demand", "huge_report", "absurd_rate")


def now_ms() -> int:
    return int(time.time() * 1000)


def crafted(daemon_id: str, sequence: int, incarnation: int = 1, demand: int = 0, admitted: int = 0,
            tick_ms: int = 1000, leaving: bool = False) -> bytes:
    """A report as a daemon would send it for group `probe`."""
    r = UsageReport(daemon_id=daemon_id, sequence=sequence, incarnation=incarnation, publish_time_ms=now_ms(),
                    tick_ms=tick_ms, leaving=leaving)
    if not leaving:
        g = r.groups.add(group="probe", namespaces=["probe/ns"])
        g.publish.admitted_messages = admitted
        g.publish.throttled_messages = demand
        g.publish.limit_messages = QUOTA
        g.publish.quota_messages = QUOTA
        g.publish.limit_bytes = g.publish.quota_bytes = -1.0
        for kind in (g.dispatch, g.replication):
            kind.limit_messages = kind.limit_bytes = kind.quota_messages = kind.quota_bytes = -1.0
    return r.SerializeToString()


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def with_sequence(data: bytes, sequence: int) -> bytes:
    """A serialized report with its sequence replaced: protobuf keeps the last value of
    a repeated scalar field, so appending field 2 is enough (no re-serializing 100k entries
    in this process, whose CPU would show up as the daemons' latency)."""
    return data + b"\x10" + varint(sequence)


def huge_report(entries: int) -> bytes:
    """One report with `entries` lean group entries (a name and a demand each), ~1.4 MB."""
    r = UsageReport(daemon_id="bloat", sequence=1, incarnation=1, publish_time_ms=now_ms(), tick_ms=1000)
    for i in range(entries):
        r.groups.add(group=f"x{i:06d}").publish.throttled_messages = 100
    return r.SerializeToString()


def metrics_text(url: str) -> str:
    """/metrics, waiting up to 60 s for a daemon that is stalled (the "before" code)."""
    deadline = time.time() + 55
    while True:
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
                return resp.read().decode()
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)


def rejected(url: str) -> Counter:
    out: Counter = Counter()
    for line in metrics_text(url).splitlines():
        if line.startswith("rgd_reports_rejected_total{"):
            reason = line.split('reason="')[1].split('"')[0]
            out[reason] += float(line.rsplit(" ", 1)[1])
    return out


def members(url: str) -> int:
    with urllib.request.urlopen(url + "/readyz", timeout=5) as resp:
        return len(json.loads(resp.read())["members"])


def attack(broker_url: str, topic: str, name: str, start_at: float, until: float,
           captured: list[tuple[bytes, dict[str, str]]], ready) -> None:
    """The attacker (a child process): craft, wait for `start_at`, publish until `until`."""
    client = pulsar.Client(broker_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True,
                                      max_pending_messages=20000)

    def send(data: bytes, properties: dict[str, str] | None = None) -> None:
        producer.send_async(data, None, properties=properties or {})

    huge = huge_report(100_000) if name == "huge_report" else b""
    sybils = [crafted(f"sybil-{i:05d}", 1, demand=100) for i in range(10_000)] if name == "sybil_burst" else []
    ready.set()
    time.sleep(max(0.0, start_at - time.time()))
    seq = int(time.time())
    forged_incarnation = 2**62  # newer than any real one (start time in ms)
    if name == "replay":
        step = max(0.05, (until - time.time()) / max(1, len(captured)))
        for data, props in captured:
            if time.time() >= until:
                break
            send(data, props)
            time.sleep(step)
    elif name == "impersonate":
        send(crafted("d1", 2**62, incarnation=forged_incarnation, demand=0))
    elif name == "forged_leave":
        while time.time() < until:
            seq += 1
            for victim in ("d1", "d2"):
                send(crafted(victim, 2**62 + seq, incarnation=forged_incarnation, leaving=True))
            time.sleep(0.5)
    elif name == "sybil_burst":
        for data in sybils:
            send(data)
    elif name == "sybil_demand":
        while time.time() < until:
            seq += 1
            for i in range(20):
                send(crafted(f"fake-{i:02d}", seq, demand=100))
            time.sleep(1.0)
    elif name == "huge_report":
        while time.time() < until:
            seq += 1
            send(with_sequence(huge, seq))
            time.sleep(1.0)
    elif name == "absurd_rate":
        while time.time() < until:
            seq += 1
            send(crafted("intruder", seq, admitted=2**53, tick_ms=1))
            time.sleep(1.0)
    producer.flush()
    client.close()


class Probe:
    def __init__(self, broker_url: str, tmp: Path, signed: bool, seconds: float, source: str = "") -> None:
        self.broker_url, self.tmp, self.signed, self.seconds = broker_url, tmp, signed, seconds
        self.source = source
        tag = uuid.uuid4().hex[:8]
        self.topic = f"non-persistent://public/default/usage-probe-{tag}"
        self.config_topic = f"persistent://public/default/config-probe-{tag}"
        self.config = write_groups(tmp / "rgd.yaml", QUOTA)
        (tmp / "keys").write_text(KEYS)
        self.daemons: dict[str, DaemonProcess] = {}
        self.client = pulsar.Client(broker_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))

    def start(self, daemon_id: str) -> DaemonProcess:
        args = ["--pulsar-url", self.broker_url, "--config", str(self.config), "--topic", self.topic,
                "--config-topic", self.config_topic, "--log-dir", str(self.tmp / "logs" / daemon_id),
                "--data-dir", str(self.tmp / "data")]
        if self.signed:
            args += ["--report-hmac-keys-file", str(self.tmp / "keys")]
        d = DaemonProcess(daemon_id, args, log_path=self.tmp / f"{daemon_id}.log")
        here = os.getcwd()
        if self.source:
            os.chdir(self.source)  # `python -m` puts the working directory first on the path
        try:
            d.start()
        finally:
            os.chdir(here)
        self.daemons[daemon_id] = d
        return d

    def stop(self) -> None:
        for d in self.daemons.values():
            d.stop()
        self.client.close()

    # -- attacks (each bounded by `until`) ---------------------------------------------------

    def capture_departed(self) -> list[tuple[bytes, dict[str, str]]]:
        """Run a 4th daemon with load for a while, capture its reports, stop it (it leaves)."""
        spy = self.client.subscribe(self.topic, f"spy-{uuid.uuid4().hex[:6]}",
                                    consumer_type=pulsar.ConsumerType.Exclusive)
        d4 = self.start("d4")
        d4.wait_ready(60)
        AcquireLoad("127.0.0.1", d4.port, "probe/ns", clients=1, rate=PER_DAEMON).run(self.seconds + 2)
        d4.stop()
        captured = []
        deadline = time.time() + 5
        while time.time() < deadline:
            try:
                msg = spy.receive(200)
            except Exception:  # pulsar's timeout
                break
            r = UsageReport.FromString(msg.data())
            if r.daemon_id == "d4" and not r.leaving:
                captured.append((msg.data(), dict(msg.properties())))
        spy.close()
        del self.daemons["d4"]
        return captured

    def run(self, name: str, captured: list) -> dict:
        loads = [AcquireLoad("127.0.0.1", self.daemons[d].port, "probe/ns", clients=1, rate=PER_DAEMON) for d in IDS]
        rss0 = {d: rss_mb(self.daemons[d].process.pid) for d in IDS}
        rej0 = [rejected(self.daemons[d].url) for d in IDS]
        seen_members: list[int] = []
        # The attacker is its own process (crafting and sending 10k messages would hold this
        # process's GIL and show up as the daemons' latency); it starts 1 s into the load.
        ready = MP.Event()
        started = time.time() + 3.0
        attack_at = started + WARMUP
        attacker = MP.Process(target=attack, args=(self.broker_url, self.topic, name, attack_at,
                                                   attack_at + self.seconds - 1.0, captured, ready))
        attacker.start()
        ready.wait(30)
        time.sleep(max(0.0, started - time.time()))
        threads = [ld.start(WARMUP + self.seconds) for ld in loads]
        while any(t.is_alive() for t in threads) and time.time() < attack_at + self.seconds + 30:
            try:
                seen_members.append(max(members(self.daemons[d].url) for d in IDS))
            except OSError:
                pass
            time.sleep(0.5)
        for t in threads:
            t.join(30)
        attacker.join(60)
        if attacker.is_alive():
            attacker.kill()
        figures = LoadFigures()
        for ld in loads:
            figures.latencies_ms += ld.figures.latencies_ms
            figures.admitted_per_second.update(ld.figures.admitted_per_second)
            figures.errors += ld.figures.errors
            figures.requests += ld.figures.requests
        rej = Counter()
        for d, before in zip(IDS, rej0):
            try:
                after = rejected(self.daemons[d].url)
            except OSError:  # stalled for a minute: say so, keep measuring the others
                rej["(/metrics unanswered 60 s)"] += 1
                continue
            for reason in after:
                if after[reason] > before.get(reason, 0):
                    rej[reason] += after[reason] - before.get(reason, 0)
        rss1 = {d: rss_mb(self.daemons[d].process.pid) for d in IDS}
        return {"figures": figures, "rejected": rej, "members": max(seen_members, default=0), "from": int(attack_at),
                "rss": (max(rss0.values()), max(rss1.values()), max(rss1[d] - rss0[d] for d in IDS))}


def report_row(mode: str, name: str, out: dict) -> bool:
    f: LoadFigures = out["figures"]
    # Whole seconds from the attack's start (the load ran WARMUP seconds before it), the
    # last, partial, one left out.
    secs = [f.admitted_per_second[t] for t in sorted(f.admitted_per_second)[:-1] if t >= out["from"]]
    worst, least = max(secs, default=0), min(secs, default=0)
    p99 = f.percentile(0.99)
    rss0, rss1, growth = out["rss"]
    rej = ", ".join(f"{k} {int(v)}" for k, v in sorted(out["rejected"].items())) or "none"
    good = (least >= QUOTA * 0.9 and worst <= QUOTA * 1.1 and p99 <= 50 and growth <= 20 and f.errors == 0
            and (sum(out["rejected"].values()) > 0 or out["members"] > len(IDS)))
    print(f"{mode:8s} {name:13s} admitted/s {least:3d}..{worst:3d} (quota {QUOTA}: 90..110); "
          f"acquire p99 {p99:6.1f} ms, max {max(f.latencies_ms, default=float('nan')):7.1f} ms, "
          f"{f.errors} errors; members seen <= {out['members']}; RSS {rss0:.0f} -> {rss1:.0f} MB "
          f"(+{growth:.0f}); rejected: {rej}  {'PASS' if good else 'FAIL'}", flush=True)
    print(f"{'':22s} admitted per second: {' '.join(str(x) for x in secs)}", flush=True)
    return good


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="signed,unsigned", help="signed, unsigned or both (comma-separated)")
    ap.add_argument("--attacks", default=",".join(ATTACKS), help="comma-separated, of: " + ", ".join(ATTACKS))
    ap.add_argument("--seconds", type=float, default=10.0, help="load per attack (the attack runs within it)")
    ap.add_argument("--settle", type=float, default=6.0, help="seconds between attacks (TTL eviction)")
    ap.add_argument("--source", default="", help="run the daemons from this checkout (before/after)")
    args = ap.parse_args(argv)
    attacks = [a for a in args.attacks.split(",") if a]
    unknown = set(attacks) - set(ATTACKS)
    if unknown:
        ap.error(f"unknown attacks {sorted(unknown)}; choose from {', '.join(ATTACKS)}")
    seconds = min(args.seconds, 60.0)
    print(f"# python scripts/{Path(__file__).name} {' '.join(argv if argv is not None else sys.argv[1:])}",
          flush=True)
    rows: list[tuple[str, bool]] = []
    verdicts: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="rgd-probe-topic-") as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "broker").mkdir()
        broker = start_or_join(tmp / "broker")
        source = str(Path(args.source).resolve()) if args.source else ""
        if source:
            os.environ["PYTHONPATH"] = source  # the daemons' rgd; this process keeps its own
        try:
            for mode in [m for m in args.modes.split(",") if m]:
                work = tmp / mode
                work.mkdir()
                probe = Probe(broker.url, work, mode == "signed", seconds, source)
                try:
                    for d in IDS:
                        probe.start(d)
                    for d in IDS:
                        probe.daemons[d].wait_ready(90)
                    AcquireLoad("127.0.0.1", probe.daemons["d1"].port, "probe/ns", clients=1, rate=PER_DAEMON).run(3)
                    captured = probe.capture_departed() if "replay" in attacks else []
                    if "replay" in attacks:
                        time.sleep(args.settle)
                    for name in attacks:
                        out = probe.run(name, captured)
                        ok = report_row(mode, name, out)
                        rows.append((mode, ok))
                        verdicts[mode] = verdicts.get(mode, True) and ok
                        time.sleep(args.settle)
                finally:
                    probe.stop()
        finally:
            broker.stop()
    # Signed is the deployed default and must hold; unsigned rows show what anyone who can
    # publish to the topic can do (docs/reliability.md), so they are reported, not required.
    print(f"signed: {'PASS' if verdicts.get('signed', True) else 'FAIL'}; unsigned: "
          f"{sum(not ok for m, ok in rows if m == 'unsigned')} of {sum(m == 'unsigned' for m, _ in rows)} rows "
          "fail (no signature: expected for impersonation and forged leaves)")
    return 0 if verdicts.get("signed", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())
