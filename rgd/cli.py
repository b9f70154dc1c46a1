"""The `rgd` command: run (one daemon), up (one-machine showcase), report (Spark), whatif (replay)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from rgd import __version__
from rgd.config.settings import (
    FIELDS,
    HELP,
    SETTING_GROUPS,
    STRATEGY_NAMES,
    SettingsError,
    env_name,
    resolve,
    shown_default,
)
from rgd.daemon.lifecycle import configure_logging, run_loop, serve
from rgd.daemon.malloc_tuning import fix_mmap_threshold


def setting_help(name: str) -> str:
    """One setting's `--help` text: what it does, its environment variable, its default."""
    return f"{HELP[name]} [env {env_name(name)}; default: {shown_default(name)}]"


def _add_setting_flags(p: argparse.ArgumentParser) -> None:
    """Every setting as a flag, in the titled groups of SETTING_GROUPS."""
    for group in SETTING_GROUPS:
        section = p.add_argument_group(group.title, group.description)
        for name in group.names:
            flag = "--" + name.replace("_", "-")
            # argparse %-formats help strings (for %(default)s): a literal % must be doubled.
            help_text = setting_help(name).replace("%", "%%")
            if isinstance(FIELDS[name].default, bool):
                section.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None,
                                     help=help_text)
            else:
                section.add_argument(flag, dest=name, default=None, metavar=name.upper(), help=help_text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rgd", description="Cluster-wide rate limits for Pulsar resource groups (PIP-82)."
    )
    parser.add_argument("--version", action="version", version=f"rgd {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("RGD_LOG_LEVEL", "info"),
                        choices=["debug", "info", "warning", "error"], help="log verbosity [env RGD_LOG_LEVEL]")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run one daemon", usage="rgd run [FLAG ...]",
                         description="Run one rgd daemon. Every setting is a flag, an RGD_* environment variable "
                                     "and a key of the config file's `daemon:` section; flags win over the "
                                     "environment, which wins over the file.")
    _add_setting_flags(run)

    up = sub.add_parser("up", help="one-machine showcase: broker, N daemons, skewed load, live table, report")
    up.add_argument("--daemons", type=int, default=3, help="daemon processes to start (default 3)")
    up.add_argument("--duration", type=float, default=0, help="seconds to run (default: until Ctrl-C)")
    up.add_argument("--quota", type=float, default=300, help="publishRateInMsgs of the demo groups (default 300)")
    up.add_argument("--groups", type=int, default=2, help="demo resource groups (default 2)")
    up.add_argument("--tick", type=float, default=1.0, help="tick seconds (default 1)")
    up.add_argument("--workdir", default="rgd-data/up",
                    help="each run writes its logs, broker data and report to WORKDIR/<UTC time>/; "
                         "WORKDIR/latest points at the newest (default rgd-data/up)")
    up.add_argument("--no-report", action="store_true", help="skip the Spark fairness report at the end")
    up.add_argument("--base-port", type=int, default=0, help="first daemon HTTP port (default: any free port)")
    up.add_argument("--strategy", default="rgd", help="quota strategy of the daemons (default rgd)")

    rep = sub.add_parser(
        "report", help="Spark fairness report over usage logs", description=REPORT_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    rep.add_argument("path", metavar="PATH_OR_URI", nargs="?",
                     help="log directory, archive directory or fsspec URI (s3://, gs://: see below)")
    rep.add_argument("--out", help="output directory or URI (Parquet, summary.json, report.html)")
    rep.add_argument("--master", default=None, help="Spark master URL (default local[*]), e.g. spark://host:7077")
    rep.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                     help="a Spark setting, e.g. spark.executor.memory=4g (repeatable; applied last)")
    rep.add_argument("--executor-requirements", action="store_true",
                     help="print the pip requirements an executor's Python needs (this driver's versions) and exit")

    what = sub.add_parser(
        "whatif", help="replay usage logs through the simulator under proposed quotas",
        description=WHATIF_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    what.add_argument("logs", metavar="LOGS", nargs="?",
                      help="log directory, archive directory or fsspec URI (s3://, gs://), as for rgd report")
    what.add_argument("--out", metavar="DIR", help="where whatif.html and whatif.json go")
    what.add_argument("--set", dest="sets", action="append", default=[], metavar="GROUP.FIELD=VALUE",
                      help="a proposed quota, e.g. tenant-a.publishRateInMsgs=500 (-1 = unlimited; repeatable)")
    what.add_argument("--strategy", default="rgd", choices=STRATEGY_NAMES, metavar="NAME",
                      help=f"quota strategy the simulated daemons run ({', '.join(STRATEGY_NAMES)}; default rgd)")
    return parser


WHATIF_DESCRIPTION = """\
Replay usage logs through the simulator (sim/) twice, under the logged quotas (now)
and under the proposed ones (--set), and write whatif.html and whatif.json to --out:
admitted, throttled, fairness (Jain's index) and overshoot per group, now vs proposed.

Each daemon's offered load (admitted + throttled) per group and second is rebuilt
from the tick accounting frames it logged (exact counts), or, in logs of an rgd
without them, from its tick reports, where a group a daemon left out of a report
(PIP-82 suppression: its figures moved less than the tolerance) counts as unchanged
since its last report. FIELD is a Pulsar ResourceGroup rate field: publishRateInMsgs,
publishRateInBytes, dispatchRateInMsgs, dispatchRateInBytes,
replicationDispatchRateInMsgs, replicationDispatchRateInBytes. Exit code 2 on bad
input (no logs, an unknown group or field, a value that is not a number) or when
the simulator is not installed (the Docker image has no sim/).
"""

REPORT_DESCRIPTION = """\
Replay usage logs with Spark into report.html, summary.json and Parquet tables.

On a cluster (--master spark://..., k8s://..., yarn) the executors need a Python
of the driver's minor version with pyspark (the driver's exact version), pandas,
pyarrow, numpy, numba, protobuf and fsspec, plus s3fs for s3:// and gcsfs for
gs:// logs or output; `rgd report --executor-requirements` prints the list pinned
to this driver's versions. rgd itself need not be installed there: the job ships
it (a zip added with SparkContext.addPyFile) and checks the executors before it
starts. Point PYSPARK_PYTHON (or --conf spark.pyspark.python=...) at that Python.
--out must be reachable by the driver and every executor (shared storage or an
object store URI). Object stores: pip install 'rgd[s3]' or 'rgd[gcs]'; the
filesystem takes its usual credentials and FSSPEC_S3_* / FSSPEC_GCS_* settings
(e.g. FSSPEC_S3_ENDPOINT_URL for an S3-compatible store).
"""


def _flag_values(ns: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(ns, name) for name in FIELDS if getattr(ns, name, None) is not None}


def cmd_run(ns: argparse.Namespace) -> int:
    from rgd.config.file import ConfigError, load_config

    flags = _flag_values(ns)
    config_path = flags.get("config") or os.environ.get(env_name("config"), "")
    doc = None
    try:
        if config_path:
            doc = load_config(config_path)
        settings = resolve(doc.daemon if doc else {}, os.environ, flags, config_path)
    except (ConfigError, SettingsError) as exc:
        print(f"rgd: {exc}", file=sys.stderr)
        return 2
    fix_mmap_threshold()  # before the Pulsar client's threads allocate anything
    if settings.cluster_process or settings.cluster_thread:
        from rgd.daemon.serving_process import ServingProcess

        serving = ServingProcess(settings, doc, ns.log_level)
        del doc  # the cluster half gets it; this frame lives as long as the daemon
        # No watchdog: its stop waits for the cluster half's (rgd.daemon.serving_process.STOP_SECONDS).
        code = run_loop(serve(serving, pace_gc=False, stop_watchdog=None), settings.event_loop)
        if settings.cluster_thread:
            # As the cluster process ends itself: past the bounded stop nothing is left to do, and
            # the interpreter's exit would wait for the cluster thread's workers (a Pulsar call
            # that never returns among them).
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    from rgd.daemon.wiring import Daemon

    return run_loop(serve(Daemon(settings, doc)), settings.event_loop)


def cmd_up(ns: argparse.Namespace) -> int:
    from rgd.devtools.showcase import run_showcase

    return run_showcase(ns)


def cmd_report(ns: argparse.Namespace) -> int:
    if ns.executor_requirements:
        from rgd.fairness.ship import executor_requirements

        print("\n".join(executor_requirements(*(u for u in (ns.path, ns.out) if u))))
        return 0
    if not ns.path or not ns.out:
        print("rgd report: PATH_OR_URI and --out are required", file=sys.stderr)
        return 2
    conf = []
    for kv in ns.conf:
        key, sep, value = kv.partition("=")
        if not sep or not key.strip():
            print(f"rgd report: --conf {kv!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        conf.append((key.strip(), value))
    try:
        from rgd.config.storage import StorageSetupError
        from rgd.fairness import run_report
        from rgd.fairness.options import ReportOptions
        from rgd.fairness.ship import ExecutorSetupError
    except ImportError as exc:
        print(f"rgd report needs the spark extra: pip install 'rgd[spark]' ({exc})", file=sys.stderr)
        return 2
    try:
        summary = run_report(ns.path, ns.out, master=ns.master, options=ReportOptions(spark_conf=tuple(conf)))
    except (ExecutorSetupError, StorageSetupError, FileNotFoundError) as exc:
        print(f"rgd report: {exc}", file=sys.stderr)
        return 2
    print(f"report written to {ns.out}/report.html ({summary.get('group_rows', '?')} group rows)")
    return 0


def cmd_whatif(ns: argparse.Namespace) -> int:
    if not ns.logs or not ns.out:
        print("rgd whatif: LOGS and --out are required", file=sys.stderr)
        return 2
    try:
        from rgd.config.storage import StorageSetupError
        from rgd.whatif import LogReadError, ProposalError, ReplayError, SimulatorMissing, run_whatif
    except ImportError as exc:
        print(f"rgd whatif needs pandas for its page (pip install 'rgd[spark]'): {exc}", file=sys.stderr)
        return 2
    try:
        table, warnings = run_whatif(ns.logs, ns.out, ns.sets, ns.strategy)
    except (LogReadError, ProposalError, ReplayError, SimulatorMissing, StorageSetupError) as exc:
        print(f"rgd whatif: {exc}", file=sys.stderr)
        return 2
    print(table)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"page written to {ns.out}/whatif.html")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    configure_logging(ns.log_level)
    return {"run": cmd_run, "up": cmd_up, "report": cmd_report, "whatif": cmd_whatif}[ns.command](ns)


__all__ = ["build_parser", "main", "setting_help"]

if __name__ == "__main__":
    sys.exit(main())
