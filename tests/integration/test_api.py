"""The HTTP API of one daemon, over real HTTP on loopback, with a real broker: what needs the
daemon behind the routes. Input checks that depend on the routes alone are
tests/unit/test_http_validation.py's, in process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pulsar
import pytest

from rgd.wire.usage_report_pb2 import UsageReport
from tests.support.live import base_url, wait_for, write_config


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path / "groups.yaml",
        {"gold": {"publishRateInMsgs": 10, "publishRateInBytes": 1000, "dispatchRateInMsgs": 5}},
        namespaces={"acme/orders": "gold"},
    )


@pytest.fixture
def make_daemon(make_daemon):
    """API tests test the API: `static` gives a lone daemon its whole quota from the
    first request, so bucket contents are predictable (the ramp is the calculator's
    business and is tested there and in test_rate_accuracy). A 1 s bucket (the default
    is 0.1 s) holds whole messages of these 10 msg/s and 5 msg/s limits, so the counts
    below read as the limit itself."""

    async def factory(*args, **kwargs):
        kwargs.setdefault("strategy", "static")
        kwargs.setdefault("burst", 1.0)
        return await make_daemon(*args, **kwargs)

    return factory


async def post(http, url, body, raw=False):
    data = body if raw else json.dumps(body).encode()
    async with http.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.json(), r.headers


async def test_acquire_allows_then_denies_with_retry_after(make_daemon, http, config):
    d = await make_daemon(config=config)
    url = base_url(d) + "/v1/acquire"
    status, doc, _ = await post(http, url, {"namespace": "acme/orders", "messages": 10, "bytes": 100})
    assert status == 200 and doc["allowed"] and doc["group"] == "gold" and doc["remaining_messages"] == 0
    status, doc, headers = await post(http, url, {"namespace": "acme/orders", "messages": 1})
    assert status == 429 and doc["allowed"] is False and doc["reason"] == "message_rate"
    assert 1 <= doc["retry_after_ms"] <= 150 and headers["Retry-After"] == "1"


async def test_unlimited_namespace_says_so(make_daemon, http, config):
    d = await make_daemon(config=config)
    status, doc, _ = await post(http, base_url(d) + "/v1/acquire", {"namespace": "other/ns", "messages": 10**6})
    assert status == 200 and doc == {"allowed": True, "group": None, "unlimited": True}
    async with http.get(base_url(d) + "/v1/quota", params={"namespace": "other/ns"}) as r:
        assert (await r.json())["unlimited"] is True


async def test_batch_and_its_bound(make_daemon, http, config):
    d = await make_daemon(config=config)
    url = base_url(d) + "/v1/acquire"
    asks = [{"namespace": "acme/orders", "messages": 1, "bytes": 10}] * 1000
    status, doc, _ = await post(http, url, {"requests": asks})
    assert status == 200 and len(doc["results"]) == 1000
    assert sum(r["allowed"] for r in doc["results"]) == 10  # the burst: 1 s of 10 msg/s
    status, doc, _ = await post(http, url, {"requests": asks + asks[:1]})
    assert status == 400 and "at most 1000" in doc["error"]


async def test_usage_is_never_denied_and_creates_debt(make_daemon, http, config):
    d = await make_daemon(config=config)
    status, doc, _ = await post(http, base_url(d) + "/v1/usage",
                                {"namespace": "acme/orders", "kind": "dispatch", "messages": 50})
    assert status == 200 and doc == {"recorded": 1, "ungrouped": 0}
    status, doc, _ = await post(http, base_url(d) + "/v1/acquire", {"namespace": "acme/orders", "kind": "dispatch"})
    assert status == 429 and doc["reason"] == "debt"


async def test_quota_endpoint(make_daemon, http, config):
    d = await make_daemon(config=config)
    async with http.get(base_url(d) + "/v1/quota", params={"namespace": "acme/orders"}) as r:
        doc = await r.json()
    assert doc["group"] == "gold"
    assert doc["publish"]["cluster"] == {"messages_per_second": 10, "bytes_per_second": 1000}
    assert doc["publish"]["local"]["messages_per_second"] > 0


async def test_admin_v2_roundtrip(make_daemon, http, config):
    d = await make_daemon(config=config)
    b = base_url(d) + "/admin/v2"
    async with http.put(f"{b}/resourcegroups/silver", json={"publishRateInMsgs": 3}) as r:
        assert r.status == 204
    async with http.get(f"{b}/resourcegroups") as r:
        assert await r.json() == ["gold", "silver"]
    async with http.get(f"{b}/resourcegroups/silver") as r:
        assert (await r.json())["publishRateInMsgs"] == 3
    async with http.post(f"{b}/namespaces/acme/orders/resourcegroup/silver") as r:
        assert r.status == 204
    async with http.get(f"{b}/namespaces/acme/orders/resourcegroup") as r:
        assert r.status == 200 and await r.text() == "silver"  # bare, as Pulsar answers
    async with http.post(f"{b}/tenants/acme/resourcegroup/gold") as r:
        assert r.status == 204
    async with http.delete(f"{b}/resourcegroups/silver") as r:
        doc = await r.json()
        assert r.status == 412 and doc["reason"] == "ResourceGroup is in use" and "acme/orders" in doc["error"]
    async with http.delete(f"{b}/namespaces/acme/orders/resourcegroup") as r:
        assert r.status == 204
    async with http.delete(f"{b}/resourcegroups/silver") as r:
        assert r.status == 204
    async with http.get(f"{b}/resourcegroups/silver") as r:
        assert r.status == 404 and "silver" in (await r.json())["error"]
    async with http.put(f"{b}/resourcegroups/gold", json={"publishRateInMsgs": "lots"}) as r:
        assert r.status == 400 and "publishRateInMsgs" in (await r.json())["error"]
    async with http.put(f"{b}/resourcegroups/bad name!", json={}) as r:
        assert r.status == 400
    async with http.get(f"{b}/resourcegroups/gold/stats") as r:
        stats = await r.json()
    assert stats["group"] == "gold" and "d1" in stats["members"]


async def test_admin_tokens(make_daemon, http, config, monkeypatch, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token\n")
    d = await make_daemon(config=config, admin_tokens_file=str(tokens))
    url = base_url(d) + "/admin/v2/resourcegroups/gold"
    async with http.put(url, json={"publishRateInMsgs": 1}) as r:
        assert r.status == 401
    async with http.put(url, json={"publishRateInMsgs": 1}, headers={"Authorization": "Bearer nope"}) as r:
        assert r.status == 403
    async with http.put(url, json={"publishRateInMsgs": 1}, headers={"Authorization": "Bearer s3cret-token"}) as r:
        assert r.status == 204
    assert d.config.effective.groups["gold"].publish_msgs == 1
    async with http.post(base_url(d) + "/v1/acquire", json={"namespace": "acme/orders"}) as r:
        assert r.status in (200, 429)  # broker routes stay open


async def test_ops_routes(make_daemon, http, config):
    d = await make_daemon(config=config, tick=0.2)
    await post(http, base_url(d) + "/v1/acquire", {"namespace": "acme/orders", "messages": 10})
    await post(http, base_url(d) + "/v1/acquire", {"namespace": "acme/orders", "messages": 1})
    async with http.get(base_url(d) + "/healthz") as r:
        assert r.status == 200
    await wait_for(lambda: d.readiness()[0], 10)
    async with http.get(base_url(d) + "/readyz") as r:
        doc = await r.json()
        assert r.status == 200 and doc["broker_connected"] is True
    async with http.get(base_url(d) + "/metrics") as r:
        text = await r.text()
    assert 'rgd_throttled_events_total{group="gold",kind="publish",reason="message_rate",remote_cluster=""} 1.0' in text
    assert "rgd_reports_published_total" in text and "rgd_quota_calculation_seconds_bucket" in text


async def test_single_ask_outside_the_fast_path(make_daemon, http, config):
    """Counts written as 2.0 miss the one-pass check and take the full parser: same answer."""
    d = await make_daemon(config=config)
    status, doc, _ = await post(http, base_url(d) + "/v1/acquire",
                                {"namespace": "acme/orders", "messages": 2.0, "bytes": 10.0})
    assert status == 200 and doc["allowed"] and doc["remaining_messages"] == 8
    status, doc, _ = await post(http, base_url(d) + "/v1/acquire", {"namespace": "acme/orders", "messages": 2.5})
    assert status == 400 and doc["error"].startswith("messages:")


async def test_publishes_heartbeat_reports(make_daemon, broker, topics, config):
    client = pulsar.Client(broker.url)
    try:
        consumer = client.subscribe(topics["topic"], "probe", consumer_type=pulsar.ConsumerType.Exclusive)
        d = await make_daemon(config=config, tick=0.2)
        await wait_for(lambda: d.ticks >= 2, 10)
        msg = await asyncio.to_thread(consumer.receive, 5000)
        report = UsageReport.FromString(msg.data())
        assert report.daemon_id == "d1" and report.sequence >= 1 and report.tick_ms == 200
        assert report.incarnation == d.incarnation
    finally:
        client.close()


async def test_config_file_reload_keeps_last_good(make_daemon, http, config):
    d = await make_daemon(config=config, tick=0.2)
    config.write_text(config.read_text().replace("publishRateInMsgs: 10", "publishRateInMsgs: 77"))
    await wait_for(lambda: d.config.effective.groups["gold"].publish_msgs == 77, 10)
    config.write_text("resourcegroups: {gold: {publishRateInMsgs: -7}}")
    await wait_for(lambda: d.metrics.config_reloads.labels("error")._value.get() >= 1, 10)
    assert d.config.effective.groups["gold"].publish_msgs == 77
    status, _doc, _ = await post(http, base_url(d) + "/v1/acquire", {"namespace": "acme/orders"})
    assert status == 200
