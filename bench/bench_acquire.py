"""POST /v1/acquire under load on loopback: rgd against two baselines.

Cases, all driven by the same load generator in the same run:
  trivial-*   (a) bench/trivial_server.py: aiohttp + orjson, answers without limiting
  rgd-*       (b) a real `python -m rgd.cli run` daemon (embedded pulsar-lite broker)
  limits-*    (c) bench/limits_redis_server.py: the `limits` library's async API over
              a redis-server started here (fixed window, one hit per ask)
each with a single ask and a batch of --batch asks; `*-deny` sends single asks to
a group whose limit is 100 msg/s, so almost every ask is refused (429).

Servers (and redis-server, and rgd's broker) run on CPU --server-cpu, the load
generator (wrk, one thread, --connections connections) on --client-cpu. Each
case: --warmup seconds of load that is thrown away, a sanity check of the
answer, then --duration measured seconds. Everything listens on 127.0.0.1 and
every server is stopped at the end, on error too.

Noise: on this shared 2-core VM the same server's req/s moves by up to +-20 %
from one 3 s slice to the next (measured A/A with --ab-control). So a ratio of
two cases is the median of per-round ratios (rounds run A B, B A, ...), and the
single-ask target (rgd >= 0.80 x the trivial handler) is judged by an A/B stage
after the cases: --ab-pairs short alternating slices (median req/s ratio) and
--corun-rounds co-runs, both servers on the same core at once, where any
slowdown hits both (ratio of decisions per CPU-second).

    python bench/bench_acquire.py [--duration 10] [--loop asyncio|uvloop|both] [--out results.json]

This file runs the stages in order; the work is in bench/acquire/: cases
(bodies, cases, results), servers (start, check, measure, stop; rgd through
rgd.devtools.daemon_process), loadgen (wrk or the Python fallback), ratios
(every comparison), report (the printed tables).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # bench/acquire/ beside this file, also when loaded by path (tests)
    sys.path.insert(0, str(HERE))

from acquire.cases import (  # noqa: E402
    BATCH_TARGET,
    BENCH_RATE_BYTES,
    BENCH_RATE_MSGS,
    BENCH_TENANT,
    SINGLE_TARGET,
    TIGHT_RATE_MSGS,
    TIGHT_TENANT,
    Case,
    Result,
    all_cases,
    ask,
    body,
    make_result,
)
from acquire.loadgen import LUA, MAX_PY_REQUESTS, loadgen_main, run_python_loadgen, run_wrk, summary_line  # noqa: E402
from acquire.ratios import best_of_rounds, paired, ratio, ratios, single_ratios  # noqa: E402
from acquire.report import machine_info, print_report  # noqa: E402
from acquire.servers import (  # noqa: E402
    HOST,
    REPO,
    RGD_CONFIG,
    Server,
    Supervised,
    cpu_seconds,
    http,
    kill_group,
    pinned,
    redis_calls,
    redis_client,
    sanity_check,
    start_redis,
    start_server,
    wait_ready,
)

# The names bench/bench_batch.py and the tests use (`import bench_acquire as ba`), kept here.
__all__ = [
    "BATCH_TARGET",
    "BENCH_RATE_BYTES",
    "BENCH_RATE_MSGS",
    "BENCH_TENANT",
    "HERE",
    "HOST",
    "LUA",
    "MAX_PY_REQUESTS",
    "REPO",
    "RGD_CONFIG",
    "SINGLE_TARGET",
    "TIGHT_RATE_MSGS",
    "TIGHT_TENANT",
    "Case",
    "Result",
    "Run",
    "Server",
    "all_cases",
    "ask",
    "best_of_rounds",
    "body",
    "cpu_seconds",
    "http",
    "kill_group",
    "loadgen_main",
    "machine_info",
    "main",
    "make_result",
    "paired",
    "parse_args",
    "pinned",
    "print_report",
    "ratio",
    "ratios",
    "redis_calls",
    "redis_client",
    "run_python_loadgen",
    "run_wrk",
    "sanity_check",
    "single_ratios",
    "start_redis",
    "start_server",
    "summary_line",
    "wait_ready",
]


# -- the run -----------------------------------------------------------------------------

@dataclass
class Run:
    args: argparse.Namespace
    work: Path
    generate: Callable[..., dict[str, Any]]
    generator: str
    results: list[Result] = field(default_factory=list)
    servers: list[Supervised] = field(default_factory=list)
    single: list[dict[str, Any]] = field(default_factory=list)  # the single-ask A/B stage

    def measure(self, case: Case, loop: str, url: str, pids: list[int], round_: int) -> None:
        a = self.args
        body_file = self.work / f"body-{case.name}.json"
        payload = body(case.batch, case.tenant)
        body_file.write_bytes(payload)
        if a.warmup > 0:
            self.generate(url, body_file, a.warmup, a.connections, a.threads, a.client_cpu)
        check = sanity_check(case, url, payload)
        cpu0 = cpu_seconds(pids)
        summary = self.generate(url, body_file, a.duration, a.connections, a.threads, a.client_cpu)
        r = make_result(case, loop, summary, self.generator, check, cpu_seconds(pids) - cpu0)
        r.round = round_
        if summary["requests"] == 0:
            r.check += "; NO REQUEST COMPLETED in the window (latency above --duration?)"
        self.results.append(r)
        print(f"  {r.round}: {r.case:<22} {r.loop:<8} {r.req_per_s:>10,.0f} req/s "
              f"{r.decisions_per_s:>11,.0f} decisions/s"
              f"  p50 {r.p50_ms:7.2f} ms  p99 {r.p99_ms:7.2f} ms  server CPU {r.server_cpu_pct:3.0f}%"
              f"  non-2xx {r.non_2xx}  [{r.check}]", flush=True)

    def run_all(self, cases: list[Case], loops: list[str], redis_server: Server | None,
                redis_port: int | None) -> None:
        """Start every server the cases need (an idle one costs its core nothing
        measurable: an idle rgd daemon uses 0.2 % of a CPU), then run the cases in
        order, each under every loop back to back, --rounds times. The caller stops the servers."""
        a = self.args
        urls: dict[tuple[str, str], tuple[str, list[int]]] = {}
        for kind in dict.fromkeys(c.server for c in cases):
            for loop in loops:
                server, url = start_server(kind, loop, self.work, a.server_cpu, redis_port, a.ready_timeout)
                self.servers.append(server)
                # CPU charged to a case: its server's processes; redis-server's too for limits
                pids = server.cpu_pids() + (redis_server.cpu_pids() if kind == "limits" and redis_server else [])
                urls[(kind, loop)] = (url, pids)
        for round_ in range(1, a.rounds + 1):
            # Odd rounds in list order, even rounds reversed (A B, then B A): a ratio's
            # two cases stay next to each other and a drift in the machine's other load
            # favours neither side over a pair of rounds.
            for case in cases if round_ % 2 else cases[::-1]:
                for loop in loops:
                    self.measure(case, loop, *urls[(case.server, loop)], round_)
        names = {c.name for c in cases}
        if (a.ab_pairs or a.corun_rounds) and {"trivial-single", "rgd-single"} <= names:
            for loop in loops:
                trivial = urls[("trivial", loop)]
                self.single_ab(loop, "rgd", trivial, urls[("rgd", loop)])
                if a.ab_control:  # A/A: the method against itself, to show its own noise
                    server, url = start_server("trivial", loop, self.work, a.server_cpu, None, a.ready_timeout)
                    self.servers.append(server)
                    self.single_ab(loop, "control", trivial, (url, server.cpu_pids()))

    def single_ab(self, loop: str, other: str, trivial: tuple[str, list[int]], tested: tuple[str, list[int]]) -> None:
        """The single-ask target, measured so that machine noise cannot decide it.
        On this shared 2-core VM a server's req/s moves by up to +-20 % from one
        3 s slice to the next (A/A: the trivial server against a copy of itself),
        so two long runs 12 s apart compare two machine states. Two cures:
        - alternate: --ab-pairs pairs of --ab-seconds slices, A B, B A, ...: the
          median of the per-pair req/s ratios;
        - co-run: both servers at the same time on the server CPU, each under its
          own load generator, --corun-rounds times. Whatever slows the machine
          slows both; the ratio of decisions per CPU-second is the ratio with the
          noise cancelled."""
        a = self.args
        body_file = self.work / "body-ab.json"
        payload = body(0, BENCH_TENANT)
        body_file.write_bytes(payload)
        for url, _ in (trivial, tested):
            sanity_check(Case("single", "any", 0, BENCH_TENANT), url, payload)
        sides = {"trivial": trivial, other: tested}
        for pair in range(1, a.ab_pairs + 1):
            order = ["trivial", other] if pair % 2 else [other, "trivial"]
            rps: dict[str, float] = {}
            for name in order:
                summary = self.generate(sides[name][0], body_file, a.ab_seconds, a.connections, a.threads,
                                        a.client_cpu)
                rps[name] = summary["requests"] / (summary["duration_us"] / 1e6) if summary["duration_us"] else 0.0
            row = {"stage": "alternate", "pair": pair, "loop": loop, "other": other,
                   "trivial_req_per_s": round(rps["trivial"], 1), "other_req_per_s": round(rps[other], 1),
                   "ratio": ratio(rps[other], rps["trivial"])}
            self.single.append(row)
            print(f"  alternate {pair}: trivial {rps['trivial']:>8,.0f} req/s  {other} {rps[other]:>8,.0f} req/s"
                  f"  {other}/trivial {row['ratio']}", flush=True)
        for round_ in range(1, a.corun_rounds + 1):
            summaries: dict[str, dict[str, Any]] = {}
            errors: list[BaseException] = []

            # joined below, in this iteration; the defaults bind its loop variables (B023)
            def load(name: str, summaries: dict[str, dict[str, Any]] = summaries,
                     errors: list[BaseException] = errors) -> None:
                try:
                    summaries[name] = self.generate(sides[name][0], body_file, a.corun_duration, a.connections,
                                                    a.threads, a.client_cpu)
                except BaseException as exc:  # re-raised below, in the main thread
                    errors.append(exc)

            cpu0 = {name: cpu_seconds(side[1]) for name, side in sides.items()}
            threads = [threading.Thread(target=load, args=(name,)) for name in sides]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            cpu = {name: cpu_seconds(side[1]) - cpu0[name] for name, side in sides.items()}
            per_cpu = {k: summaries[k]["requests"] / cpu[k] if cpu[k] else 0.0 for k in cpu}
            row = {"stage": "corun", "round": round_, "loop": loop, "other": other,
                   "trivial_req_per_s": round(summaries["trivial"]["requests"] / a.corun_duration, 1),
                   "other_req_per_s": round(summaries[other]["requests"] / a.corun_duration, 1),
                   "trivial_cpu_s": round(cpu["trivial"], 3), "other_cpu_s": round(cpu[other], 3),
                   "ratio": ratio(per_cpu[other], per_cpu["trivial"])}
            self.single.append(row)
            print(f"  co-run {round_}: trivial {row['trivial_req_per_s']:>8,.0f} req/s "
                  f"({row['trivial_cpu_s']:.2f} CPU-s)"
                  f"  {other} {row['other_req_per_s']:>8,.0f} req/s ({row['other_cpu_s']:.2f} CPU-s)"
                  f"  {other}/trivial per CPU-s {row['ratio']}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Benchmark POST /v1/acquire: rgd vs a trivial handler vs limits+Redis")
    p.add_argument("--duration", type=int, default=10, help="measured seconds per case (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up seconds per case, not measured (default 2)")
    p.add_argument("--connections", type=int, default=32, help="concurrent connections (default 32)")
    p.add_argument("--threads", type=int, default=1, help="wrk threads (default 1: wrk has one core)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the whole case list this many times and report each case's best round (default 1)")
    p.add_argument("--ab-pairs", type=int, default=8,
                   help="after the cases: trivial-single and rgd-single alternating in this many pairs of short "
                        "slices, A B, B A, ... (0: skip; default 8)")
    p.add_argument("--ab-seconds", type=int, default=3, help="seconds per alternating slice (default 3)")
    p.add_argument("--corun-rounds", type=int, default=3,
                   help="after the cases: trivial-single and rgd-single together on the server CPU this many times "
                        "(0: skip); their per-CPU-second ratio cancels machine noise (default 3)")
    p.add_argument("--corun-duration", type=int, default=5, help="seconds per co-run round (default 5)")
    p.add_argument("--ab-control", action="store_true",
                   help="also run both A/B stages with a second trivial server in rgd's place (A/A: the "
                        "method's own noise)")
    p.add_argument("--batch", type=int, default=100, help="asks per batch request (default 100)")
    p.add_argument("--loop", choices=["asyncio", "uvloop", "both"], default="uvloop",
                   help="event loop of every server (default uvloop, as rgd ships: event_loop auto)")
    p.add_argument("--cases", default="", help="comma-separated case names (default: all); see --list")
    p.add_argument("--list", action="store_true", help="list the case names and exit")
    p.add_argument("--loadgen", choices=["auto", "wrk", "python"], default="auto",
                   help="auto: wrk if installed, else the Python fallback")
    p.add_argument("--server-cpu", type=int, default=0, help="CPU of the servers, redis-server included")
    p.add_argument("--client-cpu", type=int, default=1, help="CPU of the load generator")
    p.add_argument("--ready-timeout", type=float, default=90.0, help="seconds to wait for a server's /readyz")
    p.add_argument("--out", help="also write the results as JSON to this file")
    p.add_argument("--check-targets", action="store_true", help="exit 1 if a target is not met")
    a = p.parse_args(argv)
    if not 1 <= a.duration <= 600 or not 0 <= a.warmup <= 60:
        p.error("--duration must be 1..600 and --warmup 0..60 (whole seconds, as wrk takes them)")
    if not 1 <= a.connections <= 1000 or not 1 <= a.threads <= a.connections:
        p.error("--connections must be 1..1000 and --threads 1..connections")
    if not 1 <= a.rounds <= 10:
        p.error("--rounds must be 1..10")
    if not 0 <= a.corun_rounds <= 10 or not 1 <= a.corun_duration <= 60:
        p.error("--corun-rounds must be 0..10 and --corun-duration 1..60")
    if not 0 <= a.ab_pairs <= 40 or not 1 <= a.ab_seconds <= 60:
        p.error("--ab-pairs must be 0..40 and --ab-seconds 1..60")
    if not 1 <= a.batch <= 1000:
        p.error("--batch must be 1..1000 (rgd's batch limit)")
    return a


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["loadgen"]:
        return loadgen_main(argv[1:])
    a = parse_args(argv)
    cases = all_cases(a.batch)
    if a.list:
        print("\n".join(c.name for c in cases))
        return 0
    if a.cases:
        wanted = [c.strip() for c in a.cases.split(",") if c.strip()]
        unknown = sorted(set(wanted) - {c.name for c in cases})
        if unknown:
            raise SystemExit(f"--cases: unknown {', '.join(unknown)} (known: {', '.join(c.name for c in cases)})")
        cases = [c for c in cases if c.name in wanted]
    generator = "wrk" if a.loadgen == "wrk" or (a.loadgen == "auto" and shutil.which("wrk")) else "python"
    if generator == "wrk" and not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install wrk), or use --loadgen python")
    if any(c.server == "limits" for c in cases) and not shutil.which("redis-server"):
        raise SystemExit("redis-server is not installed (apt-get install redis-server); or leave out limits-* cases")
    if not shutil.which("taskset") or (os.cpu_count() or 1) < 2:
        print("# note: no taskset or a single CPU: processes are not pinned")
        a.server_cpu = a.client_cpu = None
    loops = ["asyncio", "uvloop"] if a.loop == "both" else [a.loop]
    info = machine_info(generator)
    command = shlex.join(["python", sys.argv[0], *argv])
    print(f"# command: {command}")
    print(f"# machine: nproc={info['nproc']} cpu={info['cpu']!r} python={info['python']} ({info['implementation']}) "
          f"{info['platform']} loadavg={info['loadavg_start'][0]:.2f},{info['loadavg_start'][1]:.2f}")
    print(f"# tools: {info['wrk'] if generator == 'wrk' else 'python load generator (fallback)'}; "
          f"{info['redis_server'].split(' sha=')[0]}; aiohttp {info['aiohttp']}, orjson {info['orjson']}, "
          f"msgspec {info['msgspec']}, "
          f"limits {info['limits']} (coredis {info['coredis']}), uvloop {info['uvloop']}")
    print(f"# load: {generator} {a.threads} thread(s), {a.connections} connections, {a.warmup}s warm-up + "
          f"{a.duration}s per case, {a.rounds} round(s), batch={a.batch}; "
          f"servers (and redis-server) on CPU {a.server_cpu}, "
          f"load generator on CPU {a.client_cpu}; loop(s): {', '.join(loops)}", flush=True)
    gen = run_wrk if generator == "wrk" else run_python_loadgen
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rgd-bench-") as tmp:
        run = Run(a, Path(tmp), gen, generator)
        redis_server: Server | None = None
        try:
            redis_port = None
            if any(c.server == "limits" for c in cases):
                redis_server, redis_port = start_redis(Path(tmp), a.server_cpu)
            run.run_all(cases, loops, redis_server, redis_port)
            if redis_port is not None:
                calls = redis_calls(redis_port)
                if calls == 0:
                    raise RuntimeError("redis-server ran no command: the limits server did not use it")
                print(f"# redis-server ran {calls:,} commands for the limits server", flush=True)
        finally:
            for s in list(run.servers):
                s.stop()
            if redis_server is not None:
                redis_server.stop()
    best = best_of_rounds(run.results)
    all_ratios = {loop: ratios(best, run.results, loop, a.batch) for loop in loops}
    for loop in loops:
        all_ratios[loop].update(single_ratios(run.single, loop))
    print_report(best, all_ratios, loops, a.rounds)
    info["loadavg_end"] = os.getloadavg()
    print(f"\n# wall time {time.monotonic() - started:.0f}s; loadavg at end "
          f"{info['loadavg_end'][0]:.2f},{info['loadavg_end'][1]:.2f} (other work on the machine adds noise)")
    if a.out:
        doc = {"command": command, "machine": info,
               "settings": {k: v for k, v in vars(a).items() if k not in ("list",)},
               "results": [asdict(r) for r in best], "all_rounds": [asdict(r) for r in run.results],
               "single_ab": run.single, "ratios": all_ratios}
        Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"# JSON written to {a.out}")
    missed = [k for rs in all_ratios.values() for k, v in rs.items() if v["met"] is False]
    return 1 if a.check_targets and missed else 0


if __name__ == "__main__":
    sys.exit(main())
