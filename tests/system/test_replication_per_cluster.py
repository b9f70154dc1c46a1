"""Pulsar's per-remote-cluster replication rates on 2 real daemon processes of cluster `east`:
the `east->west` entry is a budget of its own shared by the two daemons, `south` (no entry)
falls back to the group's replication rates, and `north->west` (another local cluster's
entry) does not apply. Metrics, stats and Pulsar's metrics show the remote cluster."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import aiohttp
import pytest

from tests.support.cluster_harness import Cluster
from tests.support.live import write_config

WEST = 60.0  # east->west budget, msg/s
DEFAULT = 100.0  # the group's replicationDispatchRateInMsgs
OFFER = {"west": 80.0, "south": 30.0}  # per daemon, msg/s
SECONDS = 12
STEADY = range(6, SECONDS - 1)
GROUP = {
    "replicationDispatchRateInMsgs": DEFAULT,
    "replicatorDispatchRate": {
        "east->west": {"dispatchThrottlingRateInMsg": WEST, "dispatchThrottlingRateInByte": -1,
                       "ratePeriodInSecond": 1, "relativeToPublishRate": False},
        "north->west": {"dispatchThrottlingRateInMsg": 1},
    },
}


async def drive(url: str, namespace: str, admitted: dict[tuple[str, int], int]) -> None:
    """Every 0.1 s, one batch with 1/10 of each remote cluster's offered rate (bounded: SECONDS)."""
    per_step = {remote: rate / 10 for remote, rate in OFFER.items()}
    owed = dict.fromkeys(OFFER, 0.0)
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as http:
        while (now := time.monotonic()) - t0 < SECONDS:
            asks = []
            for remote in OFFER:
                owed[remote] += per_step[remote]
                n = int(owed[remote])
                owed[remote] -= n
                asks += [{"namespace": namespace, "kind": "replication", "remote_cluster": remote}] * n
            async with http.post(url + "/v1/acquire", json={"requests": asks}) as r:
                results = (await r.json())["results"]
            second = int(now - t0)
            for ask, answer in zip(asks, results):
                admitted[(ask["remote_cluster"], second)] += answer["allowed"]
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - now)))


@pytest.fixture(scope="module")
def run(broker, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replication-per-cluster")
    c = Cluster(broker.url, tmp, extra=["--cluster-name", "east", "--pulsar-metrics", "--report-tolerance", "0"])
    write_config(c.config, {"gold": GROUP}, tenants={"acme": "gold"})
    try:
        for d in ("d1", "d2"):
            c.start(d, wait=False)
        for d in c.daemons.values():
            d.wait_ready()
        admitted: dict[tuple[str, int], int] = defaultdict(int)

        async def load() -> None:
            await asyncio.gather(*(drive(c.daemons[d].url, f"acme/{d}", admitted) for d in ("d1", "d2")))

        asyncio.run(load())
        c.wait_ticks(2)
        metrics = {d: {remote: c.metric(d, "rgd_admitted_messages_total", group="gold", kind="replication",
                                         remote_cluster=remote) for remote in ("west", "")}
                   for d in c.daemons}
        throttled_west = sum(c.metric(d, "rgd_throttled_messages_total", group="gold", kind="replication",
                                      remote_cluster="west") for d in c.daemons)
        pulsar_west = c.metric("d1", "pulsar_resource_group_remote_usage_messages_used_total",
                               ResourceGroup="gold", MonitoringClass="ReplicationDispatch", RemoteBroker="d2",
                               RemoteBrokerName="west")
        _, stats = c.daemons["d1"].get_json("/admin/v2/resourcegroups/gold/stats")
        _, quota = c.daemons["d1"].get_json("/v1/quota?namespace=acme/d1&remote_cluster=west")
        names = c.metric("d1", "rgd_quota", group="gold@west")  # the budget's name never shows as a group
    finally:
        c.stop_all()
    return {"admitted": admitted, "metrics": metrics, "throttled_west": throttled_west, "pulsar_west": pulsar_west,
            "stats": stats, "quota": quota, "derived_name_samples": names}


def test_west_has_its_own_budget_shared_by_both_daemons(run):
    west = [run["admitted"][("west", t)] for t in STEADY]
    south = [run["admitted"][("south", t)] for t in STEADY]
    print(f"\nadmitted per second, cluster-wide: west {west} (budget {WEST}); south {south} (offered 60)")
    assert all(abs(n - WEST) <= 0.15 * WEST for n in west), west
    # south falls back to the group's replication rates (100 msg/s): its 60 msg/s all pass
    assert all(abs(n - 2 * OFFER["south"]) <= 0.1 * 2 * OFFER["south"] for n in south), south
    assert run["throttled_west"] > 0


def test_metrics_stats_and_quota_name_the_remote_cluster(run):
    m = run["metrics"]
    print(f"\nadmitted by remote_cluster label: {m}")
    assert all(m[d]["west"] > 0 and m[d][""] > 0 for d in m)
    assert run["derived_name_samples"] == 0
    assert run["pulsar_west"] > 0  # Pulsar's RemoteBrokerName carries the remote cluster
    west = run["stats"]["remote_clusters"]["west"]
    assert west["key"] == "east->west" and set(west["daemons"]) == {"d1", "d2"}
    assert "north" not in run["stats"]["remote_clusters"] and list(run["stats"]["remote_clusters"]) == ["west"]
    assert run["stats"]["quota"]["replicatorDispatchRate"]["north->west"]["dispatchThrottlingRateInMsg"] == 1
    assert 0 < west["limits"]["replication"]["messages_per_second"] <= WEST
    assert run["quota"]["remote_cluster"] == "west"
    assert run["quota"]["replication"]["cluster"]["messages_per_second"] == WEST
