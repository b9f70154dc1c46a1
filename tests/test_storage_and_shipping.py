"""Object-storage URIs (rgd.storage) and what the report ships to and asks of Spark executors (rgd.report.ship).

No Spark here: the cluster and the S3 server are in tests/test_report_cluster.py.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rgd.report.ship import EXECUTOR_LIBRARIES, executor_requirements, package_zip, problems, probe
from rgd.settings import Settings, SettingsError, resolve
from rgd.storage import StorageSetupError, check_uri, filesystem, scheme


@pytest.fixture
def no_gcsfs(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine without the gcs extra, whatever this one has."""
    monkeypatch.setitem(sys.modules, "gcsfs", None)


def test_scheme() -> None:
    assert [scheme(u) for u in ("/var/log", "file:///x", "S3://b/k", "gs://b", "relative/dir")] == [
        "", "", "s3", "gs", ""]


def test_store_without_its_package_names_the_extra(no_gcsfs: None) -> None:
    with pytest.raises(StorageSetupError, match=r"gs:// needs the gcsfs package: pip install 'rgd\[gcs\]'"):
        check_uri("gs://bucket/archive")
    with pytest.raises(StorageSetupError, match=r"rgd\[gcs\]"):
        filesystem("gs://bucket/archive")


def test_s3_is_usable_with_the_dev_extra_and_unknown_schemes_are_named() -> None:
    check_uri("s3://bucket/archive")  # s3fs comes with the dev extra (the moto test needs it)
    check_uri("/tmp/somewhere")
    with pytest.raises(StorageSetupError, match="no usable fsspec filesystem for nosuch://"):
        check_uri("nosuch://bucket/x")


def test_daemon_settings_refuse_an_archive_it_cannot_reach(no_gcsfs: None) -> None:
    with pytest.raises(SettingsError, match=r"archive_uri: gs://b/a: gs:// needs the gcsfs package"):
        resolve({}, {}, {"id": "d1", "archive_uri": "gs://b/a"}, "")
    assert resolve({}, {}, {"id": "d1", "archive_uri": "s3://b/a"}, "").archive_uri == "s3://b/a"
    assert isinstance(resolve({}, {}, {"id": "d1"}, ""), Settings)


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


def test_problems_name_each_missing_piece() -> None:
    good = probe()  # this interpreter has everything
    assert problems(good) == [], good
    bad = {"python": "3.9.1", "libraries": {**good["libraries"], "numba": "cannot import numba: ModuleNotFoundError",
                                            "pyspark": "3.5.0"}, "rgd_error": "ModuleNotFoundError: numpy"}
    del bad["libraries"]["fsspec"]
    found = problems(bad)
    assert any(p.startswith("Python 3.9.1 (the driver runs") for p in found)
    assert "numba: cannot import numba: ModuleNotFoundError" in found
    assert "fsspec: missing" in found
    assert any(p.startswith("pyspark 3.5.0 (the driver runs") for p in found)
    assert any("shipped rgd code does not load" in p for p in found)


def test_package_zip_is_the_code_only_and_loads_without_site_packages(tmp_path: Path) -> None:
    z = package_zip(tmp_path)
    assert package_zip(tmp_path) == z  # same code, same file
    names = zipfile.ZipFile(z).namelist()
    assert "rgd/report/task.py" in names and "rgd/wire/usage_report_pb2.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # -S: no site-packages, so rgd can only come from the zip (ship.py itself needs nothing else)
    code = f"import sys; sys.path.insert(0, {str(z)!r}); import rgd.report.ship as m; print(m.__file__)"
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{z}/rgd/report/ship.py"


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
