"""--pulsar-metrics: Pulsar's resource-group metric names and labels, next to rgd's own.

The names and labels are literals from Pulsar's ResourceGroupService and
ResourceGroup (broker), not from rgd's code; the values are checked against rgd's
own metrics and the daemon's limiter.

Here: off by default, on one daemon; with two daemons, tests/system/test_pulsar_metrics.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.live import base_url
from tests.support.pulsar_metrics import gold_config, scrape


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return gold_config(tmp_path)


async def test_off_by_default(make_daemon, http, config):
    d = await make_daemon("d1", config=config)
    async with http.post(base_url(d) + "/v1/acquire", json={"namespace": "acme/orders"}) as r:
        assert r.status == 200
    fam = await scrape(http, d)
    assert not [name for name in fam if name.startswith("pulsar_")]
