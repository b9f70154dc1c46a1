"""`rgd run --cluster-process` (`--cluster-thread`): brokers answered in one process (thread),
the cluster work in another.

Real `rgd run` processes on the session's broker. What must hold: the HTTP API is the
single-process daemon's (every route answers, admin writes from loopback pass, counts
reach /metrics), and the two halves live and die together (a dead cluster process, a
cluster thread that fails, stops the daemon; SIGTERM stops both, the leaving report
first). That the cluster converges and a new group's first second is used as with one
process is checked in every layout by tests/test_cluster.py and tests/test_reaction_live.py
(`LAYOUTS`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from rgd.api.admin import CLIENT_ADDRESS_HEADER, FORWARDED, client_address
from rgd.daemon import cluster_process
from rgd.daemon.process_link import LinkClosed, thread_link
from tests.integration.test_metrics_http import assert_head_then_get_metrics
from tests.support.cluster_harness import CLUSTER_PROCESS, CLUSTER_THREAD, Cluster, wait_until
from tests.system.test_cluster import QUOTA


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out.extend(int(c) for c in (task / "children").read_text().split())
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def post(url: str, body: dict, method: str = "POST") -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else {}


SPLIT = {"cluster-process": CLUSTER_PROCESS, "cluster-thread": CLUSTER_THREAD}


def niceness(pid: int, tid: int) -> int:
    return int(Path(f"/proc/{pid}/task/{tid}/stat").read_text().rpartition(")")[2].split()[16])


@pytest.fixture
def split_cluster(broker, tmp_path):
    c = Cluster(broker.url, tmp_path, quota=QUOTA, extra=CLUSTER_PROCESS)
    yield c
    c.stop_all()


@pytest.fixture(params=SPLIT.values(), ids=SPLIT.keys())
def either_split(request, broker, tmp_path):
    c = Cluster(broker.url, tmp_path, quota=QUOTA, extra=request.param)
    yield c
    c.stop_all()


def test_every_route_answers_and_the_cluster_half_counts_what_the_brokers_asked(either_split):
    split_cluster = either_split
    d = split_cluster.start("d1")
    if split_cluster.extra == CLUSTER_THREAD:
        assert children(d.process.pid) == []  # one process: the cluster work in a thread
        pid = d.process.pid
        nice = {niceness(pid, int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir()}
        assert niceness(pid, pid) == 0 and 10 in nice  # the thread answering brokers is not niced; the cluster's is
    else:
        assert len(children(d.process.pid)) == 1  # the cluster process
    admitted = 0
    for _ in range(20):
        status, doc = post(d.url + "/v1/acquire", {"namespace": "acme/x", "kind": "publish", "messages": 1})
        assert status in (200, 429), doc
        admitted += doc["allowed"]
    assert admitted >= 15  # a lone settled daemon holds the whole 300 msg/s
    status, quota = d.get_json("/v1/quota?namespace=acme/x")
    assert status == 200 and quota["publish"]["local"]["messages_per_second"] == QUOTA
    status, _ = post(d.url + "/v1/usage", {"namespace": "acme/x", "kind": "dispatch", "messages": 7, "bytes": 70})
    assert status == 200
    # The counts reach the cluster process within a hand-over (a twentieth of a tick).
    wait_until(lambda: split_cluster.metric("d1", "rgd_admitted_messages_total", group="gold", kind="publish")
               == admitted, 5)
    wait_until(lambda: split_cluster.metric("d1", "rgd_admitted_messages_total", group="gold", kind="dispatch")
               == 7, 5)
    # An admin write from loopback passes (the serving process names the client), and the
    # new quota reaches the buckets that decide asks.
    status, _ = post(d.url + "/admin/v2/resourcegroups/gold", {"publishRateInMsgs": 50}, method="PUT")
    assert status == 204
    wait_until(lambda: d.get_json("/v1/quota?namespace=acme/x")[1]["publish"]["local"]["messages_per_second"]
               == 50, 5)
    with urllib.request.urlopen(d.url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))  # one family per name: both processes' figures, none twice
    assert {"rgd_http_connections", "rgd_serving_link_seconds_total", "rgd_serving_gc_seconds_total",
            "rgd_tick_seconds"} - set(types) == set()
    assert split_cluster.metric("d1", "rgd_http_connections") >= 1  # the serving process's listeners: this one
    assert_head_then_get_metrics(d.url)
    for path in ("/readyz", "/healthz", "/openapi.json", "/admin/v2/resourcegroups/gold"):
        assert d.get_json(path)[0] == 200, path
    assert d.get_json("/no/such/route")[0] == 404  # the cluster process's JSON 404


def test_the_daemon_stops_when_its_cluster_process_dies(split_cluster):
    d = split_cluster.start("d1")
    (child,) = children(d.process.pid)
    os.kill(child, signal.SIGKILL)
    assert d.process.wait(15) == 1  # brokers must not be answered with limits nobody updates


def test_the_cluster_process_stops_when_the_serving_process_is_killed(split_cluster):
    d = split_cluster.start("d1")
    (child,) = children(d.process.pid)
    d.kill()  # SIGKILL: no stop message, no graceful anything on the serving side
    wait_until(lambda: not alive(child), 25)  # its own bounded graceful stop, then gone


@pytest.mark.parametrize("layout", SPLIT.values(), ids=SPLIT.keys())
def test_sigterm_stops_both_halves_and_peers_hear_the_leaving_report(broker, tmp_path, layout):
    c = Cluster(broker.url, tmp_path, quota=QUOTA, ttl_ticks=10)  # eviction by TTL would take 10 s
    try:
        peer = c.start("plain")
        c.extra = layout
        split = c.start("split")
        wait_until(lambda: "split" in peer.get_json("/readyz")[1]["members"], 10)
        kids = children(split.process.pid)
        assert len(kids) == (1 if layout == CLUSTER_PROCESS else 0)
        t0 = time.monotonic()
        assert split.stop(20) == 0
        assert not any(alive(k) for k in kids)
        wait_until(lambda: "split" not in peer.get_json("/readyz")[1]["members"], 5)
        print(f"\nsplit daemon stopped and left the peer's members in {time.monotonic() - t0:.1f} s")
    finally:
        c.stop_all()


def test_the_client_address_header_counts_only_behind_the_serving_process() -> None:
    headers = {CLIENT_ADDRESS_HEADER: "127.0.0.1"}
    plain = web.Application()
    spoofed = make_mocked_request("PUT", "/admin/v2/resourcegroups/x", headers=headers, app=plain)
    assert client_address(spoofed) != "127.0.0.1"  # a plain daemon reads the socket's peer, never the header
    behind = web.Application()
    behind[FORWARDED] = True
    forwarded = make_mocked_request("PUT", "/admin/v2/resourcegroups/x", headers={CLIENT_ADDRESS_HEADER: "10.0.0.9"},
                                    app=behind)
    assert client_address(forwarded) == "10.0.0.9"


def test_the_serving_process_imports_neither_numpy_nor_the_pulsar_client() -> None:
    """The process answering brokers never calculates or touches the topic; numpy (+10 MB)
    and the Pulsar client (+10 MB) in it were memory for nothing (numpy crept in once
    through the calculator's batch)."""
    code = ("import sys, rgd.daemon.serving_process; "
            "print(sorted(m for m in ('numpy', 'pulsar', '_pulsar') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_cluster_thread_that_cannot_start_fails_the_daemon_with_its_reason(tmp_path):
    """The embedded broker is the cluster half's to start: its failure reaches `rgd run`'s
    exit status and stderr, and nothing is left running."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "pulsar-lite.rocksdb").write_text("a file where the broker wants its database directory")
    rgd = str(Path(sys.executable).parent / "rgd")
    proc = subprocess.run([rgd, "run", "--cluster-thread", "--listen", "127.0.0.1:0", "--id", "t",
                           "--data-dir", str(data), "--log-dir", str(tmp_path / "logs")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "RocksDB" in proc.stderr, proc.stderr[-2000:]


async def test_a_cluster_thread_that_fails_closes_the_link() -> None:
    """However the cluster thread ends, the serving side reads the link's end (and stops the
    daemon, as for a dead cluster process): here its start message is one it cannot use."""
    ours, theirs = thread_link()
    ended = threading.Event()

    def body() -> None:
        try:
            cluster_process.run_in_thread(theirs, "asyncio")
        except Exception:
            pass  # what the serving side's thread logs
        finally:
            ended.set()

    threading.Thread(target=body, daemon=True).start()
    ours.send(("start", None, None))  # no settings: the Daemon cannot be made
    await ours.drain()
    with pytest.raises(LinkClosed):
        await asyncio.wait_for(ours.receive(), 10)
    assert await asyncio.to_thread(ended.wait, 10)
    ours.close()
