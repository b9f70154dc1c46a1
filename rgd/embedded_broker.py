"""Start, or join, the embedded pulsar-lite broker for a data directory.

pulsar-lite's own process manager shares a broker only inside one Python
process; rgd runs several daemon processes on one machine (`rgd up`, or
`rgd run` twice), so the broker's address is recorded in `<data_dir>/broker.json`
under a file lock: the first process starts the binary, later ones join it.
Only the process that started the broker stops it. Always loopback.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

log = logging.getLogger("rgd.broker")

HOST = "127.0.0.1"


@dataclass
class EmbeddedBroker:
    url: str
    port: int
    pid: int
    owned: bool  # True if this process started it and must stop it
    process: subprocess.Popen | None = None

    def stop(self, timeout: float = 5.0) -> None:
        if not self.owned or self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.owned = False


def _binary() -> str:
    from pulsar_lite.binary_finder import find_pulsar_lite_binary

    return find_pulsar_lite_binary()


def free_port() -> int:
    """A free TCP port on loopback (for the broker, daemons, test servers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _accepting(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.3):
            return True
    except OSError:
        return False


def process_alive(pid: int) -> bool:
    """Whether a process with this pid exists (signal 0 probes without touching it)."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def start_or_join(data_dir: str | Path, port: int = 0, timeout: float = 15.0) -> EmbeddedBroker:
    """Return a running broker for `data_dir`, starting one if none is alive."""
    root = Path(data_dir).absolute()
    state = root / "broker.json"
    with _locked(root / "broker.lock"):
        if state.exists():
            try:
                info = json.loads(state.read_text())
                if process_alive(int(info["pid"])) and _accepting(int(info["port"])):
                    log.info("joining embedded broker pid %s on port %s", info["pid"], info["port"])
                    return EmbeddedBroker(f"pulsar://{HOST}:{info['port']}", int(info["port"]), int(info["pid"]), False)
            except (ValueError, KeyError, OSError):
                pass
        port = port or free_port()
        logfile = open(root / "pulsar-lite.log", "ab")
        proc = subprocess.Popen(
            [_binary(), "--addr", f"{HOST}:{port}", "--db-path", str(root / "pulsar-lite.db"),
             "--log-level", os.environ.get("RGD_BROKER_LOG_LEVEL", "warn")],
            stdout=logfile, stderr=logfile, cwd=root, start_new_session=True,
        )
        logfile.close()
        deadline = time.monotonic() + timeout
        while not _accepting(port):
            if proc.poll() is not None:
                raise RuntimeError(f"pulsar-lite exited with code {proc.returncode}; see {root / 'pulsar-lite.log'}")
            if time.monotonic() > deadline:
                proc.send_signal(signal.SIGKILL)
                raise RuntimeError(f"pulsar-lite did not accept connections on {HOST}:{port} within {timeout}s")
            time.sleep(0.05)
        state.write_text(json.dumps({"pid": proc.pid, "port": port}))
        log.info("started embedded broker pid %s on %s:%s (data %s)", proc.pid, HOST, port, root)
        return EmbeddedBroker(f"pulsar://{HOST}:{port}", port, proc.pid, True, proc)
