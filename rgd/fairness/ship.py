"""What a Spark executor needs for the report's tasks, and shipping rgd's own code to it.

The report's tasks run rgd code (the segment decoder, the per-group
analysis) in the executors' Python workers. On a cluster those executors
usually have a Python with the third-party libraries but not rgd, so the
driver ships rgd itself: the package as a zip added with
`SparkContext.addPyFile` (Spark's Python package management: the zip lands
on every worker's `sys.path`, ahead of anything installed there, so the
executors run exactly the driver's code). The third-party libraries cannot
be shipped that way (numba, pyarrow and pandas are compiled), so they must
be installed on the executors: `executor_requirements()` pins them to the
driver's versions (`rgd report --executor-requirements` prints the list), and
`check_executors` asks one executor, before any real work, whether it has
them, so a missing library is a clear error and not a stack trace from the
middle of a task.

Imports here are stdlib only: the probe runs on executors that may lack
everything else.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

# (distribution, module to import) the executors' Python workers need
EXECUTOR_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("pyspark", "pyspark"), ("pandas", "pandas"), ("pyarrow", "pyarrow"), ("numpy", "numpy"),
    ("numba", "numba"), ("protobuf", "google.protobuf"), ("fsspec", "fsspec"),
)


class ExecutorSetupError(RuntimeError):
    """The executors' Python cannot run the report's tasks; the message says what is missing."""


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _pyspark_version() -> str | None:
    try:
        import pyspark
    except ImportError:
        return _version("pyspark")
    return pyspark.__version__


def storage_libraries(*uris: str) -> list[tuple[str, str]]:
    """(distribution, module) of the fsspec filesystems the given URIs need (s3:// -> s3fs, gs:// -> gcsfs)."""
    from rgd.config.storage import STORE_PACKAGES, scheme

    out = []
    for uri in uris:
        pkg = STORE_PACKAGES.get(scheme(uri))
        if pkg and (pkg[0], pkg[0]) not in out:
            out.append((pkg[0], pkg[0]))
    return out


def executor_requirements(*uris: str) -> list[str]:
    """pip requirement lines for an executor's Python: the driver's own versions, pinned.

    pyspark must match the driver's exactly, and the Python minor version too
    (PySpark refuses a worker of another minor version).
    """
    lines = [f"# Python {sys.version_info.major}.{sys.version_info.minor} (the driver's minor version); "
             "rgd itself is shipped by the job"]
    for dist, _ in EXECUTOR_LIBRARIES + tuple(storage_libraries(*uris)):
        v = _version(dist)
        lines.append(f"{dist}=={v}" if v else dist)
    from rgd.config.storage import STORE_PACKAGES

    needed = {d for d, _ in storage_libraries(*uris)}
    for dist in sorted({d for d, _ in STORE_PACKAGES.values()} - needed):
        v = _version(dist)
        schemes = ", ".join(f"{k}://" for k, (d, _) in STORE_PACKAGES.items() if d == dist)
        lines.append(f"# for {schemes} logs or output: {dist}{'==' + v if v else ''}")
    return lines


def package_zip(directory: str | os.PathLike[str]) -> Path:
    """A zip of the installed `rgd` package (sources and package data, no caches) in `directory`.

    The name carries a hash of the content, so the same code always makes the
    same file, and Spark never confuses two versions added to one session.
    """
    import rgd

    root = Path(rgd.__file__).resolve().parent
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and p.suffix not in (".pyc", ".pyo"))
    digest = hashlib.sha256()
    for p in files:
        digest.update(p.relative_to(root.parent).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    dest = Path(directory) / f"rgd-{digest.hexdigest()[:16]}.zip"
    if not dest.exists():
        tmp = dest.with_suffix(f".tmp-{os.getpid()}")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in files:
                # a fixed timestamp: the bytes depend on the code only
                info = zipfile.ZipInfo(p.relative_to(root.parent).as_posix(), date_time=(2020, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, p.read_bytes())
        os.replace(tmp, dest)
    return dest


def probe(_: Any = None, libraries: tuple[tuple[str, str], ...] = EXECUTOR_LIBRARIES) -> dict[str, Any]:
    """Run on an executor: its Python version, and per library its version or why it fails to import.

    Also imports the report's task module, which proves the shipped rgd code loads.
    """
    out: dict[str, Any] = {"python": f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}",
                           "executable": sys.executable, "libraries": {}}
    for dist, module in libraries:
        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # report, do not raise: the driver names every problem at once
            out["libraries"][dist] = f"cannot import {module}: {type(exc).__name__}: {exc}"
        else:  # the module's own version: pyspark may come from Spark's pyspark.zip, not from pip
            out["libraries"][dist] = str(getattr(mod, "__version__", None) or _version(dist) or "installed")
    try:
        import rgd.fairness.task as task_module

        out["rgd_from"] = task_module.__file__
    except Exception as exc:
        out["rgd_error"] = f"{type(exc).__name__}: {exc}"
    return out


def problems(found: dict[str, Any], libraries: tuple[tuple[str, str], ...] = EXECUTOR_LIBRARIES) -> list[str]:
    """What `probe` found wrong, against the driver (pure, for the driver and tests)."""
    bad = []
    want_py = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not str(found.get("python", "")).startswith(want_py + "."):
        bad.append(f"Python {found.get('python')} (the driver runs {want_py})")
    for dist, _ in libraries:
        v = found.get("libraries", {}).get(dist)
        if v is None or v.startswith("cannot import"):
            bad.append(f"{dist}: {v or 'missing'}")
        elif dist == "pyspark" and v != _pyspark_version():
            bad.append(f"pyspark {v} (the driver runs {_pyspark_version()})")
    if "rgd_error" in found:
        bad.append(f"the shipped rgd code does not load: {found['rgd_error']}")
    return bad


def check_executors(sc: Any, *uris: str) -> dict[str, Any]:
    """Probe one executor; raise ExecutorSetupError naming every missing piece.

    Plain RDD (pickle, no Arrow), so even an executor without pyarrow answers.
    """
    libs = EXECUTOR_LIBRARIES + tuple(storage_libraries(*uris))
    try:
        found: dict[str, Any] = sc.parallelize([0], 1).map(lambda x: probe(x, libs)).collect()[0]
    except Exception as exc:
        msg = str(exc).strip().splitlines()
        raise ExecutorSetupError("the executors' Python could not run a task at all (is PYSPARK_PYTHON or "
                                 f"spark.pyspark.python right?): {msg[-1] if msg else exc}") from exc
    bad = problems(found, libs)
    if bad:
        raise ExecutorSetupError(
            f"the executors' Python ({found.get('executable')}) cannot run the report: " + "; ".join(bad)
            + ". Install the list `rgd report --executor-requirements` prints into it.")
    return found


__all__ = [
    "EXECUTOR_LIBRARIES", "ExecutorSetupError", "check_executors", "executor_requirements", "package_zip",
    "probe", "problems", "storage_libraries",
]
