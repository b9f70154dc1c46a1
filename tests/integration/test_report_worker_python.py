"""Spark's Python workers run the interpreter rgd runs in, unless the user chose one.

Spark's own default is `python3` from the PATH. The integration tests below put a
bare interpreter there (a venv without pip: the standard library only) and scrub
every PYSPARK_*/SPARK_* variable, as on a fresh machine where the venv is not
activated; a worker that ran that `python3` could not import pandas.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the report needs the spark extra: pip install -e '.[spark]'")

from rgd.fairness.spark_session import worker_python

pytestmark = pytest.mark.spark

JOB = """
import json
from rgd.fairness.options import ReportOptions
from rgd.fairness.spark_session import spark_session

spark = spark_session("local[1]", ReportOptions(driver_memory="512m"), progress=False)

def where(_):
    import sys
    import pandas  # what the report's tasks need, and the bare python3 lacks
    yield sys.executable

print(json.dumps(spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()))
spark.stop()
"""


def test_worker_python_precedence() -> None:
    """Spark's documented order: spark.pyspark.python, then PYSPARK_PYTHON; ours last."""
    assert worker_python({}, {}) == sys.executable
    assert worker_python({}, {"PYSPARK_PYTHON": ""}) == sys.executable
    assert worker_python({}, {"PYSPARK_PYTHON": "/opt/env/python"}) == "/opt/env/python"
    assert worker_python({"spark.pyspark.python": "/opt/conf/python"},
                         {"PYSPARK_PYTHON": "/opt/env/python"}) == "/opt/conf/python"


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("fresh")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "bare")], check=True)
    (root / "home").mkdir()
    env = {"PATH": f"{root / 'bare' / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(root / "home"),
           "LANG": "C.UTF-8"}
    bare = subprocess.run(["python3", "-c", "import pandas"], env=env, capture_output=True)
    assert bare.returncode != 0, "python3 on the test PATH has pandas: this test could not fail"
    return env


def _run(env: dict[str, str], cwd: Path) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", JOB], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_workers_use_the_drivers_interpreter(fresh_env: dict[str, str], tmp_path: Path) -> None:
    assert _run(fresh_env, tmp_path) == [sys.executable]


def test_the_users_choice_wins_in_sparks_order(fresh_env: dict[str, str], tmp_path: Path) -> None:
    """PYSPARK_PYTHON and spark.pyspark.python both set: the conf wins, as in Spark."""
    marker = tmp_path / "used"
    for name in ("env", "conf"):
        wrapper = tmp_path / f"python-{name}"
        wrapper.write_text(f'#!/bin/sh\necho {name} >> "{marker}"\nexec "{sys.executable}" "$@"\n')
        wrapper.chmod(0o755)
    env = {**fresh_env, "PYSPARK_PYTHON": str(tmp_path / "python-env"),
           "RGD_SPARK_CONF": f"spark.pyspark.python={tmp_path / 'python-conf'}"}
    assert _run(env, tmp_path) == [sys.executable]  # the wrapper execs the venv's interpreter
    assert set(marker.read_text().split()) == {"conf"}
