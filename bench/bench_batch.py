"""Broker-scale decisions: batches, the node-local socket, rgd.client and latency at half load.

One run, one rgd daemon (as shipped: `python -m rgd.cli run`, embedded broker)
pinned to --server-cpu, every load generator pinned to --client-cpu:

1. batch vs single (wrk, TCP): decisions per CPU-second of the daemon (daemon +
   its broker, from /proc) for single asks and for batches of 1000 asks spanning
   10 namespaces and 1000 namespaces; targets >= 1,000,000 and >= 600,000.
2. unix socket vs TCP (bench/raw_load.py, closed loop, the same generator for
   both, alternating): req/s, latency, daemon CPU per request; single and batch.
3. latency at 50 % of the maximum load measured in stage 1 (raw_load.py, open
   loop): p50/p99/p99.9 of single asks (target p99 <= 1 ms) and of batches.
4. rgd.client: the decisions/s one client process sustains (closed loop, many
   concurrent callers), the daemon's decisions per CPU-second under it against
   the raw batch's, and the latency of a call at 10/50/90 % of that rate.

Each figure is printed with its absolute value beside each ratio, after the
command line that made it. Per-CPU-second figures are the robust ones on a
shared machine: other load slows a run down but does not change how much CPU a
decision costs.

With `--baseline REV` stage 1 runs first against the daemon of that revision (`git
archive` into a scratch directory, started there the same way), then against this
tree's, and prints this tree's decisions per CPU-second over the baseline's per case:
one machine, one run, so the ratio holds where absolute figures drift with other load.

    python bench/bench_batch.py [--duration 5] [--baseline REV] [--out results.json] [--check-targets]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_acquire as ba  # noqa: E402  (the benchmark's process, CPU and wrk helpers)

from rgd.transport.embedded_broker import free_port  # noqa: E402

BATCH = 1000
TARGETS = {"batch_10ns": 1_000_000, "batch_1000ns": 600_000}  # decisions per CPU-second of the daemon (issue 44)
SINGLE_P99_TARGET_MS = 1.0
CLIENT_LOADS = (0.10, 0.50, 0.90)

CONFIG = f"""\
# written by bench/bench_batch.py
resourcegroups:
  bench: {{publishRateInMsgs: {ba.BENCH_RATE_MSGS}, publishRateInBytes: {ba.BENCH_RATE_BYTES},
          dispatchRateInMsgs: -1, dispatchRateInBytes: -1}}
tenants:
  bench: bench
"""


def ask(i: int, namespaces: int) -> dict[str, Any]:
    """The i-th ask: `namespaces` namespaces of tenant `bench`, 7 topics each, 1..10 messages of 1 KiB."""
    ns = f"bench/ns{i % namespaces}"
    msgs = 1 + i % 10
    return {"namespace": ns, "kind": "publish", "messages": msgs, "bytes": msgs * 1024,
            "topic": f"persistent://{ns}/t{i % 7}"}


BODIES = {
    "single": lambda: ask(0, 10),
    "batch_10ns": lambda: {"requests": [ask(i, 10) for i in range(BATCH)]},
    "batch_1000ns": lambda: {"requests": [ask(i, 1000) for i in range(BATCH)]},
}
DECISIONS = {"single": 1, "batch_10ns": BATCH, "batch_1000ns": BATCH}


# -- the client's load (a subcommand, so it runs in a process of its own on the client CPU) --

async def _client_load(url: str, duration: float, callers: int, rate: float, window: float) -> dict[str, Any]:
    """Closed loop (rate 0): every caller calls again as soon as answered. Open loop:
    a pacer releases `rate` calls per second to idle callers (through one future
    each, cheaper than a timer per call, so the generator takes as little of the
    process as it can), and a call's latency runs from its release to its answer."""
    from rgd.client import SOURCE_DAEMON, Client

    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    other = {"denied": 0, "not_daemon": 0, "late": 0}
    perf = time.perf_counter
    idle: list[asyncio.Future[float]] = []
    async with Client(url, window=window, connections=8) as client:
        started = perf()
        deadline = started + duration

        async def caller(i: int) -> None:
            ns = f"bench/ns{i % 10}"
            msgs = 1 + i % 10
            topic = f"persistent://{ns}/t{i % 7}"
            acquire, record = client.acquire, latencies.append
            while len(latencies) < 50_000_000:
                if rate > 0:
                    if perf() >= deadline:
                        return
                    gate = loop.create_future()
                    idle.append(gate)
                    t0 = await gate
                else:
                    t0 = perf()
                if t0 >= deadline:
                    return
                answer = await acquire(ns, "publish", msgs, msgs * 1024, topic)
                record(perf() - t0)
                if not answer.allowed:
                    other["denied"] += 1
                if answer.source != SOURCE_DAEMON:
                    other["not_daemon"] += 1

        async def pacer() -> None:
            released = 0
            while True:
                now = perf()
                due = int((min(now, deadline) - started) * rate)
                while released < due and idle:
                    idle.pop().set_result(now)
                    released += 1
                other["late"] = due - released  # calls due that found no idle caller
                if now >= deadline:  # callers still busy see the deadline before they wait again
                    for gate in idle:
                        gate.set_result(now)
                    idle.clear()
                    return
                await asyncio.sleep(0.0002)

        tasks = [caller(i) for i in range(callers)]
        if rate > 0:
            tasks.append(pacer())
        await asyncio.gather(*tasks)
        elapsed = perf() - started
        stats = client.stats
    latencies.sort()

    def pct(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1e3, 3) if latencies else 0.0

    return {"calls": len(latencies), "seconds": round(elapsed, 3), "calls_per_s": round(len(latencies) / elapsed, 1),
            "offered_per_s": rate or None, "requests": stats.requests, "asks_per_request":
            round(stats.asks / stats.requests, 1) if stats.requests else 0, "denied": other["denied"],
            "not_from_daemon": other["not_daemon"], "late": other["late"], "p50_ms": pct(50), "p90_ms": pct(90),
            "p99_ms": pct(99), "p999_ms": pct(99.9)}


def client_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench_batch.py client", description="rgd.client load: closed or open loop")
    p.add_argument("--url", required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--callers", type=int, default=2000)
    p.add_argument("--rate", type=float, default=0.0, help="calls/s over all callers (0: as fast as answered)")
    p.add_argument("--window", type=float, default=0.0005)
    a = p.parse_args(argv)
    if not (a.url.startswith("unix:") or a.url.startswith(f"http://{ba.HOST}:")) or not 0 < a.duration <= 600:
        p.error("loopback or unix URLs only; --duration 0..600")
    import uvloop

    print("BENCH_JSON " + json.dumps(uvloop.run(_client_load(a.url, a.duration, a.callers, a.rate, a.window))),
          flush=True)
    return 0


# -- the run ---------------------------------------------------------------------------------

class Bench:
    def __init__(self, a: argparse.Namespace, work: Path, code: Path | None = None) -> None:
        self.a = a
        self.work = work
        self.code = code  # another revision's tree to run the daemon from (--baseline), else this one
        self.server: ba.Server | None = None
        self.trivial: ba.Server | None = None  # the do-nothing aiohttp handler: the latency floor of this machine
        self.trivial_port = 0
        self.port = 0
        self.sock = work / "rgd.sock"
        self.files: dict[str, Path] = {}
        self.out: dict[str, Any] = {"wrk": [], "transport": [], "latency": [], "client": []}

    def start(self) -> None:
        data = self.work / "rgd"
        data.mkdir()
        (data / "rgd.yaml").write_text(CONFIG)
        self.port = free_port()
        cmd = [sys.executable, "-m", "rgd.cli", "run", "--listen", f"{ba.HOST}:{self.port},unix:{self.sock}",
               "--config", str(data / "rgd.yaml"), "--data-dir", str(data), "--log-dir", str(data / "log"),
               "--event-loop", "uvloop"]
        env = None if self.code is None else {**os.environ, "PYTHONPATH": str(self.code)}
        self.server = ba.Server("rgd", ba.pinned(cmd, self.a.server_cpu), self.work / "rgd.log", env=env,
                                cwd=self.code)
        ba.wait_ready(self.server, f"http://{ba.HOST}:{self.port}/readyz", self.a.ready_timeout)
        self.server.extra_groups.append(int(json.loads((data / "broker.json").read_text())["pid"]))
        self.trivial_port = free_port()
        self.trivial = ba.Server("trivial", ba.pinned([sys.executable, str(HERE / "trivial_server.py"), "--listen",
                                                       f"{ba.HOST}:{self.trivial_port}", "--uvloop"],
                                                      self.a.server_cpu), self.work / "trivial.log")
        ba.wait_ready(self.trivial, f"http://{ba.HOST}:{self.trivial_port}/readyz", self.a.ready_timeout)
        for name, make in BODIES.items():
            path = self.work / f"{name}.json"
            path.write_bytes(json.dumps(make(), separators=(",", ":")).encode())
            self.files[name] = path
            status, _, answer = ba.http("POST", f"http://{ba.HOST}:{self.port}/v1/acquire", path.read_bytes())
            doc = json.loads(answer)
            allowed = [doc] if name == "single" else doc["results"]
            if status != 200 or len(allowed) != DECISIONS[name] or not all(r["allowed"] for r in allowed):
                raise RuntimeError(f"{name}: sanity check failed: {status} {answer[:300]!r}")

    def cpu(self) -> float:
        assert self.server is not None
        return ba.cpu_seconds(self.server.cpu_pids())

    def _measure(self, cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[dict, float]:
        cpu0 = self.cpu()
        out = subprocess.run(ba.pinned(cmd, self.a.client_cpu), capture_output=True, text=True, timeout=timeout,
                             env=env, cwd=ba.REPO)
        cpu = self.cpu() - cpu0
        return ba.summary_line(out, shlex.join(cmd[:3])), cpu

    # 1. wrk: the maximum and the CPU cost per decision
    def wrk_stage(self, rnd: int) -> None:
        url = f"http://{ba.HOST}:{self.port}/v1/acquire"
        for name in BODIES:
            env = {**os.environ, "BENCH_BODY_FILE": str(self.files[name])}
            wrk = ["wrk", "-t", "1", "-c", str(self.a.connections), "--timeout", "10s", "-s", str(ba.LUA), url]
            if self.a.warmup:
                subprocess.run(ba.pinned([*wrk[:5], "-d", f"{self.a.warmup}s", *wrk[5:]], self.a.client_cpu),
                               env=env, capture_output=True, timeout=self.a.warmup + 60)
            s, cpu = self._measure([*wrk[:5], "-d", f"{self.a.duration}s", *wrk[5:]], self.a.duration + 60, env)
            seconds = s["duration_us"] / 1e6
            n = s["requests"]
            row = {"round": rnd, "case": name, "req_per_s": round(n / seconds, 1),
                   "decisions_per_s": round(n * DECISIONS[name] / seconds, 1),
                   "server_cpu_pct": round(100 * cpu / seconds, 1), "cpu_us_per_request": round(cpu / n * 1e6, 1),
                   "decisions_per_cpu_s": round(n * DECISIONS[name] / cpu, 1) if cpu else 0.0,
                   "p50_ms": s["p50_us"] / 1000, "p99_ms": s["p99_us"] / 1000,
                   "errors": s["errors_status"] + s["errors_connect"] + s["errors_read"] + s["errors_timeout"]}
            self.out["wrk"].append(row)
            print(f"  wrk {name:<13} {row['req_per_s']:>9,.0f} req/s {row['decisions_per_s']:>11,.0f} dec/s  "
                  f"server CPU {row['server_cpu_pct']:>3.0f}%  {row['cpu_us_per_request']:>7,.1f} CPU-us/req  "
                  f"{row['decisions_per_cpu_s']:>11,.0f} dec/CPU-s  p50 {row['p50_ms']:.2f} ms  "
                  f"p99 {row['p99_ms']:.2f} ms  errors {row['errors']}", flush=True)

    def raw(self, target: str, body: str, seconds: float, rate: float = 0.0, connections: int | None = None) -> dict:
        cmd = [sys.executable, str(HERE / "raw_load.py"), "--target", target, "--body-file", str(self.files[body]),
               "--duration", str(seconds), "--connections", str(connections or self.a.connections)]
        if rate:
            cmd += ["--rate", f"{rate:.1f}"]
        s, cpu = self._measure(cmd, seconds + 60)
        n = s["requests"]
        s.update(body=body, server_cpu_s=round(cpu, 3), cpu_us_per_request=round(cpu / n * 1e6, 1) if n else 0.0,
                 decisions_per_cpu_s=round(n * DECISIONS[body] / cpu, 1) if cpu else 0.0)
        return s

    # 2. unix socket vs TCP, same generator, alternating
    def transport_stage(self) -> None:
        targets = {"tcp": f"tcp:{ba.HOST}:{self.port}", "unix": f"unix:{self.sock}"}
        for body in ("single", "batch_10ns"):
            for pair in range(self.a.transport_pairs):
                order = ("tcp", "unix") if pair % 2 == 0 else ("unix", "tcp")
                for transport in order:
                    s = self.raw(targets[transport], body, self.a.transport_seconds)
                    s.update(transport=transport, pair=pair)
                    self.out["transport"].append(s)
                    print(f"  {transport:<4} {body:<11} pair {pair}: {s['req_per_s']:>9,.0f} req/s  p50 "
                          f"{s['p50_us'] / 1000:.3f} ms  p99 {s['p99_us'] / 1000:.3f} ms  "
                          f"{s['cpu_us_per_request']:>7,.1f} daemon CPU-us/req", flush=True)

    # 3. latency at half the maximum, and the trivial handler's at the same offered load
    def latency_stage(self) -> None:
        for body in ("single", "batch_10ns"):
            best = max(r["req_per_s"] for r in self.out["wrk"] if r["case"] == body)
            rate = 0.5 * best
            for server, port in (("rgd", self.port), ("trivial", self.trivial_port)):
                s = self.raw(f"tcp:{ba.HOST}:{port}", body, self.a.duration, rate=rate,
                             connections=self.a.latency_connections)
                s.update(server=server, max_req_per_s=best, load=0.5)
                self.out["latency"].append(s)
                print(f"  {server:<7} {body:<11} at 50 % of {best:,.0f} req/s ({rate:,.0f} offered, "
                      f"{s['req_per_s']:,.0f} done): p50 {s['p50_us'] / 1000:.3f} ms  p99 {s['p99_us'] / 1000:.3f} ms"
                      f"  p99.9 {s['p999_us'] / 1000:.3f} ms  max {s['max_us'] / 1000:.3f} ms", flush=True)

    # 4. rgd.client
    def client_stage(self) -> None:
        url = f"http://{ba.HOST}:{self.port}"

        def load(rate: float, seconds: float) -> dict:
            cmd = [sys.executable, str(Path(__file__).resolve()), "client", "--url", url, "--duration", str(seconds),
                   "--callers", str(self.a.client_callers), "--window", str(self.a.client_window)]
            if rate:
                cmd += ["--rate", f"{rate:.1f}"]
            s, cpu = self._measure(cmd, seconds + 120)
            s.update(server_cpu_s=round(cpu, 3),
                     decisions_per_cpu_s=round(s["calls"] / cpu, 1) if cpu else 0.0)
            return s

        top = load(0.0, self.a.duration)
        top.update(load=1.0)
        self.out["client"].append(top)
        print(f"  client max: {top['calls_per_s']:>9,.0f} calls/s ({top['asks_per_request']:.0f} asks per request)  "
              f"daemon {top['decisions_per_cpu_s']:>11,.0f} dec/CPU-s  call p50 {top['p50_ms']:.2f} ms  "
              f"p99 {top['p99_ms']:.2f} ms", flush=True)
        for share in CLIENT_LOADS:
            s = load(share * top["calls_per_s"], self.a.duration)
            s.update(load=share)
            self.out["client"].append(s)
            print(f"  client at {share:>4.0%} ({s['offered_per_s']:>9,.0f} offered, {s['calls_per_s']:>9,.0f} done, "
                  f"{s['asks_per_request']:.0f} asks per request): call p50 {s['p50_ms']:.3f} ms  "
                  f"p99 {s['p99_ms']:.3f} ms  p99.9 {s['p999_ms']:.3f} ms", flush=True)


def run_baseline(a: argparse.Namespace) -> list[dict[str, Any]]:
    """Stage 1 (wrk) against the daemon of revision `a.baseline`, as for this tree: its rows."""
    print(f"# baseline {a.baseline}: 1. batch vs single, wrk", flush=True)
    with tempfile.TemporaryDirectory(prefix="rgd-bench-batch-baseline-") as tmp:
        code = Path(tmp) / "code"
        code.mkdir()
        archive = subprocess.run(["git", "archive", a.baseline], check=True, capture_output=True, cwd=ba.REPO).stdout
        subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
        work = Path(tmp) / "work"
        work.mkdir()
        bench = Bench(a, work, code)
        try:
            bench.start()
            for rnd in range(1, a.rounds + 1):
                bench.wrk_stage(rnd)
        finally:
            for server in (bench.server, bench.trivial):
                if server is not None:
                    server.stop()
    print("# this tree: 1. batch vs single, wrk", flush=True)
    return list(bench.out["wrk"])


def compare_baseline(rev: str, base: list[dict[str, Any]], new: list[dict[str, Any]]) -> dict[str, Any]:
    """Per case, the best round's decisions per CPU-second of each daemon and this tree's over the
    baseline's (> 1: this tree spends less CPU per decision)."""
    out: dict[str, Any] = {"revision": rev}
    for case in DECISIONS:
        b = max((r["decisions_per_cpu_s"] for r in base if r["case"] == case), default=0.0)
        n = max((r["decisions_per_cpu_s"] for r in new if r["case"] == case), default=0.0)
        out[case] = {"baseline": b, "this_tree": n, "ratio": round(n / b, 3) if b else None}
    return out


def summarize(out: dict[str, Any]) -> dict[str, Any]:
    """The figures the issue asks for, ratios beside their absolute numbers."""
    wrk = out["wrk"]
    rounds = sorted({r["round"] for r in wrk})

    def per_round(case: str, key: str) -> list[float]:
        return [next(r[key] for r in wrk if r["round"] == rnd and r["case"] == case) for rnd in rounds]

    fig: dict[str, Any] = {}
    single = per_round("single", "decisions_per_cpu_s")
    fig["single_decisions_per_cpu_s"] = {"per_round": single}
    for case, target in TARGETS.items():
        values = per_round(case, "decisions_per_cpu_s")
        ratios = [v / s for v, s in zip(values, single)]
        fig[f"{case}_decisions_per_cpu_s"] = {"per_round": values, "target": target,
                                              "met": all(v >= target for v in values)}
        fig[f"{case}_over_single_per_cpu_s"] = {"per_round": [round(r, 1) for r in ratios]}
    for body in ("single", "batch_10ns") if out["transport"] else ():
        rows = out["transport"]
        pairs = sorted({r["pair"] for r in rows})
        get = {(r["transport"], r["pair"], r["body"]): r for r in rows}
        for key, label in (("req_per_s", "req_per_s"), ("cpu_us_per_request", "cpu_per_request")):
            ratios = [get[("unix", p, body)][key] / get[("tcp", p, body)][key] for p in pairs
                      if get[("tcp", p, body)][key]]
            fig[f"unix_over_tcp_{body}_{label}"] = {
                "value": round(statistics.median(ratios), 3) if ratios else None,
                "unix": [get[("unix", p, body)][key] for p in pairs],
                "tcp": [get[("tcp", p, body)][key] for p in pairs]}
        for transport in ("tcp", "unix"):
            fig[f"{transport}_{body}_latency_ms"] = {
                "p50": statistics.median(get[(transport, p, body)]["p50_us"] / 1000 for p in pairs),
                "p99": statistics.median(get[(transport, p, body)]["p99_us"] / 1000 for p in pairs)}
    floor = {s["body"]: s for s in out["latency"] if s["server"] == "trivial"}
    for s in out["latency"]:
        if s["server"] != "rgd":
            continue
        entry = {"p50_ms": s["p50_us"] / 1000, "p99_ms": s["p99_us"] / 1000, "p999_ms": s["p999_us"] / 1000,
                 "offered_req_per_s": s["offered_per_s"], "done_req_per_s": s["req_per_s"]}
        base = floor.get(s["body"])
        if base is not None:
            entry["trivial"] = {"p50_ms": base["p50_us"] / 1000, "p99_ms": base["p99_us"] / 1000,
                                "p999_ms": base["p999_us"] / 1000}
        if s["body"] == "single":
            entry.update(target_p99_ms=SINGLE_P99_TARGET_MS, met=entry["p99_ms"] <= SINGLE_P99_TARGET_MS)
        fig[f"{s['body']}_at_half_load"] = entry
    if out["client"]:
        top = out["client"][0]
        raw = max(per_round("batch_10ns", "decisions_per_cpu_s"))
        fig["client_calls_per_s"] = {"value": top["calls_per_s"], "asks_per_request": top["asks_per_request"]}
        fig["client_over_raw_batch_per_cpu_s"] = {"value": round(top["decisions_per_cpu_s"] / raw, 3),
                                                  "client": top["decisions_per_cpu_s"], "raw_batch_10ns": raw}
        for s in out["client"][1:]:
            fig[f"client_call_latency_at_{int(s['load'] * 100)}pct"] = {
                "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"], "p999_ms": s["p999_ms"],
                "calls_per_s": s["calls_per_s"], "asks_per_request": s["asks_per_request"]}
    return fig


def print_summary(fig: dict[str, Any]) -> None:
    print("\n# figures (per-CPU-second: of the daemon process and its broker; ratios beside absolute numbers)")

    def fmt(values: list[float]) -> str:
        return ", ".join(f"{v:,.0f}" for v in values)

    print(f"  single asks                    {fmt(fig['single_decisions_per_cpu_s']['per_round'])} dec/CPU-s")
    for case, target in TARGETS.items():
        f = fig[f"{case}_decisions_per_cpu_s"]
        r = fig[f"{case}_over_single_per_cpu_s"]["per_round"]
        print(f"  {case:<30} {fmt(f['per_round'])} dec/CPU-s = {', '.join(f'{x:.1f}x' for x in r)} single  "
              f"target >= {target:,}  {'MET' if f['met'] else 'BELOW TARGET'}")
    for body in ("single", "batch_10ns") if "unix_over_tcp_single_req_per_s" in fig else ():
        rq = fig[f"unix_over_tcp_{body}_req_per_s"]
        cp = fig[f"unix_over_tcp_{body}_cpu_per_request"]
        lt, lu = fig[f"tcp_{body}_latency_ms"], fig[f"unix_{body}_latency_ms"]
        print(f"  unix/tcp {body:<21} req/s {rq['value']:.2f}x (unix {fmt(rq['unix'])}; tcp {fmt(rq['tcp'])}); "
              f"daemon CPU per request {cp['value']:.2f}x; p50 {lu['p50']:.3f} vs {lt['p50']:.3f} ms, "
              f"p99 {lu['p99']:.3f} vs {lt['p99']:.3f} ms")
    for body in ("single", "batch_10ns"):
        f = fig.get(f"{body}_at_half_load")
        if f:
            verdict = (f"  target p99 <= {f['target_p99_ms']} ms  {'MET' if f['met'] else 'BELOW TARGET'}"
                       if "met" in f else "")
            t = f.get("trivial", {})
            floor = (f"; trivial handler at the same load p50 {t['p50_ms']:.3f}  p99 {t['p99_ms']:.3f}  "
                     f"p99.9 {t['p999_ms']:.3f} ms (p99 {f['p99_ms'] / t['p99_ms']:.2f}x)") if t.get("p99_ms") else ""
            print(f"  {body} at 50 % load ({f['done_req_per_s']:,.0f} req/s): p50 {f['p50_ms']:.3f} ms  "
                  f"p99 {f['p99_ms']:.3f} ms  p99.9 {f['p999_ms']:.3f} ms{verdict}{floor}")
    if "baseline" in fig:
        b = fig["baseline"]
        for case in DECISIONS:
            f = b[case]
            ratio = f"{f['ratio']:.2f}x" if f["ratio"] else "n/a"
            print(f"  {case:<30} this tree {f['this_tree']:,.0f} vs baseline {b['revision']} {f['baseline']:,.0f} "
                  f"dec/CPU-s (best round each) = {ratio}")
    if "client_calls_per_s" in fig:
        c, r = fig["client_calls_per_s"], fig["client_over_raw_batch_per_cpu_s"]
        print(f"  rgd.client, one process        {c['value']:,.0f} decisions/s ({c['asks_per_request']:.0f} asks per "
              f"request); daemon {r['client']:,.0f} dec/CPU-s = {r['value']:.2f}x raw batch_10ns "
              f"({r['raw_batch_10ns']:,.0f})")
        for share in CLIENT_LOADS:
            f = fig[f"client_call_latency_at_{int(share * 100)}pct"]
            print(f"  client call at {share:>4.0%} ({f['calls_per_s']:>8,.0f}/s, "
                  f"{f['asks_per_request']:>4.0f} asks/request)"
                  f": p50 {f['p50_ms']:.3f} ms  p99 {f['p99_ms']:.3f} ms  p99.9 {f['p999_ms']:.3f} ms")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Batches, unix socket vs TCP, rgd.client and latency at half load")
    p.add_argument("--duration", type=int, default=5, help="measured seconds per wrk case, latency run and client "
                                                           "run (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="wrk warm-up seconds per case (default 1)")
    p.add_argument("--rounds", type=int, default=1, help="wrk stage repetitions (default 1)")
    p.add_argument("--connections", type=int, default=32, help="connections for wrk and raw_load (default 32)")
    p.add_argument("--transport-pairs", type=int, default=2, help="unix/TCP alternations per body (default 2)")
    p.add_argument("--transport-seconds", type=float, default=3.0, help="seconds per unix/TCP slice (default 3)")
    p.add_argument("--latency-connections", type=int, default=16, help="open-loop connections (default 16)")
    p.add_argument("--client-callers", type=int, default=2000, help="concurrent rgd.client callers (default 2000)")
    p.add_argument("--client-window", type=float, default=0.0005, help="rgd.client coalescing window, s")
    p.add_argument("--skip", default="", help="comma-separated stages to skip: transport, latency, client")
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--ready-timeout", type=float, default=90.0)
    p.add_argument("--out", help="also write everything as JSON here")
    p.add_argument("--check-targets", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--baseline", metavar="GIT_REV", help="first run stage 1 against the daemon of this revision "
                   "(git archive into a scratch directory) and print this tree's figures over its")
    a = p.parse_args(argv)
    if not 1 <= a.duration <= 120 or not 0 <= a.warmup <= 30 or not 1 <= a.rounds <= 10:
        p.error("--duration 1..120, --warmup 0..30, --rounds 1..10")
    if not 1 <= a.connections <= 1000 or not 1 <= a.client_callers <= 20000 or not 0 <= a.transport_pairs <= 10:
        p.error("--connections 1..1000, --client-callers 1..20000, --transport-pairs 0..10")
    return a


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["client"]:
        return client_main(argv[1:])
    a = parse_args(argv)
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install wrk; scripts/system-deps.sh)")
    if not shutil.which("taskset") or (os.cpu_count() or 1) < 2:
        print("# note: no taskset or a single CPU: processes are not pinned")
        a.server_cpu = a.client_cpu = None
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    command = shlex.join(["python", "bench/bench_batch.py", *argv])
    info = ba.machine_info("wrk")
    print(f"# command: {command}")
    print(f"# machine: nproc={info['nproc']} cpu={info['cpu']!r} python={info['python']} "
          f"loadavg={info['loadavg_start'][0]:.2f},{info['loadavg_start'][1]:.2f}; {info['wrk']}; "
          f"aiohttp {info['aiohttp']}, msgspec {info['msgspec']}, uvloop {info['uvloop']}")
    print(f"# daemon (and its broker) on CPU {a.server_cpu}, load generators on CPU {a.client_cpu}; "
          f"{a.duration}s per case", flush=True)
    started = time.monotonic()
    baseline = run_baseline(a) if a.baseline else None
    with tempfile.TemporaryDirectory(prefix="rgd-bench-batch-") as tmp:
        bench = Bench(a, Path(tmp))
        try:
            bench.start()
            for rnd in range(1, a.rounds + 1):
                print(f"# 1. batch vs single, wrk, round {rnd}", flush=True)
                bench.wrk_stage(rnd)
            if "transport" not in skip and a.transport_pairs:
                print("# 2. unix socket vs TCP (bench/raw_load.py, closed loop, alternating)", flush=True)
                bench.transport_stage()
            if "latency" not in skip:
                print("# 3. latency at 50 % of the maximum from stage 1 (bench/raw_load.py, open loop)", flush=True)
                bench.latency_stage()
            if "client" not in skip:
                print(f"# 4. rgd.client, {a.client_callers} callers in one process, "
                      f"window {a.client_window * 1000:g} ms", flush=True)
                bench.client_stage()
        finally:
            for server in (bench.server, bench.trivial):
                if server is not None:
                    server.stop()
    fig = summarize(bench.out)
    if baseline is not None:
        fig["baseline"] = compare_baseline(a.baseline, baseline, bench.out["wrk"])
    print_summary(fig)
    info["loadavg_end"] = os.getloadavg()
    print(f"\n# wall time {time.monotonic() - started:.0f}s; loadavg at end {info['loadavg_end'][0]:.2f},"
          f"{info['loadavg_end'][1]:.2f}")
    if a.out:
        Path(a.out).write_text(json.dumps({"command": command, "machine": info, "runs": bench.out, "figures": fig},
                                          indent=2) + "\n")
        print(f"# JSON written to {a.out}")
    missed = [k for k, v in fig.items() if isinstance(v, dict) and v.get("met") is False]
    return 1 if a.check_targets and missed else 0


if __name__ == "__main__":
    sys.exit(main())
