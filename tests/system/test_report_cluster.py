"""The fairness report where users outgrow one machine: a Spark standalone cluster, and object storage.

One real 3-daemon run (embedded broker, `rgd run` processes) whose daemons
archive their closed segments to an S3-compatible server (moto's, on
loopback) through `--archive-uri s3://...`. Then `rgd report` runs three
ways on those logs and must give the same figures:
- local[2] over the local log directories (the reference);
- on a Spark standalone master + worker (from the pyspark wheel, on
  loopback) whose Python has the libraries `rgd report
  --executor-requirements` lists but not rgd: the job ships its own code;
- local[2] from the S3 archive, writing the report to S3 as well.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import subprocess
import sys
import venv
from pathlib import Path

import pandas as pd
import pytest

from rgd.devtools.load_generator import Stream, constant, run_streams
from tests.support.cluster_harness import Cluster
from tests.support.spark_standalone import StandaloneCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BUCKET = "rgd-test"
DEMANDS = {"d1": 200.0, "d2": 80.0, "d3": 40.0}
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on 127.0.0.1 (a free port) with one bucket; env for child processes."""
    import s3fs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing", skip_instance_cache=True)
    fs.mkdir(BUCKET)
    env = {**CREDENTIALS, "FSSPEC_S3_ENDPOINT_URL": endpoint}
    yield {"fs": fs, "endpoint": endpoint, "env": env}
    server.stop()


@pytest.fixture(scope="module")
def run(broker, s3, tmp_path_factory) -> Path:
    """A real 3-daemon run archiving to S3; returns its work directory (logs under logs/<daemon>/)."""
    work = tmp_path_factory.mktemp("cluster-run")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in s3["env"].items():
            mp.setenv(k, v)
        c = Cluster(broker.url, work, quota=200, extra=[
            "--report-tolerance", "0", "--log-segment-age", "2", "--archive-uri", f"s3://{BUCKET}/archive"])
        try:
            for d in DEMANDS:
                c.start(d, wait=False)
            for d in c.daemons.values():
                d.wait_ready()
            asyncio.run(run_streams(
                [Stream(c.daemons[d].url, f"acme/{d}", constant(r)) for d, r in DEMANDS.items()], 6))
            c.wait_ticks(2)  # two idle ticks: every admitted message is in a report
        finally:
            c.stop_all()
    return work


def _report(args: list[str], env: dict[str, str], out: str, timeout: float = 600) -> None:
    proc = subprocess.run([sys.executable, "-m", "rgd.cli", "report", *args, "--out", out],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


@pytest.fixture(scope="module")
def local_report(run: Path) -> Path:
    out = run / "report-local"
    _report([str(run / "logs"), "--master", "local[2]"], {"PYSPARK_PYTHON": sys.executable}, str(out))
    return out


def figures(read) -> dict:
    """What the report found, comparable across runs: `read(name)` returns a file's bytes."""
    s = json.loads(read("summary.json"))
    for k in ("source", "timings_s", "elapsed_s", "group_rows_per_s", "options", "executors"):
        s.pop(k, None)
    s["damage"].pop("problems")  # they name files by path; problems_total stays
    out = {"summary": s}
    for name, keys in (("totals", ["group", "daemon"]), ("loss", ["receiver", "publisher", "incarnation"]),
                       ("convergence", ["group", "dim", "event_bucket"]),
                       ("membership", ["daemon", "bucket", "event"])):
        df = pd.read_parquet(io.BytesIO(read(f"{name}.parquet")))
        out[name] = df.sort_values(keys).reset_index(drop=True).to_dict("records")
    return out


def ticks_of(read, names: list[str]) -> list[dict]:
    parts = [pd.read_parquet(io.BytesIO(read(n))) for n in names]
    df = pd.concat(parts, ignore_index=True).sort_values(["group", "dim", "bucket"]).reset_index(drop=True)
    return df.to_dict("records")


def assert_same(a, b, path: str = "") -> None:
    """Equal, floats to 1e-9 relative (sums may run in another order on another layout)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), f"{path}: keys {sorted(set(a) ^ set(b))}"
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def local_reader(root: Path):
    return lambda name: (root / name).read_bytes()


def test_local_report_is_worth_comparing(local_report: Path) -> None:
    s = json.loads((local_report / "summary.json").read_text())
    assert sorted(s["daemons"]) == sorted(DEMANDS)
    assert s["groups"]["gold"]["totals"]["publish_messages_admitted"] > 0
    assert s["input"]["group_rows"] > 0 and s["input"]["receipts"] > 0


# -- a standalone cluster whose Python does not have rgd ------------------------------------------


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory) -> Path:
    """A fresh venv with exactly what `rgd report --executor-requirements` lists (so: no rgd)."""
    root = tmp_path_factory.mktemp("executor-venv")
    reqs = subprocess.run([sys.executable, "-m", "rgd.cli", "report", "--executor-requirements"],
                          capture_output=True, text=True, check=True, timeout=60).stdout
    (root / "requirements.txt").write_text(reqs)
    venv.EnvBuilder(with_pip=True, clear=True).create(root / "venv")
    py = root / "venv" / "bin" / "python"
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r",
                           str(root / "requirements.txt")], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    no_rgd = subprocess.run([str(py), "-c", "import rgd"], capture_output=True, text=True, cwd=root, timeout=60)
    assert no_rgd.returncode != 0 and "No module named 'rgd'" in no_rgd.stderr, no_rgd.stderr
    return py


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone")).start()
    yield cluster
    cluster.stop()


def test_report_on_a_standalone_cluster_equals_local(run: Path, local_report: Path, executor_python: Path,
                                                     standalone: StandaloneCluster) -> None:
    out = run / "report-cluster"
    _report([str(run / "logs"), "--master", standalone.master_url, "--conf", "spark.executor.memory=1g"],
            {"PYSPARK_PYTHON": str(executor_python), "SPARK_LOCAL_IP": "127.0.0.1"}, str(out))
    s = json.loads((out / "summary.json").read_text())
    ex = s["executors"]
    assert ex["executable"] == str(executor_python)
    assert "/rgd-" in ex["rgd_from"] and ".zip/rgd/fairness/task.py" in ex["rgd_from"], ex  # shipped, not installed
    assert_same(figures(local_reader(out)), figures(local_reader(local_report)))
    names = sorted(p.relative_to(local_report).as_posix() for p in (local_report / "ticks").glob("*.parquet"))
    assert names and names == sorted(p.relative_to(out).as_posix() for p in (out / "ticks").glob("*.parquet"))
    assert_same(ticks_of(local_reader(out), names), ticks_of(local_reader(local_report), names))


def test_executor_without_a_library_is_a_clear_error(run: Path, tmp_path: Path,
                                                     standalone: StandaloneCluster) -> None:
    """The system Python of a plain venv (no pyspark, no numba ...): named, not a task's stack trace."""
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)
    proc = subprocess.run(
        [sys.executable, "-m", "rgd.cli", "report", str(run / "logs"), "--out", str(tmp_path / "out"),
         "--master", standalone.master_url, "--conf", "spark.executor.memory=1g"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": str(bare / "bin" / "python"), "SPARK_LOCAL_IP": "127.0.0.1"})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "rgd report: the executors' Python" in proc.stderr, proc.stderr[-3000:]


# -- archive and report in object storage -----------------------------------------------------------


def test_archive_in_s3_reports_the_same(run: Path, local_report: Path, s3) -> None:
    fs = s3["fs"]
    fs.invalidate_cache()
    archived = sorted(p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] for p in fs.find(f"{BUCKET}/archive"))
    local = sorted(p.relative_to(run / "logs").as_posix() for p in (run / "logs").rglob("*.seg"))
    assert local and archived == local  # every closed segment, under <daemon>/, nothing half-copied

    out = f"s3://{BUCKET}/reports/r1"
    _report([f"s3://{BUCKET}/archive", "--master", "local[2]"], {"PYSPARK_PYTHON": sys.executable, **s3["env"]}, out)
    fs.invalidate_cache()

    def read(name: str) -> bytes:
        return fs.cat_file(f"{BUCKET}/reports/r1/{name}")

    assert_same(figures(read), figures(local_reader(local_report)))
    names = sorted(p.relative_to(local_report).as_posix() for p in (local_report / "ticks").glob("*.parquet"))
    assert sorted(p.split("/reports/r1/", 1)[1] for p in fs.find(f"{BUCKET}/reports/r1/ticks")) == names
    assert_same(ticks_of(read, names), ticks_of(local_reader(local_report), names))
    assert b"<svg" in read("report.html")
