"""Object-storage URIs (rgd.config.storage) and what the report ships to and asks of Spark
executors (rgd.fairness.ship).

No Spark here: the cluster and the S3 server are in tests/system/test_report_cluster.py.

Here what runs `rgd` or Python as a subprocess; the rest is in tests/unit/test_storage_and_shipping.py.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rgd.fairness.ship import EXECUTOR_LIBRARIES, executor_requirements, package_zip


@pytest.fixture
def no_gcsfs(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine without the gcs extra, whatever this one has."""
    monkeypatch.setitem(sys.modules, "gcsfs", None)


def test_rgd_run_with_an_unusable_archive_exits_2_naming_it(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "rgd.cli", "run", "--id", "x", "--archive-uri", "nosuch://b/a",
                           "--log-dir", str(tmp_path / "log"), "--data-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "archive_uri: nosuch://b/a: no usable fsspec filesystem" in proc.stderr


def test_executor_requirements_pin_the_drivers_versions() -> None:
    import numba
    import pyspark

    lines = executor_requirements("/local/logs", "/local/out")
    assert lines[0].startswith(f"# Python {sys.version_info.major}.{sys.version_info.minor} ")
    assert f"pyspark=={pyspark.__version__}" in lines and f"numba=={numba.__version__}" in lines
    assert {ln.split("==")[0] for ln in lines if not ln.startswith("#")} == {d for d, _ in EXECUTOR_LIBRARIES}
    assert any(ln.startswith("# for s3://") for ln in lines)  # optional, commented
    with_s3 = executor_requirements("s3://b/logs", "/local/out")
    assert any(ln.startswith("s3fs==") for ln in with_s3) and not any(ln.startswith("# for s3://") for ln in with_s3)
    out = subprocess.run([sys.executable, "-m", "rgd.cli", "report", "--executor-requirements"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.splitlines() == lines


def test_package_zip_is_the_code_only_and_loads_without_site_packages(tmp_path: Path) -> None:
    z = package_zip(tmp_path)
    assert package_zip(tmp_path) == z  # same code, same file
    names = zipfile.ZipFile(z).namelist()
    assert "rgd/fairness/task.py" in names and "rgd/wire/usage_report_pb2.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # -S: no site-packages, so rgd can only come from the zip (ship.py itself needs nothing else)
    code = f"import sys; sys.path.insert(0, {str(z)!r}); import rgd.fairness.ship as m; print(m.__file__)"
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{z}/rgd/fairness/ship.py"


def test_report_cli_arguments(tmp_path: Path) -> None:
    bad = subprocess.run([sys.executable, "-m", "rgd.cli", "report", str(tmp_path), "--out", str(tmp_path / "o"),
                          "--conf", "spark.executor.memory"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "is not KEY=VALUE" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "rgd.cli", "report"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "PATH_OR_URI and --out are required" in missing.stderr
    nowhere = subprocess.run([sys.executable, "-m", "rgd.cli", "report", str(tmp_path / "typo"), "--out",
                              str(tmp_path / "o")], capture_output=True, text=True, timeout=300)
    assert nowhere.returncode == 2 and f"rgd report: {tmp_path / 'typo'}: no such file or directory" in nowhere.stderr
    assert not (tmp_path / "o").exists()
    helptext = subprocess.run([sys.executable, "-m", "rgd.cli", "report", "--help"], capture_output=True, text=True,
                              timeout=60).stdout
    for needle in ("--executor-requirements", "addPyFile", "numba", "PYSPARK_PYTHON", "rgd[s3]"):
        assert needle in helptext, needle
