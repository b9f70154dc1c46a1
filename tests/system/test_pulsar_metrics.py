"""--pulsar-metrics: Pulsar's resource-group metric names and labels, next to rgd's own.

The names and labels are literals from Pulsar's ResourceGroupService and
ResourceGroup (broker), not from rgd's code; the values are checked against rgd's
own metrics and the daemon's limiter.

Here with two daemons; off by default (one daemon) is in tests/integration/test_pulsar_metrics_off.py.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.support.live import base_url, wait_for
from tests.support.pulsar_metrics import gold_config, scrape

PULSAR_FAMILIES = {  # name -> label names, as Pulsar registers them
    "pulsar_resource_group_calculated_bytes_quota": ("ResourceGroup", "MonitoringClass"),
    "pulsar_resource_group_calculated_messages_quota": ("ResourceGroup", "MonitoringClass"),
    "pulsar_resource_group_bytes_used": ("ResourceGroup", "MonitoringClass"),
    "pulsar_resource_group_messages_used": ("ResourceGroup", "MonitoringClass"),
    "pulsar_resource_group_local_usage_reported": ("ResourceGroup", "MonitoringClass"),
    "pulsar_resource_group_remote_usage_bytes_used":
        ("ResourceGroup", "MonitoringClass", "RemoteBroker", "RemoteBrokerName"),
    "pulsar_resource_group_remote_usage_messages_used":
        ("ResourceGroup", "MonitoringClass", "RemoteBroker", "RemoteBrokerName"),
    "pulsar_resource_group_remote_usage_bytes_used_gauge":
        ("ResourceGroup", "MonitoringClass", "RemoteBroker", "RemoteBrokerName"),
    "pulsar_resource_group_remote_usage_messages_used_gauge":
        ("ResourceGroup", "MonitoringClass", "RemoteBroker", "RemoteBrokerName"),
    "pulsar_resource_group_aggregate_usage_secs": (),
    "pulsar_resource_group_calculate_quota_secs": (),
}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return gold_config(tmp_path)


def _value(families, sample_name: str, **labels) -> float:
    family = re.sub(r"_(total|count|sum)$", "", sample_name)
    for s in families.get(family, []):
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((sample_name, labels))


async def test_pulsar_names_and_labels_carry_rgds_figures(make_daemon, http, config):
    d1 = await make_daemon("d1", config=config, tick=0.5, pulsar_metrics=True)
    d2 = await make_daemon("d2", config=config, tick=0.5, pulsar_metrics=True)
    await wait_for(lambda: len(d1.node.members()) == 2, 15)
    for d in (d1, d2):
        for kind, n in (("publish", 7), ("replication", 3)):
            # A new bucket starts with 0.05 s of its share (rgd/cluster/node.py, start_seconds_for):
            # ask until it holds n; denied asks count as throttled, not admitted.
            deadline = asyncio.get_running_loop().time() + 3.0
            while True:
                async with http.post(base_url(d) + "/v1/acquire",
                                     json={"namespace": "acme/orders", "kind": kind, "messages": n, "bytes": 100}) as r:
                    if r.status == 200:
                        break
                    assert r.status == 429 and asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.05)
    # Wait until d1 has folded d2's counts: the remote families then have d2's rows. Not
    # by d1's usage map: d2's entry holds its last report's rate, which is 0 again a tick
    # after the asks, and an idle entry leaves the map at once (rgd.cluster.usage_map).
    assert d1.pulsar_metrics is not None
    await wait_for(lambda: d1.pulsar_metrics.remote_messages.get(("gold", "publish", "d2"), 0) >= 7, 10)
    ticks = d1.ticks
    await wait_for(lambda: d1.ticks >= ticks + 2, 10)
    fam = await scrape(http, d1)
    for name, labels in PULSAR_FAMILIES.items():
        assert name in fam, name
        for s in fam[name]:
            assert set(s.labels) == set(labels), (name, s.labels)
    gold = {"ResourceGroup": "gold"}
    assert _value(fam, "pulsar_resource_group_messages_used_total", MonitoringClass="Publish", **gold) == \
        _value(fam, "rgd_admitted_messages_total", group="gold", kind="publish") == 7
    assert _value(fam, "pulsar_resource_group_bytes_used_total", MonitoringClass="ReplicationDispatch", **gold) == \
        _value(fam, "rgd_admitted_bytes_total", group="gold", kind="replication") == 100
    # the calculated quota grows by limit x tick per tick: a positive multiple of the limits seen
    quota_m = _value(fam, "pulsar_resource_group_calculated_messages_quota_total", MonitoringClass="Publish", **gold)
    assert 0 < quota_m <= 100 * 0.5 * d1.ticks
    assert _value(fam, "pulsar_resource_group_calculated_bytes_quota_total",
                  MonitoringClass="ReplicationDispatch", **gold) > 0
    peer = {"RemoteBroker": "d2", "RemoteBrokerName": "", **gold}  # no remote cluster: Pulsar's ""
    assert _value(fam, "pulsar_resource_group_remote_usage_messages_used_total", MonitoringClass="Publish", **peer) >= 7
    assert _value(fam, "pulsar_resource_group_local_usage_reported_total", MonitoringClass="Publish", **gold) >= 1
    assert _value(fam, "pulsar_resource_group_calculate_quota_secs_count") >= 2


