"""The `rgd` command: run (one daemon), up (one-machine showcase), report (Spark)."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import os
import signal
import sys
from dataclasses import fields
from types import ModuleType
from typing import Any, Sequence

from rgd import __version__
from rgd.gc_pacing import GcPacer
from rgd.malloc_tuning import fix_mmap_threshold
from rgd.settings import FIELDS, HELP, Settings, SettingsError, env_name, resolve

# A daemon's graceful stop takes at most ~2 s (leaving report) + 4 s (Pulsar close) + 5 s
# (an embedded broker's stop); past this it is hung (see _stop). Within Kubernetes' 30 s
# grace and the 20 s rgd up and the tests wait (rgd.daemon_process.DaemonProcess.stop).
STOP_WATCHDOG_SECONDS = 15.0


def _add_setting_flags(p: argparse.ArgumentParser) -> None:
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        # argparse %-formats help strings (for %(default)s): a literal % must be doubled.
        help_text = f"{HELP.get(f.name, '')} [env {env_name(f.name)}; default: {f.default!r}]".replace("%", "%%")
        if isinstance(f.default, bool):
            p.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            p.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=help_text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rgd", description="Cluster-wide rate limits for Pulsar resource groups (PIP-82)."
    )
    parser.add_argument("--version", action="version", version=f"rgd {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("RGD_LOG_LEVEL", "info"),
                        choices=["debug", "info", "warning", "error"], help="log verbosity [env RGD_LOG_LEVEL]")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run one daemon",
                         description="Run one rgd daemon. Settings: flags > RGD_* env > config file > defaults.")
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
    return parser


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
    from rgd.config_file import ConfigError, load_config

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
        from rgd.serving_process import ServingProcess

        serving = ServingProcess(settings, doc, ns.log_level)
        del doc  # the cluster half gets it; this frame lives as long as the daemon
        # No watchdog: its stop waits for the cluster half's (rgd.serving_process.STOP_SECONDS).
        code = _run_loop(_serve(serving, pace_gc=False, stop_watchdog=None), settings.event_loop)
        if settings.cluster_thread:
            # As the cluster process ends itself: past the bounded stop nothing is left to do, and
            # the interpreter's exit would wait for the cluster thread's workers (a Pulsar call
            # that never returns among them).
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    from rgd.daemon import Daemon

    return _run_loop(_serve(Daemon(settings, doc)), settings.event_loop)


def _run_loop(main: Any, event_loop: str) -> int:
    """uvloop when asked or, for `auto`, when installed (the benchmark's batch figures
    are about 20 % better on it); asyncio's own loop otherwise."""
    uvloop = installed_uvloop(event_loop)
    if uvloop is not None:
        return uvloop.run(main)
    if event_loop == "uvloop":
        print("rgd: event_loop uvloop: uvloop is not installed", file=sys.stderr)
        return 2
    return asyncio.run(main)


def installed_uvloop(event_loop: str) -> ModuleType | None:
    """The uvloop module when the `event_loop` setting asks for it (`uvloop`, `auto`) and it
    is installed; None for asyncio's own loop."""
    if event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


async def _serve(daemon: Any, pace_gc: bool = True, stop_watchdog: float | None = STOP_WATCHDOG_SECONDS) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await daemon.start()
    except Exception as exc:
        logging.getLogger("rgd").error("startup failed: %s", exc)
        await _stop(daemon, stop_watchdog)
        return 1
    # This process is the daemon's: full collections paced by the heap's growth, and what
    # is loaded so far (modules, the app, the clients) frozen now (see rgd.gc_pacing).
    # (The serving process of --cluster-process has no ticks to pace by, and a heap of buckets.)
    if pace_gc:
        daemon.gc_pacer = GcPacer()
        daemon.gc_pacer.start()
    waits = [asyncio.ensure_future(stop.wait())]
    ended = getattr(daemon, "stopped", None)  # a ServingProcess whose cluster process died
    if ended is not None:
        waits.append(asyncio.ensure_future(ended.wait()))
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    await _stop(daemon, stop_watchdog)
    return 1 if getattr(daemon, "failed", None) else 0


async def _stop(daemon: Any, watchdog: float | None) -> None:
    """The graceful stop, under a watchdog: every step of it is bounded (the leaving report,
    the Pulsar close, the embedded broker's stop), so one that still runs past `watchdog`
    is hung where no asyncio timeout reaches (a library thread holding what the loop waits
    on). faulthandler's watchdog is a C thread: it prints every thread's stack to the log
    and exits with status 1, where a supervisor's SIGKILL would leave no trace of where."""
    if watchdog is not None:
        faulthandler.dump_traceback_later(watchdog, exit=True)
    try:
        await daemon.stop()
    finally:
        if watchdog is not None:
            faulthandler.cancel_dump_traceback_later()


def cmd_up(ns: argparse.Namespace) -> int:
    from rgd.showcase import run_showcase

    return run_showcase(ns)


def cmd_report(ns: argparse.Namespace) -> int:
    if ns.executor_requirements:
        from rgd.report.ship import executor_requirements

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
        from rgd.report import run_report
        from rgd.report.job import ReportOptions
        from rgd.report.ship import ExecutorSetupError
        from rgd.storage import StorageSetupError
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


def configure_logging(level: str) -> None:
    """The format and levels of every rgd process (the cluster process of
    `--cluster-process` too, so its lines read like the serving process's)."""
    logging.basicConfig(level=getattr(logging, level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pulsar").setLevel(logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one INFO line per closed Spark connection


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    configure_logging(ns.log_level)
    return {"run": cmd_run, "up": cmd_up, "report": cmd_report}[ns.command](ns)


if __name__ == "__main__":
    sys.exit(main())
