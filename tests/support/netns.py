"""A network namespace joined to this one by veth pairs, for partition tests and probes.

    with Netns(pairs=2) as ns:
        ns.pairs[0].host_addr        # 192.0.2.x: this side's address of pair 0
        ns.exec_prefix()             # ["ip", "netns", "exec", NAME]: run a process inside
        ns.cut(0); ns.heal(0)        # link down / up on the namespace's end of pair 0

Each pair gets its own /30 of TEST-NET-1 (192.0.2.0/24, RFC 5737: documentation only, never
routed), the host end .1 of it and the namespace end .2, picked among the blocks no
interface here uses, so two runs at once on one machine do not collide. Nothing else is
configured: no default route, no forwarding, no NAT, so a process in the namespace reaches
our veth addresses and its own loopback, and nothing beyond.

A cut sets the namespace's end down. The host end then loses its carrier but keeps its
address, which stays reachable from this side (a local address), so processes here that
talk to a listener on it are untouched; only the namespace loses it.

Names carry a random suffix (namespace `rgdnet-<pid>-<hex>`, links `rgv<hex><i>h|n`, within
the kernel's 15 characters); everything is removed on exit, and entering also removes
what an earlier run left when it crashed: namespaces whose creating process is gone, and
links of ours that belong to no live namespace. Creation and cleanup hold one lock file,
so concurrent runs neither pick the same block nor remove each other's.

Needs root and iproute2 (`ip`); `unavailable()` says why not, for a skip.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from rgd.transport.embedded_broker import file_lock, process_alive

__all__ = ["NS_PREFIX", "TEST_NET", "Netns", "NetnsError", "VethPair", "remove_leftovers", "unavailable"]

NS_PREFIX = "rgdnet-"
LINK_PREFIX = "rgv"
TEST_NET = ipaddress.IPv4Network("192.0.2.0/24")
LOCK_PATH = Path("/tmp/rgd-netns.lock")
_NS_NAME = re.compile(rf"^{re.escape(NS_PREFIX)}(\d+)-([0-9a-f]{{4}})$")
_LINK_NAME = re.compile(rf"^{LINK_PREFIX}([0-9a-f]{{4}})\d[hn]$")


class NetnsError(RuntimeError):
    """An `ip` command failed; the message has the command and what it printed."""


def unavailable() -> str | None:
    """Why namespaces cannot be made here (a skip reason), or None when they can."""
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed: scripts/system-deps.sh installs it"
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    return None


def _ip(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def _links() -> list[str]:
    # "7: rgv1a2b0h@if6: <...>": the name up to the "@peer" part
    return [m.group(1) for m in re.finditer(r"^\d+: ([^:@\s]+)", _ip("-o", "link", "show"), re.M)]


def remove_leftovers() -> list[str]:
    """Remove namespaces and links of ours that no live process owns; returns their names.
    Call it holding the lock (Netns does)."""
    removed = []
    live: set[str] = set()
    for name in _namespaces():
        m = _NS_NAME.match(name)
        if m is None:
            continue
        if process_alive(int(m.group(1))):
            live.add(m.group(2))
        else:
            _ip("netns", "delete", name, check=False)
            removed.append(name)
    for link in _links():
        m = _LINK_NAME.match(link)
        if m is not None and m.group(1) not in live:
            _ip("link", "delete", link, check=False)
            removed.append(link)
    return removed


def _free_blocks(count: int) -> list[ipaddress.IPv4Network]:
    shown = _ip("-o", "-4", "addr", "show")
    used = {ipaddress.IPv4Address(a) for a in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", shown)}
    blocks = [b for b in TEST_NET.subnets(new_prefix=30) if not any(a in b for a in used)]
    if len(blocks) < count:
        raise NetnsError(f"only {len(blocks)} free /30 blocks left in {TEST_NET}")
    chosen: list[ipaddress.IPv4Network] = []
    while len(chosen) < count:  # random blocks: a crashed run's addresses are not the next one's
        chosen.append(blocks.pop(secrets.randbelow(len(blocks))))
    return chosen


@dataclass(frozen=True)
class VethPair:
    host_if: str
    ns_if: str
    host_addr: str  # this side's end
    ns_addr: str  # the namespace's end
    network: str  # the /30 both are in


class Netns:
    """A namespace with `pairs` veth pairs into it, up, addressed; removed on exit."""

    def __init__(self, pairs: int = 1) -> None:
        if not 1 <= pairs <= 9:
            raise ValueError("pairs: 1..9")
        self.suffix = secrets.token_hex(2)
        self.name = f"{NS_PREFIX}{os.getpid()}-{self.suffix}"
        self.count = pairs
        self.pairs: list[VethPair] = []
        self.created = False

    def __enter__(self) -> Netns:
        reason = unavailable()
        if reason is not None:
            raise NetnsError(reason)
        with file_lock(LOCK_PATH):
            remove_leftovers()
            try:
                self._create()
            except BaseException:
                self._remove()
                raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with file_lock(LOCK_PATH):
            self._remove()

    def _create(self) -> None:
        _ip("netns", "add", self.name)
        self.created = True
        _ip("-n", self.name, "link", "set", "lo", "up")
        for i, block in enumerate(_free_blocks(self.count)):
            host_if, ns_if = f"{LINK_PREFIX}{self.suffix}{i}h", f"{LINK_PREFIX}{self.suffix}{i}n"
            host_addr, ns_addr = (str(a) for a in list(block.hosts())[:2])
            _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
            self.pairs.append(VethPair(host_if, ns_if, host_addr, ns_addr, str(block)))
            _ip("link", "set", ns_if, "netns", self.name)
            _ip("addr", "add", f"{host_addr}/30", "dev", host_if)
            _ip("-n", self.name, "addr", "add", f"{ns_addr}/30", "dev", ns_if)
            _ip("link", "set", host_if, "up")
            _ip("-n", self.name, "link", "set", ns_if, "up")

    def _remove(self) -> None:
        # Deleting the namespace deletes the veth ends in it, and with them their peers here.
        if self.created:
            _ip("netns", "delete", self.name, check=False)
            self.created = False
        for p in self.pairs:
            if p.host_if in _links():
                _ip("link", "delete", p.host_if, check=False)

    def exec_prefix(self) -> list[str]:
        """Prefix a command with this to run it inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def cut(self, pair: int = 0) -> None:
        """The namespace's end of `pair` goes down: the namespace loses that link."""
        _ip("-n", self.name, "link", "set", self.pairs[pair].ns_if, "down")

    def heal(self, pair: int = 0) -> None:
        _ip("-n", self.name, "link", "set", self.pairs[pair].ns_if, "up")

    def is_up(self, pair: int = 0) -> bool:
        out = _ip("-n", self.name, "-o", "link", "show", self.pairs[pair].ns_if)
        return "state UP" in out or ",UP" in out.split(">")[0]
