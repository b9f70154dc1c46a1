"""What the --pulsar-metrics tests share (tests/integration/test_pulsar_metrics_off.py, one daemon;
tests/system/test_pulsar_metrics.py, two): their groups file and a scrape of a daemon's /metrics."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.live import base_url, write_config


def gold_config(tmp_path: Path) -> Path:
    """One group, gold, with a publish and a replication rate, for the namespace acme/orders."""
    return write_config(tmp_path / "groups.yaml",
                        {"gold": {"publishRateInMsgs": 100, "replicationDispatchRateInBytes": 10_000}},
                        namespaces={"acme/orders": "gold"})


async def scrape(http, d) -> dict[str, list]:
    """The daemon's /metrics, parsed: family name -> its samples."""
    async with http.get(base_url(d) + "/metrics") as r:
        text = await r.text()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}
