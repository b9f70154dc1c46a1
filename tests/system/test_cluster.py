"""Cluster convergence with real daemon processes, real pulsar-client, real pulsar-lite.

Load is offered per daemon and admission is counted per wall-clock second by the
load generator (1 s ticks, so a second is a tick). Figures are printed so the
closing note can quote them (`pytest -s tests/test_cluster.py`).
"""

from __future__ import annotations

import asyncio
import signal
import time

import pulsar
import pytest

from rgd.devtools.load_generator import Stream, StreamStats, constant, run_streams
from tests.support.cluster_harness import LAYOUTS, Cluster, wait_until

QUOTA = 300.0
DEMANDS = {"d1": 240.0, "d2": 90.0, "d3": 30.0}
FAIR = {"d1": 180.0, "d2": 90.0, "d3": 30.0}


@pytest.fixture
def cluster(broker, tmp_path, request):
    """Three daemons' cluster; one process each unless a test asks for another layout
    (indirect parametrization with `LAYOUTS`' flags)."""
    c = Cluster(broker.url, tmp_path, quota=QUOTA, extra=list(getattr(request, "param", [])))
    yield c
    c.stop_all()


def streams(c: Cluster, demands: dict[str, float]) -> list[Stream]:
    return [Stream(c.daemons[d].url, f"acme/{d}", constant(rate), label=d) for d, rate in demands.items()]


def per_second(stats: dict[str, StreamStats], seconds: range) -> list[int]:
    return [sum(s.admitted.get(t, 0) for s in stats.values()) for t in seconds]


def converged_at(stats: dict[str, StreamStats], fair: dict[str, float], total: float, horizon: int) -> int | None:
    """First second from which every later second is within 10 % (cluster) and the
    3-second average of every daemon is within 10 % of its fair share."""
    for t in range(horizon - 3):
        ok = True
        for u in range(t, horizon - 2):
            cluster = sum(s.admitted.get(u, 0) for s in stats.values())
            if abs(cluster - total) > 0.10 * total:
                ok = False
                break
            for d, f in fair.items():
                avg = sum(stats[d].admitted.get(v, 0) for v in range(u, u + 3)) / 3
                if abs(avg - f) > 0.10 * f:
                    ok = False
                    break
            if not ok:
                break
        if ok:
            return t
    return None


def start_three(c: Cluster) -> None:
    for d in DEMANDS:
        c.start(d, wait=False)
    for d in DEMANDS:
        c.daemons[d].wait_ready()


@pytest.mark.parametrize("cluster", LAYOUTS.values(), ids=LAYOUTS.keys(), indirect=True)
def test_three_daemons_converge_to_max_min_fair(cluster):
    start_three(cluster)
    result = asyncio.run(run_streams(streams(cluster, DEMANDS), 12))
    stats = dict(zip(DEMANDS, result))
    t = converged_at(stats, FAIR, QUOTA, 12)
    print(f"\nconvergence: second {t}; per-second cluster admission {per_second(stats, range(12))}")
    print({d: [s.admitted.get(u, 0) for u in range(12)] for d, s in stats.items()})
    assert t is not None and t <= 5
    for d, f in FAIR.items():
        avg = stats[d].admitted_between(6, 11) / 5
        assert avg == pytest.approx(f, rel=0.10), (d, avg)
    assert max(per_second(stats, range(2, 12))) <= 1.10 * QUOTA


def test_fourth_daemon_joining_never_overshoots(cluster):
    start_three(cluster)
    t0 = time.monotonic()

    async def scenario():
        base = asyncio.create_task(run_streams(streams(cluster, DEMANDS), 18, t0))
        await asyncio.sleep(6)  # deliberate: the scenario's timeline (d4 joins 6 s into the load)
        await asyncio.to_thread(cluster.start, "d4", False)
        join = time.monotonic() - t0
        late = asyncio.create_task(run_streams(streams(cluster, {"d4": 100.0}), 18 - join, t0))
        return await base, await late, join

    base, late, join = asyncio.run(scenario())
    stats = dict(zip(DEMANDS, base))
    d4 = stats["d4"] = late[0]
    seconds = per_second(stats, range(2, 17))
    window = range(int(join) + 6, 17)
    print(f"\njoin at {join:.1f}s; per-second cluster admission from 2 s: {seconds}; "
          f"worst overshoot {100 * (max(seconds) / QUOTA - 1):.1f} %; d4 admitted/offered from second "
          f"{window.start}: {[(d4.admitted.get(s, 0), d4.offered.get(s, 0)) for s in window]}")
    assert max(seconds) <= 1.10 * QUOTA
    # And the newcomer gets its fair share: water-fill of 240/90/30/100 at 300 -> 90/90/30/90. Judged in
    # the seconds in which the load generator offered d4's 100 msg/s: on a loaded CI machine it once fell
    # behind in a second (offered less, so the cluster admitted 233), and that says nothing of the share.
    full = [s for s in window if d4.offered.get(s, 0) >= 95]
    assert len(full) >= 3, f"the load generator fell behind in most seconds: {dict(d4.offered)}"
    assert sum(d4.admitted.get(s, 0) for s in full) / len(full) == pytest.approx(90, rel=0.15)


@pytest.mark.parametrize("how, budget_ticks", [("kill", 3 + 2), ("term", 2)])
def test_departed_share_is_redistributed(cluster, how, budget_ticks):
    start_three(cluster)
    t0 = time.monotonic()
    stop_at = 6

    async def scenario():
        load = asyncio.create_task(run_streams(streams(cluster, DEMANDS), 16, t0))
        await asyncio.sleep(stop_at)  # deliberate: the scenario's timeline (d2 goes stop_at s into the load)
        if how == "kill":
            cluster.daemons["d2"].signal(signal.SIGKILL)
        else:
            cluster.daemons["d2"].signal(signal.SIGTERM)
        return await load

    stats = dict(zip(DEMANDS, asyncio.run(scenario())))
    d1 = [stats["d1"].admitted.get(t, 0) for t in range(16)]
    # d2 gone: demand 240 + 30 fits the quota of 300, so d1 gets all of its 240.
    after = next((t for t in range(stop_at, 16) if all(abs(x - 240) <= 24 for x in d1[t:15])), None)
    print(f"\n{how}: d1 per second {d1}; redistributed at second {after} "
          f"({after - stop_at if after else None} ticks after)")
    assert after is not None and after - stop_at <= budget_ticks + 1  # +1: the stop lands mid-second


def test_admin_change_reaches_every_daemon_within_two_ticks(cluster):
    start_three(cluster)
    d1 = cluster.daemons["d1"]
    import urllib.request

    req = urllib.request.Request(d1.url + "/admin/v2/resourcegroups/gold", data=b'{"publishRateInMsgs": 900}',
                                 method="PUT", headers={"Content-Type": "application/json"})
    changed = time.monotonic()
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 204

    def everywhere() -> bool:
        for d in cluster.daemons.values():
            _, doc = d.get_json("/v1/quota?namespace=acme/x")
            if doc["publish"]["cluster"]["messages_per_second"] != 900:
                return False
        return True

    took = wait_until(everywhere, 2 * cluster.tick)
    print(f"\nadmin change in force on all daemons after {took:.2f}s ({time.monotonic() - changed:.2f}s)")


def test_malformed_topic_messages_are_counted_and_dropped(cluster, broker):
    start_three(cluster)
    client = pulsar.Client(broker.url)
    try:
        producer = client.create_producer(cluster.topic, batching_enabled=False)
        for junk in (b"\xff\xff\xff", b"not a protobuf at all", b"\x0a\x03abc\x10"):
            producer.send(junk)
        result = asyncio.run(run_streams(streams(cluster, DEMANDS), 10))
    finally:
        client.close()
    stats = dict(zip(DEMANDS, result))
    for d in DEMANDS:
        assert cluster.metric(d, "rgd_reports_rejected_total", reason="malformed") >= 3
    for d, f in FAIR.items():
        assert stats[d].admitted_between(5, 10) / 5 == pytest.approx(f, rel=0.10)
