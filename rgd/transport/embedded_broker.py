"""Start, or join, the embedded pulsar-lite broker for a data directory.

pulsar-lite's own process manager shares a broker only inside one Python
process; rgd runs several daemon processes on one machine (`rgd up`, or
`rgd run` twice), so the broker's address is recorded in `<data_dir>/broker.json`
under a file lock: the first process starts the binary, later ones join it.
Only the process that started the broker stops it.

Loopback only, and one port only: the binary's own HTTP metrics endpoint would
listen on 0.0.0.0:8080 (its default, which `--addr` does not change), on every
interface and on `rgd run`'s default port, so a config file written here turns it
off. The binary protocol port is a free ephemeral port on 127.0.0.1.

`host` names another address of this machine to listen on instead, for a caller that owns
it: the partition probe binds the host end of its test veth (tests/support/netns.py), so a
daemon in another network namespace reaches the broker and loses it when the link goes down.
It is still one address and one port.
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HOST", "EmbeddedBroker", "file_lock", "free_port", "process_alive", "start_or_join"]

log = logging.getLogger("rgd.broker")

HOST = "127.0.0.1"


@dataclass
class EmbeddedBroker:
    url: str
    port: int
    pid: int
    owned: bool  # True if this process started it and must stop it
    process: subprocess.Popen[bytes] | None = None

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

    path: str = find_pulsar_lite_binary()  # pulsar_lite is untyped: its path to the binary
    return path


def free_port(host: str = HOST) -> int:
    """A free TCP port on loopback, or on `host` (for the broker, daemons, test servers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]  # (host, port) for AF_INET
        return port


def _accepting(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.3):
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
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created, with its directory, if missing): one
    process at a time between processes that share a machine."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def start_or_join(data_dir: str | Path, port: int = 0, timeout: float = 15.0, host: str = HOST) -> EmbeddedBroker:
    """Return a running broker for `data_dir`, starting one if none is alive (on `host`: an
    address of this machine, loopback unless the caller owns another one)."""
    root = Path(data_dir).absolute()
    state = root / "broker.json"
    with file_lock(root / "broker.lock"):
        if state.exists():
            try:
                info = json.loads(state.read_text())
                joined = str(info.get("host", HOST))
                if process_alive(int(info["pid"])) and _accepting(int(info["port"]), joined):
                    log.info("joining embedded broker pid %s on %s:%s", info["pid"], joined, info["port"])
                    return EmbeddedBroker(f"pulsar://{joined}:{info['port']}", int(info["port"]), int(info["pid"]),
                                          False)
            except (ValueError, KeyError, OSError):
                pass
        config = root / "pulsar-lite.toml"
        config.write_text(BROKER_CONFIG)
        # A port chosen here is free when chosen, not necessarily when the binary binds it:
        # on a lost race, try another one.
        for attempt in range(1 if port else 3):
            chosen = port or free_port(host)
            proc = _spawn(root, config, chosen, host)
            try:
                _wait_accepting(proc, chosen, timeout, root, host)
            except _ExitedEarly as exc:
                if port or attempt == 2 or not exc.port_taken:
                    raise
                log.warning("pulsar-lite could not start on port %s; trying another port", chosen)
                continue
            except BaseException:
                _kill(proc)
                raise
            break
        state.write_text(json.dumps({"pid": proc.pid, "port": chosen, "host": host}))
        log.info("started embedded broker pid %s on %s:%s (data %s)", proc.pid, host, chosen, root)
        return EmbeddedBroker(f"pulsar://{host}:{chosen}", chosen, proc.pid, True, proc)


BROKER_CONFIG = """\
# Written by rgd at every start of the embedded broker (rgd/transport/embedded_broker.py); edits are lost.
# The address and storage path are on the command line. The metrics endpoint is off: it
# would listen on 0.0.0.0:8080, every interface and the port `rgd run` listens on.
[metrics]
enabled = false
"""


class _ExitedEarly(RuntimeError):
    """The binary exited before it accepted a connection."""

    def __init__(self, message: str, port_taken: bool) -> None:
        super().__init__(message)
        self.port_taken = port_taken


def _spawn(root: Path, config: Path, port: int, host: str = HOST) -> subprocess.Popen[bytes]:
    with open(root / "pulsar-lite.log", "ab") as logfile:
        return subprocess.Popen(
            [_binary(), "--config", str(config), "--addr", f"{host}:{port}", "--db-path", str(root / "pulsar-lite.db"),
             "--log-level", os.environ.get("RGD_BROKER_LOG_LEVEL", "warn")],
            stdout=logfile, stderr=logfile, cwd=root, start_new_session=True,
        )


def _wait_accepting(proc: subprocess.Popen[bytes], port: int, timeout: float, root: Path, host: str = HOST) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            reason = _exit_reason(root / "pulsar-lite.log")
            raise _ExitedEarly(f"pulsar-lite exited with code {proc.returncode} ({reason}); "
                               f"see {root / 'pulsar-lite.log'}",
                               port_taken="AddrInUse" in reason or "already in use" in reason)
        if _accepting(port, host):
            # Whoever won a race for this port would accept too; the binary exits at once
            # when it cannot bind, so it must still be running a moment later.
            time.sleep(0.1)
            if proc.poll() is None:
                return
            continue
        if time.monotonic() > deadline:
            raise RuntimeError(f"pulsar-lite did not accept connections on {host}:{port} within {timeout}s")
        time.sleep(0.05)


def _exit_reason(path: Path) -> str:
    """The binary's own error line (it prints a backtrace after it), else its last line."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 16384))
            lines = [ln.strip() for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    errors = [ln for ln in lines if ln.startswith("Error")]
    return (errors or lines or ["no output"])[-1]


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
