"""Starting and failing to start: `rgd run` with its defaults, the embedded broker's
sockets, and what a failed start leaves behind (nothing).

Sockets are read from the kernel (/proc/PID/fd and /proc/PID/net/*), not from what
rgd says it opened. `rgd run` with no flags wants 127.0.0.1:8080, which on a shared
machine may belong to someone else, so that test runs in a network namespace of its
own (`unshare`), where 8080 is free and nothing from outside can answer for it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rgd.config.settings import Settings, validate
from rgd.daemon.wiring import Daemon
from rgd.transport.embedded_broker import process_alive, start_or_join
from rgd.usage_log import UsageLog

RGD = str(Path(sys.executable).parent / "rgd")


# -- what the kernel says -------------------------------------------------------------------


def _address(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    # /proc/net prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, words)


def open_ports(pid: int) -> list[tuple[str, str, int]]:
    """(protocol, address, port) of every listening TCP socket and every UDP socket of `pid`."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        for line in Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if inode not in inodes or (proto.startswith("tcp") and state != "0A"):  # 0A: LISTEN
                continue
            addr, port = local.rsplit(":", 1)
            found.append((proto, _address(addr), int(port, 16)))
    return sorted(found)


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Every live process whose command line contains `text` (e.g. a test's temp dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append((int(entry.name), cmdline))
    return found


def _wait_until(predicate, timeout: float) -> bool:
    """Poll until `predicate` holds or `timeout` seconds pass; whether it held (the caller asserts)."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not process_alive(pid)


# -- the broker --------------------------------------------------------------------------------


def test_embedded_broker_opens_one_port_on_loopback(tmp_path: Path) -> None:
    broker = start_or_join(tmp_path / "data")
    try:
        time.sleep(0.5)  # anything the binary opens late is open by now
        assert open_ports(broker.pid) == [("tcp", "127.0.0.1", broker.port)]
    finally:
        broker.stop()
    assert _wait_gone(broker.pid)


def test_broker_that_cannot_start_names_the_reason(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "pulsar-lite.rocksdb").write_text("a file where the broker wants its database directory")
    with pytest.raises(RuntimeError, match="RocksDB"):
        start_or_join(data, timeout=10)
    assert processes_mentioning(str(tmp_path)) == []


# -- a daemon that fails to start --------------------------------------------------------------


def test_rgd_run_on_a_taken_port_fails_and_leaves_no_process(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([RGD, "run", "--listen", f"127.0.0.1:{port}", "--id", "t"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "address already in use" in proc.stderr, proc.stderr[-2000:]
    _wait_until(lambda: processes_mentioning(str(tmp_path)) == [], 10)
    assert processes_mentioning(str(tmp_path)) == []


async def test_failed_start_releases_the_port_and_the_log(tmp_path: Path) -> None:
    """The broker fails after the HTTP port and the usage log are open: both are released."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "pulsar-lite.rocksdb").write_text("not a directory")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = validate(Settings(id="t", listen=f"127.0.0.1:{port}", data_dir=str(data),
                                 log_dir=str(tmp_path / "log")))
    daemon = Daemon(settings)
    with pytest.raises(RuntimeError, match="pulsar-lite exited"):
        await daemon.start()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    UsageLog(str(tmp_path / "log"), "t").close()  # the log's lock is free again
    assert processes_mentioning(str(tmp_path)) == []


# -- `rgd run` with no flags, in a network namespace of its own --------------------------------


def _probe(workdir: Path) -> dict:
    """Runs inside the namespace: `rgd run` as typed, then again with 8080 taken."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGD_")}
    out: dict = {}
    daemon = subprocess.Popen([RGD, "run"], cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:  # ready = the broker is up and one tick ran
            try:
                with urllib.request.urlopen("http://localhost:8080/readyz", timeout=2) as resp:
                    out["readyz"] = resp.status
                    break
            except OSError:
                if daemon.poll() is not None or time.monotonic() > deadline:
                    out["readyz"] = None
                    break
                time.sleep(0.2)
        with urllib.request.urlopen("http://localhost:8080/healthz", timeout=2) as resp:
            out["healthz"] = resp.status
        info = json.loads((workdir / "rgd-data" / "broker.json").read_text())
        out["broker"] = info
        out["broker_ports"] = open_ports(int(info["pid"]))
        out["daemon_ports"] = open_ports(daemon.pid)
    finally:
        daemon.send_signal(signal.SIGTERM)
        out["exit"] = daemon.wait(30)
        out["log"] = daemon.stdout.read().decode(errors="replace")[-3000:]
    out["broker_gone"] = _wait_gone(int(info["pid"]))
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # our probes left TIME_WAITs on 8080
        taken.bind(("127.0.0.1", 8080))
        taken.listen()
        second = subprocess.run([RGD, "run"], cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    out["taken_exit"] = second.returncode
    out["taken_stderr"] = second.stderr[-2000:]
    _wait_until(lambda: processes_mentioning(str(workdir)) == [], 10)
    out["left"] = processes_mentioning(str(workdir))
    return out


def _namespace_command() -> list[str]:
    unshare, ip = shutil.which("unshare"), shutil.which("ip") or "/usr/sbin/ip"
    if unshare is None:
        pytest.fail("unshare (util-linux) is missing")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    cmd = [unshare, *user, "--net", "--", "sh", "-c", f'"{ip}" link set lo up && exec "$0" "$@"']
    check = subprocess.run([*cmd, "true"], capture_output=True, text=True)
    if check.returncode != 0:
        if os.geteuid() != 0:
            pytest.skip(f"this kernel denies unprivileged network namespaces ({check.stderr.strip()}); "
                        "CI runs as root, where this test runs")
        pytest.fail(f"unshare --net failed: {check.stderr.strip()}")
    return cmd


def test_rgd_run_with_no_flags_serves_localhost_8080(tmp_path: Path) -> None:
    cmd = _namespace_command()
    proc = subprocess.run([*cmd, sys.executable, __file__, str(tmp_path)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["readyz"] == 200 and out["healthz"] == 200, out["log"]
    port = out["broker"]["port"]
    assert [tuple(p) for p in out["broker_ports"]] == [("tcp", "127.0.0.1", port)], out["broker_ports"]
    assert [tuple(p) for p in out["daemon_ports"]] == [("tcp", "127.0.0.1", 8080)], out["daemon_ports"]
    assert out["exit"] == 0, out["log"]
    assert out["broker_gone"], "the daemon stopped but its broker still runs"
    assert out["taken_exit"] == 1, out["taken_stderr"]
    assert "('127.0.0.1', 8080): address already in use" in out["taken_stderr"]
    assert out["left"] == [], out["left"]


if __name__ == "__main__":  # the namespace side of the last test
    print(json.dumps(_probe(Path(sys.argv[1]))))
