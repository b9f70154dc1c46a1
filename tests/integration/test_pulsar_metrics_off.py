"""--pulsar-metrics: Pulsar's resource-group metric names and labels, next to rgd's own.

The names and labels are literals from Pulsar's ResourceGroupService and
ResourceGroup (broker), not from rgd's code; the values are checked against rgd's
own metrics and the daemon's limiter.

Here: off by default, on one daemon; with two daemons, tests/system/test_pulsar_metrics.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.live import base_url, write_config

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
    return write_config(tmp_path / "groups.yaml",
                        {"gold": {"publishRateInMsgs": 100, "replicationDispatchRateInBytes": 10_000}},
                        namespaces={"acme/orders": "gold"})


async def _scrape(http, d) -> dict[str, list]:
    async with http.get(base_url(d) + "/metrics") as r:
        text = await r.text()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _value(families, sample_name: str, **labels) -> float:
    family = re.sub(r"_(total|count|sum)$", "", sample_name)
    for s in families.get(family, []):
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((sample_name, labels))


async def test_off_by_default(make_daemon, http, config):
    d = await make_daemon("d1", config=config)
    async with http.post(base_url(d) + "/v1/acquire", json={"namespace": "acme/orders"}) as r:
        assert r.status == 200
    fam = await _scrape(http, d)
    assert not [name for name in fam if name.startswith("pulsar_")]
