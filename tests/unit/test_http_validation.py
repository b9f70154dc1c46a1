"""The HTTP API's input checks, in process: the routes of rgd.api served from a stand-in for
the daemon (rgd.api.daemon_view.RoutesView), with no broker, no tick and no usage log (the
one socket is aiohttp's test server, on an ephemeral loopback port of this process).

What a bad body, a bad admin document or an unknown route gets depends on the routes
alone, so it is tested here in milliseconds; tests/integration/test_api.py keeps what needs
a real daemon (reports on the topic, the config file's reload, readiness).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from rgd.api.app import build_app
from rgd.api.daemon_view import RoutesView
from rgd.api.metrics import Metrics
from rgd.config.file import parse_config
from rgd.config.groups import ResourceGroup
from rgd.config.settings import Settings
from rgd.config.store import ConfigChange, ConfigStore
from rgd.limiting.limiter import Limiter

CONFIG = b"""
resourcegroups:
  gold: {publishRateInMsgs: 10, publishRateInBytes: 1000, dispatchRateInMsgs: 5}
namespaces:
  acme/orders: gold
"""


class StandIn:
    """A daemon as the routes see it: a limiter that gives this daemon the whole quota (as
    `--strategy static` does for a lone daemon), the config store, and admin changes applied
    here at once (what the real daemon does before it publishes them)."""

    def __init__(self, admin_tokens: frozenset[str] = frozenset()) -> None:
        self.settings = Settings(id="d1", strategy="static", burst=1.0)
        self.config = ConfigStore()
        self.config.set_base(parse_config(CONFIG, "groups.yaml").registry)
        self.limiter = Limiter(time.monotonic, burst_seconds=1.0)
        self.admin_tokens = admin_tokens
        self.metrics = Metrics()
        self.submitted: list[ConfigChange] = []

    async def submit_change(self, change: ConfigChange) -> bool:
        self.config.apply(change)
        self.submitted.append(change)
        return True

    def group_stats(self, group: ResourceGroup) -> dict[str, Any]:
        return {"group": group.name}

    def refresh_liveness(self) -> bool:
        return True

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        return True, {"ready": True}


def _view(stand_in: StandIn) -> RoutesView:
    return stand_in  # typed as what build_app takes: a type checker run over tests sees a mismatch here


Api = tuple[TestClient[Any, Any], StandIn]


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    stand_in = StandIn(admin_tokens=frozenset({"s3cret"}))
    client = TestClient(TestServer(build_app(_view(stand_in))))
    await client.start_server()
    try:
        yield client, stand_in
    finally:
        await client.close()


@pytest.mark.parametrize(
    "body, needle",
    [
        (b"{not json", "malformed JSON"),
        (b"", "empty"),
        (b"[1,2]", "expected a JSON object"),
        (b'{"namespace": 5}', "namespace"),
        (b'{"namespace": "acme"}', "namespace"),
        (b'{"namespace": "acme/orders", "kind": "eat"}', "kind"),
        (b'{"namespace": "acme/orders", "messages": -1}', "messages: out of range, expected an integer in 0..10000000"),
        (b'{"namespace": "acme/orders", "messages": "3"}', "messages: expected an integer in 0..10000000, got a str"),
        (b'{"namespace": "acme/orders", "bytes": 1e300}', "bytes"),
        (b'{"namespace": "acme/orders", "bytes": 99999999999999999999999}', "bytes"),
        (b'{"namespace": "acme/orders", "colour": "red"}', "colour: unknown field"),
        (b'{"requests": [{"namespace": "acme/orders"}, {"namespace": 1}]}', "requests[1].namespace"),
        (b'{"requests": {}}', "requests: expected an array"),
        (b'{"requests": [], "x": 1}', "x: unknown field"),
    ],
)
async def test_bad_bodies_get_400_naming_the_field(api: Api, body: bytes, needle: str) -> None:
    client, stand_in = api
    for path in ("/v1/acquire", "/v1/usage"):
        r = await client.post(path, data=body, headers={"Content-Type": "application/json"})
        doc = await r.json()
        assert r.status == 400, doc
        assert needle in doc["error"]
    assert not stand_in.limiter.states  # nothing reached the limiter


@pytest.mark.parametrize("number", [b"99999999999999999999999999", b"1e300", b"-99999999999999999999", b"2.5",
                                    b"1099511627777"])
async def test_a_number_out_of_range_is_named_by_its_range_and_never_echoed(api: Api, number: bytes) -> None:
    client, _ = api
    for field in (b"messages", b"bytes"):
        body = b'{"namespace": "acme/orders", "' + field + b'": ' + number + b"}"
        r = await client.post("/v1/acquire", data=body, headers={"Content-Type": "application/json"})
        doc = await r.json()
        assert r.status == 400 and doc["reason"] == "Bad Request", doc
        assert doc["error"].startswith(field.decode() + ": ") and " in 0.." in doc["error"], doc
        digits = [d for d in doc["error"].replace("..", " ").split() if d.strip(",.").lstrip("-").isdigit()]
        assert all(d.strip(",.") in {"0", "10000000", str(1 << 40)} for d in digits), doc  # only the range's bounds
    r = await client.put("/admin/v2/resourcegroups/gold", data=b'{"publishRateInMsgs": 1e300}',
                         headers={"Content-Type": "application/json", "Authorization": "Bearer s3cret"})
    doc = await r.json()
    assert r.status == 400 and doc == {
        "reason": "Bad Request",
        "error": "publishRateInMsgs: out of range, expected -1 (unlimited) or a number in 0..1000000000000000"}


async def test_reason_is_pulsars_text_or_the_status_phrase_and_error_the_specifics(api: Api) -> None:
    client, _ = api
    r = await client.post("/v1/acquire", data=b"{")
    doc = await r.json()
    assert doc["reason"] == "Bad Request" and doc["error"].startswith("body: malformed JSON")
    r = await client.get("/admin/v2/resourcegroups/nope")
    assert await r.json() == {"reason": "ResourceGroup does not exist", "error": "resource group 'nope' does not exist"}
    r = await client.get("/nope")
    assert await r.json() == {"reason": "Not Found", "error": "no route for GET /nope"}
    r = await client.delete("/v1/acquire")
    assert (await r.json())["reason"] == "Method Not Allowed"


async def test_usage_counts_asks_with_no_group_as_ungrouped(api: Api) -> None:
    client, _ = api
    r = await client.post("/v1/usage", json={"requests": [{"namespace": "acme/orders"}, {"namespace": "x/y"}]})
    assert await r.json() == {"recorded": 1, "ungrouped": 1}


async def test_a_misspelt_admin_field_is_named_in_the_answer_with_the_group_as_saved(api: Api) -> None:
    client, stand_in = api
    auth = {"Authorization": "Bearer s3cret"}
    r = await client.put("/admin/v2/resourcegroups/silver", json={"publishRateInMsg": 100, "zNew": 1}, headers=auth)
    assert r.status == 200 and r.headers["X-Rgd-Ignored-Fields"] == "publishRateInMsg,zNew"
    doc = await r.json()
    assert doc["ignoredFields"] == ["publishRateInMsg", "zNew"]
    assert doc["didYouMean"] == {"publishRateInMsg": "publishRateInMsgs"}
    assert doc["resourceGroup"]["publishRateInMsgs"] == -1  # the typo left it unlimited: in plain sight
    assert "'publishRateInMsg': did you mean 'publishRateInMsgs'?" in doc["warning"]
    assert stand_in.config.effective.groups["silver"].publish_msgs == -1  # accepted, as Pulsar accepts it
    r = await client.put("/admin/v2/resourcegroups/silver", json={"publishRateInMsgs": 100}, headers=auth)
    assert r.status == 204 and await r.read() == b""


async def test_a_good_ask_reaches_the_limiter_and_the_batch_bound_holds(api: Api) -> None:
    client, stand_in = api
    r = await client.post("/v1/acquire", json={"namespace": "acme/orders", "messages": 10, "bytes": 100})
    doc = await r.json()
    assert r.status == 200 and doc["allowed"] and doc["group"] == "gold" and doc["remaining_messages"] == 0
    r = await client.post("/v1/acquire", json={"namespace": "acme/orders", "messages": 1})
    assert r.status == 429 and (await r.json())["reason"] == "message_rate"
    assert ("gold", "publish") in stand_in.limiter.states
    asks = [{"namespace": "other/ns", "messages": 1}] * 1001
    r = await client.post("/v1/acquire", json={"requests": asks})
    assert r.status == 400 and "at most 1000" in (await r.json())["error"]


async def test_quota_checks_the_namespace(api: Api) -> None:
    client, _ = api
    for bad in ("bad", "acme/", "/orders", "a/b/c"):  # the OpenAPI pattern ^[^/]+/[^/]+$
        r = await client.get("/v1/quota", params={"namespace": bad})
        assert r.status == 400 and "namespace" in (await r.json())["error"], bad


async def test_admin_documents_are_checked_before_anything_is_submitted(api: Api) -> None:
    client, stand_in = api
    auth = {"Authorization": "Bearer s3cret"}
    r = await client.put("/admin/v2/resourcegroups/gold", json={"publishRateInMsgs": "lots"}, headers=auth)
    assert r.status == 400 and "publishRateInMsgs" in (await r.json())["error"]
    r = await client.put("/admin/v2/resourcegroups/bad name!", json={}, headers=auth)
    assert r.status == 400
    r = await client.put("/admin/v2/resourcegroups/gold", json={"publishRateInMsgs": 1})
    assert r.status == 401
    r = await client.put("/admin/v2/resourcegroups/gold", json={"publishRateInMsgs": 1},
                         headers={"Authorization": "Bearer nope"})
    assert r.status == 403
    assert stand_in.submitted == []
    r = await client.put("/admin/v2/resourcegroups/gold", json={"publishRateInMsgs": 1}, headers=auth)
    assert r.status == 204 and [c.key for c in stand_in.submitted] == ["group/gold"]
    assert stand_in.config.effective.groups["gold"].publish_msgs == 1


async def test_unknown_routes_methods_and_sizes_answer_in_json(api: Api) -> None:
    client, _ = api
    r = await client.get("/nope")
    assert r.status == 404 and "no route" in (await r.json())["error"]
    r = await client.put("/admin/v2/resourcegroups/gold/nope")
    assert r.status == 404 and (await r.json())["error"] == "no route for PUT /admin/v2/resourcegroups/gold/nope"
    r = await client.delete("/v1/acquire")
    assert r.status == 405 and r.headers["Allow"] == "POST"
    assert (await r.json())["error"] == "method DELETE not allowed on /v1/acquire"
    r = await client.patch("/admin/v2/resourcegroups/gold")
    assert r.status == 405 and r.headers["Allow"] == "DELETE,GET,HEAD,PUT" and "error" in await r.json()
    too_big = b'{"requests": [' + b" " * (1024 * 1024) + b"]}"
    r = await client.post("/v1/acquire", data=too_big, headers={"Content-Type": "application/json"})
    assert r.status == 413 and "too large" in (await r.json())["error"]
