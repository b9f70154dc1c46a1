"""The live fairness gauges on 2 real daemon processes: demands 120 and 30 messages/s against
a quota of 100 settle at the max-min fair split 70/30, and every daemon's gauges say so."""

from __future__ import annotations

import asyncio
import statistics

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from rgd.devtools.load_generator import Stream, constant, run_streams
from tests.support.cluster_harness import Cluster

QUOTA = 100.0
DEMANDS = {"d1": 120.0, "d2": 30.0}
SECONDS = 12
SAMPLE_FROM = 7  # seconds into the load: converged by then


async def gauges(url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as r:
        text = await r.text()
    want = {"group": "gold", "kind": "publish", "unit": "messages", "remote_cluster": ""}
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith("rgd_group_") and s.labels == want}


def test_gauges_show_the_fair_split(broker, tmp_path):
    c = Cluster(broker.url, tmp_path, quota=QUOTA, extra=["--report-tolerance", "0"])
    try:
        for d in DEMANDS:
            c.start(d, wait=False)
        for d in c.daemons.values():
            d.wait_ready()

        async def run() -> tuple[list, dict[str, list[dict[str, float]]]]:
            streams = [Stream(c.daemons[d].url, f"acme/{d}", constant(r)) for d, r in DEMANDS.items()]
            load = asyncio.create_task(run_streams(streams, SECONDS))
            await asyncio.sleep(SAMPLE_FROM)
            seen: dict[str, list[dict[str, float]]] = {d: [] for d in DEMANDS}
            for _ in range(4):  # four readings a second apart, while the load runs
                for d in DEMANDS:
                    seen[d].append(await gauges(c.daemons[d].url))
                await asyncio.sleep(1.0)
            return await load, seen

        stats, seen = asyncio.run(run())
    finally:
        c.stop_all()
    print(f"\ngauges: {seen}")
    admitted = [s.admitted_between(SAMPLE_FROM, SAMPLE_FROM + 4) / 4 for s in stats]
    print(f"admitted msg/s while sampled: {admitted} (fair: 70, 30)")
    for d, readings in seen.items():
        # the map holds each daemon's last report, and a report between ticks measures a
        # shorter window: a single reading may be off by a few messages; the median is not
        median = {k: statistics.median(g[k] for g in readings) for k in readings[0]}
        assert median["rgd_group_fairness_jain"] >= 0.95, (d, readings)
        assert median["rgd_group_fair_share_error"] <= 0.1, (d, readings)
        assert 0.9 <= median["rgd_group_quota_utilization"] <= 1.1, (d, readings)
        for g in readings:
            assert g["rgd_group_fairness_jain"] >= 0.8 and g["rgd_group_fair_share_error"] <= 0.25, (d, g)
