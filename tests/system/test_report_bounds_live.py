"""A report stays under the broker's message limit however many namespaces brokers ask for.

Only namespace lists give way (no peer computes with them); every group entry
and its figures reach the peers, so no peer drops this daemon from its map.

Here live, two daemons on the real broker; the pure bound is in tests/unit/test_report_bounds.py.
"""

from __future__ import annotations

from tests.support.live import base_url, wait_for, write_config


async def test_brokers_asking_for_many_namespaces_over_http_stay_in_peers_maps(make_daemon, http, tmp_path) -> None:
    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 1000}}, tenants={"t": "g"})
    a = await make_daemon("a", cfg, tick=0.2)
    b = await make_daemon("b", cfg, tick=0.2)
    await wait_for(lambda: len(a.node.members()) == 2 and len(b.node.members()) == 2, 15)
    asked = 3000
    first_tick = a.ticks
    for start in range(0, asked, 100):
        batch = [{"namespace": f"t/ns-{i:05d}", "messages": 1} for i in range(start, start + 100)]
        async with http.post(base_url(a) + "/v1/acquire", json={"requests": batch}) as r:
            assert r.status == 200
    trimmed = a.metrics.report_namespaces_trimmed
    # However the asks spread over ticks, at most one capped list per tick got through
    # (each tick's entry changed, so none was suppressed).
    ticks_asking = a.ticks - first_tick + 2
    await wait_for(lambda: trimmed._value.get() >= asked - 32 * ticks_asking, 10)
    assert trimmed._value.get() > 0
    ticks = a.ticks
    await wait_for(lambda: a.ticks >= ticks + 5, 10)
    assert "a" in b.node.members()
    # b does not serve g: a's entry is held unparsed there until asked about, here by /stats.
    async with http.get(base_url(b) + "/admin/v2/resourcegroups/g/stats") as r:
        assert "a" in (await r.json())["daemons"]
    async with http.get(base_url(a) + "/metrics") as r:
        assert "rgd_report_namespaces_trimmed_total" in await r.text()
