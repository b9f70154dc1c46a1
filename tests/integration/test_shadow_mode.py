"""Shadow mode against a real daemon (real broker, real HTTP): per group through the admin
API, for every group with `--shadow`; answers, batches, counters, stats and shares."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from tests.support.live import base_url, write_config

BLOCKED = {"publishRateInMsgs": 0}


async def metrics(http, d) -> dict[tuple[str, tuple], float]:
    async with http.get(base_url(d) + "/metrics") as r:
        text = await r.text()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def sample(m, name: str, **labels: str) -> float:
    return m.get((name, tuple(sorted({"remote_cluster": "", **labels}.items()))), 0.0)


async def acquire(http, d, body) -> tuple[int, dict]:
    async with http.post(base_url(d) + "/v1/acquire", json=body) as r:
        return r.status, await r.json()


async def test_the_admin_api_turns_shadow_mode_on_and_off(make_daemon, http, tmp_path):
    config = write_config(tmp_path / "g.yaml", {"gold": BLOCKED}, namespaces={"acme/orders": "gold"})
    d = await make_daemon(config=config, strategy="static")
    url = base_url(d) + "/admin/v2/resourcegroups/gold"
    ask = {"namespace": "acme/orders", "messages": 2}
    assert (await acquire(http, d, ask))[0] == 429
    async with http.put(url, json={"shadowMode": True}) as r:
        assert r.status == 204
    async with http.get(url) as r:
        doc = await r.json()
    assert doc["shadowMode"] is True and doc["publishRateInMsgs"] == 0 and "replicatorDispatchRate" not in doc
    status, answer = await acquire(http, d, ask)
    assert status == 200 and answer["allowed"] is True
    assert answer["shadow"] == {"allowed": False, "reason": "message_rate", "retry_after_ms": 2147483647}
    async with http.get(url + "/stats") as r:
        assert (await r.json())["shadow_mode"] is True
    async with http.put(url, json={"shadowMode": "on"}) as r:
        assert r.status == 400 and "shadowMode: expected true or false" in (await r.json())["error"]
    async with http.put(url, json={"shadowMode": False}) as r:
        assert r.status == 204
    async with http.get(url) as r:
        assert "shadowMode" not in await r.json()
    status, answer = await acquire(http, d, ask)
    assert status == 429 and answer["allowed"] is False
    async with http.get(url + "/stats") as r:
        assert "shadow_mode" not in await r.json()
    m = await metrics(http, d)
    assert sample(m, "rgd_shadow_throttled_events_total", group="gold", kind="publish", reason="message_rate") == 1
    assert sample(m, "rgd_shadow_throttled_messages_total", group="gold", kind="publish") == 2
    assert sample(m, "rgd_throttled_messages_total", group="gold", kind="publish") == 4  # the two 429s
    assert sample(m, "rgd_admitted_messages_total", group="gold", kind="publish") == 2


async def test_shadow_for_every_group(make_daemon, http, tmp_path):
    """`--shadow`: every group, shadowMode or not, is answered allowed, with the real decision."""
    config = write_config(tmp_path / "g.yaml", {"zero": BLOCKED}, namespaces={"acme/zero": "zero"})
    d = await make_daemon(config=config, strategy="static", shadow=True)
    async with http.post(base_url(d) + "/v1/acquire", json={"requests": [{"namespace": "acme/zero"}] * 3}) as r:
        assert r.status == 200
        results = (await r.json())["results"]
    assert [a["allowed"] for a in results] == [True] * 3
    assert {a["shadow"]["reason"] for a in results} == {"message_rate"}
    status, answer = await acquire(http, d, {"namespace": "acme/zero"})
    assert status == 200 and answer["shadow"]["allowed"] is False
    async with http.get(base_url(d) + "/admin/v2/resourcegroups/zero/stats") as r:
        assert (await r.json())["shadow_mode"] is True
    m = await metrics(http, d)
    assert sample(m, "rgd_shadow_throttled_events_total", group="zero", kind="publish", reason="message_rate") == 4


async def test_shadow_counts_what_enforcing_would_throttle_and_shares_the_usage(make_daemon, http, tmp_path):
    """A batch to a shadowed group is answered allowed throughout, and what it counts as
    would-have-been-throttled is what its enforcing twin throttles of the same asks; the
    usage is admitted usage in the usage map, where the cluster's shares come from."""
    groups = {"gold": {"publishRateInMsgs": 5, "shadowMode": True}, "twin": {"publishRateInMsgs": 5}}
    config = write_config(tmp_path / "g.yaml", groups, namespaces={"acme/gold": "gold", "acme/twin": "twin"})
    d = await make_daemon(config=config, strategy="static")
    answers = {}
    for ns in ("gold", "twin"):
        async with http.post(base_url(d) + "/v1/acquire", json={"requests": [{"namespace": f"acme/{ns}"}] * 20}) as r:
            answers[ns] = (await r.json())["results"]
    assert all(a["allowed"] for a in answers["gold"])
    shadowed = sum(1 for a in answers["gold"] if "shadow" in a)
    denied = sum(1 for a in answers["twin"] if not a["allowed"])
    assert 10 <= denied == shadowed < 20
    m = await metrics(http, d)
    assert sample(m, "rgd_shadow_throttled_messages_total", group="gold", kind="publish") == shadowed
    assert sample(m, "rgd_throttled_messages_total", group="twin", kind="publish") == denied
    assert sample(m, "rgd_admitted_messages_total", group="gold", kind="publish") == 20
    assert sample(m, "rgd_throttled_messages_total", group="gold", kind="publish") == 0
    # steady shadowed traffic (5 asks every 0.1 s, at most 10 s): admitted usage in the usage map
    seen: dict = {}
    for _ in range(100):
        async with http.post(base_url(d) + "/v1/acquire", json={"requests": [{"namespace": "acme/gold"}] * 5}) as r:
            assert all(a["allowed"] for a in (await r.json())["results"])
        async with http.get(base_url(d) + "/admin/v2/resourcegroups/gold/stats") as r:
            seen = (await r.json())["daemons"].get("d1", {}).get("publish", {})
        if seen.get("admitted_messages_per_second", 0) > 5:
            break
        await asyncio.sleep(0.1)
    assert seen["admitted_messages_per_second"] > 5  # above the quota: the would-be-throttled asks count
    assert seen["demand_messages_per_second"] == seen["admitted_messages_per_second"]  # nothing throttled
