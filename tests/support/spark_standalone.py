"""A Spark standalone cluster (one master, one worker) on loopback, from the pyspark wheel, for tests.

Both are the real daemons (`spark-class org.apache.spark.deploy.master.Master`
and `...deploy.worker.Worker`), bound to 127.0.0.1 with every port chosen by
the kernel (the REST submission server, which would take the fixed port
6066, is off). Each runs in its own process group, so `stop` ends the worker's
executors with it; nothing is left behind when a test fails.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    workdir: Path
    cores: int = 2
    memory: str = "2g"
    start_timeout: float = 90.0
    master_url: str = ""
    processes: list[subprocess.Popen] = field(default_factory=list)

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
        env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=str(self.workdir / "logs"), SPARK_DAEMON_MEMORY="512m")
        return env

    def _spawn(self, name: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.workdir / f"{name}.log"
        conf = self.workdir / "spark-defaults.conf"
        with open(log, "wb") as out:
            p = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args, "--properties-file", str(conf)],
                                 stdout=out, stderr=subprocess.STDOUT, env=self._env(), cwd=self.workdir,
                                 start_new_session=True)
        self.processes.append(p)
        return p, log

    def _wait_for(self, p: subprocess.Popen, log: Path, pattern: str) -> re.Match:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, log.read_text(errors="replace"))
            if m:
                return m
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[1]} exited with {p.returncode}:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        raise TimeoutError(f"no {pattern!r} in {log} within {self.start_timeout}s:\n{log.read_text()[-3000:]}")

    def start(self) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "work").mkdir(exist_ok=True)
        (self.workdir / "spark-defaults.conf").write_text(
            "spark.master.rest.enabled false\nspark.ui.enabled false\n")
        master, mlog = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                              "--port", "0", "--webui-port", "0"])
        m = self._wait_for(master, mlog, r"Starting Spark master at (spark://127\.0\.0\.1:\d+)")
        self.master_url = m.group(1)
        worker, wlog = self._spawn("worker", [
            "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
            "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(self.workdir / "work"),
            self.master_url])
        self._wait_for(worker, wlog, r"Successfully registered with master")
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to each process group (the worker's takes its executors along), SIGKILL after `timeout`."""
        for p in reversed(self.processes):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.processes):
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
            try:  # whatever is left in the group (an executor the worker did not take down)
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        self.processes.clear()
