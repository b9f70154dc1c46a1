"""/stats, /v1/quota and rgd_local_limit show the same limits in force, at every moment.

Two daemons share a group while their demand and the group's quota change, so the
shares move every few ticks. Each sample reads the three sources over HTTP from
one daemon; the daemon runs in this process, so its tick counter and config
generation tell whether anything could have changed the limits between the three
reads (a sample straddling a tick or a config change is taken again).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from rgd.config.groups import KINDS
from tests.support.live import base_url, wait_for, write_config

GROUP = "gold"
NS = "acme/orders"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "groups.yaml",
                        {GROUP: {"publishRateInMsgs": 200, "dispatchRateInBytes": 50_000,
                                 "replicationDispatchRateInMsgs": 80}},
                        namespaces={NS: GROUP})


def _metric_limits(text: str) -> dict[tuple[str, str], float]:
    out = {}
    for kind, unit, value in re.findall(
            rf'^rgd_local_limit\{{group="{GROUP}",kind="(\w+)",unit="(\w+)",remote_cluster=""\}} (\S+)$', text,
            flags=re.M):
        v = float(value)
        out[(kind, unit)] = None if v == -1.0 else v
    return out


async def _sample(d, http) -> dict | None:
    """Limits per (kind, unit) from each source, or None if a tick, a config change or a
    recomputation between ticks (a report received) fell in between."""
    before = (d.ticks, d.config.generation, d.limiter.limit_changes)
    url = base_url(d)
    async with http.get(f"{url}/admin/v2/resourcegroups/{GROUP}/stats") as r:
        stats = (await r.json())["limits"]
    async with http.get(f"{url}/v1/quota", params={"namespace": NS}) as r:
        quota = await r.json()
    async with http.get(f"{url}/metrics") as r:
        metrics = _metric_limits(await r.text())
    if (d.ticks, d.config.generation, d.limiter.limit_changes) != before:
        return None
    sources = {"stats": {}, "quota": {}, "metrics": {}}
    for kind in KINDS:
        for unit in ("messages", "bytes"):
            sources["stats"][(kind, unit)] = stats[kind][f"{unit}_per_second"]
            sources["quota"][(kind, unit)] = quota[kind]["local"][f"{unit}_per_second"]
            if (kind, unit) in metrics:  # exported once the (group, kind) has a bucket
                sources["metrics"][(kind, unit)] = metrics[(kind, unit)]
    return sources


async def _load(http, url: str, per_tick: dict[str, int], stop: asyncio.Event) -> None:
    """Ask every 50 ms for 1/20 of this daemon's current demand per second, every kind."""
    while not stop.is_set():
        for kind, rate in per_tick.items():
            n = max(1, rate // 20)
            async with http.post(f"{url}/v1/acquire", json={"namespace": NS, "kind": kind, "messages": n,
                                                           "bytes": n * 100}) as r:
                await r.read()
        await asyncio.sleep(0.05)


async def test_stats_quota_and_metrics_agree_while_shares_change(make_daemon, http, config):
    d1 = await make_daemon("d1", config=config, tick=0.5)
    d2 = await make_daemon("d2", config=config, tick=0.5)
    await wait_for(lambda: len(d1.node.members()) == 2 and len(d2.node.members()) == 2, 15)
    demand1 = {kind: 150 for kind in KINDS}
    demand2 = {kind: 40 for kind in KINDS}
    stop = asyncio.Event()
    loads = [asyncio.create_task(_load(http, base_url(d1), demand1, stop)),
             asyncio.create_task(_load(http, base_url(d2), demand2, stop))]
    seen: set[float] = set()
    checked = 0
    try:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        step = 0
        while loop.time() - t0 < 12:
            elapsed = loop.time() - t0
            if step == 0 and elapsed > 4:  # demand moves: shares follow
                demand1.update({kind: 30 for kind in KINDS})
                demand2.update({kind: 200 for kind in KINDS})
                step = 1
            if step == 1 and elapsed > 8:  # the quota moves: shares follow at once
                async with http.put(f"{base_url(d2)}/admin/v2/resourcegroups/{GROUP}",
                                    json={"publishRateInMsgs": 120, "replicationDispatchRateInMsgs": 300}) as r:
                    assert r.status == 204
                step = 2
            for d in (d1, d2):
                sample = await _sample(d, http)
                if sample is None:
                    continue
                assert sample["stats"] == sample["quota"], sample
                for key, value in sample["metrics"].items():
                    assert sample["stats"][key] == value, (key, sample)
                seen.add(sample["stats"][("publish", "messages")])
                checked += 1
            await asyncio.sleep(0.03)
    finally:
        stop.set()
        await asyncio.gather(*loads, return_exceptions=True)
    assert checked >= 50, checked
    assert len(seen) >= 4, f"the shares hardly moved: {sorted(seen)}"
