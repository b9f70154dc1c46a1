"""`python -m sim SCENARIO... [--strategy NAME ...] [--out DIR] [--log-dir DIR]`, `python -m sim scale`,
and `python -m sim fuzz --count N --seed S [--strategy NAME ...] [--out DIR] [--jobs J] [--hindsight]`.

SCENARIO is a built-in name (see sim/scenarios/), a YAML file, or `all` (every
built-in). The comparison table goes to stdout; --out DIR also writes
results.json and results.md. `scale` runs PIP-82's sizing instead (sim/scale.py);
`fuzz` draws random scenarios within documented bounds and checks the targets
(sim/fuzz.py), writing every failing case as a scenario file.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rgd.quota.calculator import STRATEGIES
from sim.engine import run
from sim.metrics import evaluate
from sim.scenario import Scenario, ScenarioError, builtin_names, load
from sim.table import markdown, summary, to_json
from sim.usage_logs import UsageLogUnavailable, open_logs

STRATEGY_ORDER = ["rgd", "pulsar", "doorman-proportional", "doorman-fair", "static"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sim",
        description="Simulate rgd daemons and compare quota strategies (or `scale` for PIP-82's sizing, "
                    "or `fuzz` for random scenarios: python -m sim fuzz --help).",
    )
    p.add_argument("scenarios", nargs="+", metavar="SCENARIO",
                   help=f"built-in name ({', '.join(builtin_names())}), a YAML file, `all`, `scale`, "
                        "or `fuzz` (its own options: python -m sim fuzz --help)")
    p.add_argument("--strategy", action="append", choices=sorted(STRATEGIES), metavar="NAME",
                   help=f"strategy to run (repeatable; default: all of {', '.join(STRATEGY_ORDER)})")
    p.add_argument("--out", metavar="DIR", help="also write results.json and results.md here")
    p.add_argument("--log-dir", metavar="DIR",
                   help="write each simulated daemon's usage log here (rgd's log format), per scenario and strategy")
    p.add_argument("--seed", type=int, help="override every scenario's seed")
    scale = p.add_argument_group("scale mode")
    scale.add_argument("--daemons", type=int, default=100)
    scale.add_argument("--groups", type=int, default=100_000)
    scale.add_argument("--spread", type=int, default=5, help="daemons each group is active on")
    scale.add_argument("--ticks", type=int, default=8)
    return p


def _scale(args: argparse.Namespace) -> int:
    from sim.scale import ScaleSpec, run_scale
    from sim.scale import markdown as scale_markdown

    spec = ScaleSpec(daemons=args.daemons, groups=args.groups, spread=args.spread, ticks=args.ticks,
                     seed=args.seed if args.seed is not None else 1)
    if not (1 <= spec.spread <= spec.daemons and spec.groups >= 1 and spec.ticks >= 2):
        print("scale: need 1 <= --spread <= --daemons, --groups >= 1, --ticks >= 2", file=sys.stderr)
        return 2
    result = run_scale(spec, progress=lambda m: print(f"  {m}", file=sys.stderr))
    text = scale_markdown(result)
    print(text)
    if args.out:
        import json
        from dataclasses import asdict

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "scale.json").write_text(json.dumps(asdict(result), indent=2))
        (out / "scale.md").write_text(text)
    return 0


def _fuzz_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sim fuzz",
        description="Draw random scenarios within the bounds in sim/README.md, run every strategy on each, "
                    "print the distribution of convergence, overshoot, utilization and Jain per strategy "
                    "and the targets as pass/fail lines; write every case the first strategy fails as a "
                    "scenario file (replay: python -m sim FILE).",
    )
    p.add_argument("--count", type=int, default=100, help="scenarios to draw (default 100)")
    p.add_argument("--seed", type=int, default=1, help="fuzz seed: scenario i of seed S is always the same")
    p.add_argument("--first", type=int, default=0, help="index of the first scenario (default 0)")
    p.add_argument("--strategy", action="append", choices=sorted(STRATEGIES), metavar="NAME",
                   help=f"strategy to run (repeatable; default: all of {', '.join(STRATEGY_ORDER)}); "
                        "failing cases are written for the first")
    p.add_argument("--hindsight", action="store_true",
                   help="add a reference row: every daemon admits the lesser of its arrivals and its ideal share "
                        "of the tick before (no delay, no loss; replayed from the same runs, sim/hindsight.py): "
                        "what of the targets is beyond anything that learns demand after the fact")
    p.add_argument("--out", metavar="DIR", default="sim-fuzz",
                   help="where failing cases (DIR/failing/*.yaml), fuzz.md and fuzz.json go (default sim-fuzz)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    return p


def _fuzz(argv: list[str]) -> int:
    import json
    from dataclasses import asdict

    from sim.fuzz import HINDSIGHT, failures, run_fuzz, summarize, write_failure

    args = _fuzz_parser().parse_args(argv)
    if args.count < 1 or args.jobs < 1 or args.first < 0:
        print("fuzz: need --count >= 1, --jobs >= 1, --first >= 0", file=sys.stderr)
        return 2
    strategies = list(args.strategy or STRATEGY_ORDER) + ([HINDSIGHT] if args.hindsight else [])

    def progress(done: int, total: int) -> None:
        if done == total or done % 25 == 0:
            print(f"  {done}/{total} scenarios", file=sys.stderr)

    report = run_fuzz(args.seed, args.count, strategies, jobs=args.jobs, first=args.first, progress=progress)
    out = Path(args.out)
    failing_dir = out / "failing"
    failing_dir.mkdir(parents=True, exist_ok=True)
    written = []
    judged = strategies[0]
    by_case: dict[str, dict[str, list[str]]] = {}
    for c in report.cases:
        broken = failures(c)
        if broken:
            by_case.setdefault(c.scenario, {})[c.strategy] = broken
    for name, broken in sorted(by_case.items()):
        if judged in broken:
            index = int(name.rsplit("-", 1)[1])
            written.append(write_failure(failing_dir, args.seed, index, broken))
            report.failing[name] = broken[judged]
    text = summarize(report)
    text += (f"\n\n{len(written)} case(s) failing for {judged} written to {failing_dir}/ "
             f"(replay one: python -m sim {failing_dir}/NAME.yaml --strategy {judged})\n")
    print(text)
    (out / "fuzz.md").write_text(text)
    (out / "fuzz.json").write_text(json.dumps(
        {"seed": args.seed, "count": args.count, "first": args.first, "strategies": strategies,
         "wall_seconds": report.wall_seconds, "jobs": args.jobs, "failing": report.failing,
         "cases": [asdict(c) for c in report.cases]},
        indent=1, default=str, allow_nan=True) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fuzz"]:
        return _fuzz(argv[1:])
    args = _parser().parse_args(argv)
    if args.scenarios == ["scale"]:
        return _scale(args)
    if "scale" in args.scenarios:
        print("`scale` runs on its own: python -m sim scale", file=sys.stderr)
        return 2
    names: list[str] = []
    for s in args.scenarios:
        names.extend(builtin_names() if s == "all" else [s])
    try:
        scenarios: list[Scenario] = [load(n) for n in names]
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.seed is not None:
        from dataclasses import replace

        scenarios = [replace(sc, seed=args.seed) for sc in scenarios]
    strategies = args.strategy or STRATEGY_ORDER
    results = []
    started = time.perf_counter()
    for sc in scenarios:
        for strategy in strategies:
            try:
                log = open_logs(args.log_dir, sc.name, strategy) if args.log_dir else None
            except UsageLogUnavailable as exc:
                print(f"error: --log-dir: {exc}", file=sys.stderr)
                return 2
            try:
                results.append(evaluate(run(sc, strategy, log=log)))
            except ScenarioError as exc:
                print(f"error: {sc.name}: {exc}", file=sys.stderr)
                return 2
    descriptions = {sc.name: sc.description for sc in scenarios}
    text = markdown(results, descriptions) + "\n" + summary(results) + "\n"
    print(text)
    print(f"({len(results)} runs in {time.perf_counter() - started:.1f} s)", file=sys.stderr)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.md").write_text(text)
        (out / "results.json").write_text(to_json(results, descriptions, {"strategies": strategies}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
