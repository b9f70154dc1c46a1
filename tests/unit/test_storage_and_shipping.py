"""Object-storage URIs (rgd.config.storage) and what the report ships to and asks of Spark
executors (rgd.fairness.ship).

No Spark here: the cluster and the S3 server are in tests/system/test_report_cluster.py.

Here in process; what runs `rgd` or Python as a subprocess is in
tests/integration/test_storage_and_shipping_cli.py.
"""

from __future__ import annotations

import sys

import pytest

from rgd.config.settings import Settings, SettingsError, resolve
from rgd.config.storage import StorageSetupError, check_uri, filesystem, scheme
from rgd.fairness.ship import probe, problems


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


