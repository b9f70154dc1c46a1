"""The network-namespace harness (tests/support/netns.py) with real namespaces: a listener on
our veth end is reachable from inside, a cut makes it unreachable, a heal brings it back,
everything is gone on exit, and leftovers of a crashed run are removed by name."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from tests.support.netns import TEST_NET, Netns, NetnsError, remove_leftovers, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
    print("connected")
except OSError as exc:
    print("failed", exc)
"""


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=True).stdout


def _connect_from(ns: Netns, host: str, port: int) -> str:
    proc = subprocess.run([*ns.exec_prefix(), sys.executable, "-c", CONNECT, host, str(port)],
                          capture_output=True, text=True, timeout=20)
    return proc.stdout.strip()


def test_reachable_cut_healed_and_removed() -> None:
    with Netns(pairs=2) as ns:
        a, b = ns.pairs
        blocks = {str(n) for n in TEST_NET.subnets(new_prefix=30)}
        assert a.network in blocks and b.network in blocks and a.network != b.network
        server = socket.create_server((a.host_addr, 0))
        port = server.getsockname()[1]
        accepted: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            server.settimeout(0.2)
            while not stop.is_set():
                try:
                    accepted.append(server.accept()[0])
                except TimeoutError:
                    continue

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        try:
            assert _connect_from(ns, a.host_addr, port) == "connected"
            ns.cut(0)
            assert not ns.is_up(0)
            # Pair 1 is still up, but routes only its own /30: the namespace has lost this address.
            assert _connect_from(ns, a.host_addr, port).startswith("failed")
            # Our side still reaches its own end of the cut pair (the broker's address).
            socket.create_connection((a.host_addr, port), timeout=1).close()
            ns.heal(0)
            assert ns.is_up(0)
            assert _connect_from(ns, a.host_addr, port) == "connected"
        finally:
            stop.set()
            t.join(2)
            server.close()
            for c in accepted:
                c.close()
        name, links = ns.name, [p.host_if for p in ns.pairs]
    assert name not in _ip("netns", "list")
    shown = _ip("-o", "link", "show")
    assert not [link for link in links if link in shown]


def test_leftovers_of_a_dead_run_are_removed_by_name() -> None:
    dead = "rgdnet-999999999-beef"  # no such pid
    _ip("netns", "add", dead)
    _ip("link", "add", "rgvbeef0h", "type", "veth", "peer", "name", "rgvbeef0n")
    try:
        removed = remove_leftovers()
        assert dead in removed and "rgvbeef0h" in removed
        assert dead not in _ip("netns", "list")
        assert "rgvbeef0h" not in _ip("-o", "link", "show")
    finally:
        subprocess.run(["ip", "netns", "delete", dead], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "delete", "rgvbeef0h"], capture_output=True, timeout=10)


def test_bad_pair_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="pairs"):
        Netns(pairs=0)
    assert issubclass(NetnsError, RuntimeError)
