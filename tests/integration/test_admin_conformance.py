"""rgd's admin API against Pulsar's, request by request, as the Java admin client sends them.

Each row of CONVERSATION is one call of `PulsarAdmin` (pulsar-client-admin): the
method, path, headers and body that ResourceGroupsImpl / NamespacesImpl /
TopicPoliciesImpl put on the wire, and the status and body Pulsar's broker answers
(ResourceGroups + ResourceGroupsBase, Namespaces + NamespacesBase, RestException's
ErrorData body `{"reason": ...}`). The expectations are literals read from Pulsar's
sources, not from rgd: they would be the same against a Pulsar broker. rgd may add
to an error body (its `error` field), never change `reason` or the status.

Wire facts the rows rely on (Pulsar sources):
- The client writes a String entity as bare text: Jackson's JAX-RS provider leaves
  String to Jersey's plain writer. So `setNamespaceResourceGroup` POSTs an empty body
  (`Entity.entity("", APPLICATION_JSON)`), `topicPolicies().setResourceGroup` POSTs
  the bare name, and `removeResourceGroup` POSTs a null (empty) entity.
- The broker answers a String the same way: GET .../resourcegroup is the bare name
  under Content-Type application/json, or 204 when the policy is null.
- createOrUpdate: unknown JSON fields are ignored (Pulsar's ObjectMapper does not fail
  on unknown properties); update is read-modify-write over the non-null fields.
- Group, tenant and namespace names follow NamedEntity `^[-=:.\\w]*$`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from tests.support.live import base_url, write_config

# What every request of the Java admin client carries (AsyncHttpConnector / Jersey).
JAVA = {"Accept": "application/json", "User-Agent": "Pulsar-Java-v4.0.0"}
JSON_BODY = {**JAVA, "Content-Type": "application/json"}

RG = "rg-a=1:x.y_z"  # a name only Pulsar's NamedEntity rule allows ('=', ':' and '_')
NS = "te=n:1/_ns"
TOPIC = "persistent/te=n:1/_ns/orders"
FULL = {  # new ResourceGroup() with every setter called, as Jackson writes it
    "publishRateInMsgs": 100, "publishRateInBytes": 15000,
    "dispatchRateInMsgs": 500, "dispatchRateInBytes": 40000,
    "replicationDispatchRateInMsgs": 400, "replicationDispatchRateInBytes": 2000,
}
UNLIMITED = dict.fromkeys(FULL, -1)
WEST = {"dispatchThrottlingRateInMsg": 1, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 1,
        "relativeToPublishRate": False}

BARE = object()  # marker: the expected body is the bare text that follows


def _row(call: str, method: str, path: str, headers: dict[str, str], body: bytes | None,
         status: int, expect: Any = None) -> tuple:
    return pytest.param(method, path, headers, body, status, expect, id=call)


# (Java client call, method, path, headers, body) -> (Pulsar's status, Pulsar's body)
CONVERSATION = [
    _row("getResourceGroups (none yet)", "GET", "/admin/v2/resourcegroups", JAVA, None, 200, []),
    _row("getResourceGroup (missing)", "GET", f"/admin/v2/resourcegroups/{RG}", JAVA, None,
         404, {"reason": "ResourceGroup does not exist"}),
    _row("createResourceGroup (only replication set: the rest -1)", "PUT", f"/admin/v2/resourcegroups/{RG}",
         JSON_BODY, json.dumps({"publishRateInMsgs": None, "publishRateInBytes": None,
                                "dispatchRateInMsgs": None, "dispatchRateInBytes": None,
                                "replicationDispatchRateInMsgs": 400,
                                "replicationDispatchRateInBytes": 2000}).encode(), 204),
    _row("getResourceGroup", "GET", f"/admin/v2/resourcegroups/{RG}", JAVA, None,
         200, {**UNLIMITED, "replicationDispatchRateInMsgs": 400, "replicationDispatchRateInBytes": 2000}),
    _row("updateResourceGroup (every field)", "PUT", f"/admin/v2/resourcegroups/{RG}", JSON_BODY,
         json.dumps(FULL).encode(), 204),
    _row("updateResourceGroup (non-null fields only: read-modify-write)", "PUT", f"/admin/v2/resourcegroups/{RG}",
         JSON_BODY, json.dumps({"publishRateInMsgs": 150}).encode(), 204),
    # A field rgd does not know is ignored as Pulsar ignores it; rgd says so in a 200 body where Pulsar
    # answers 204 (its Java client takes any 2xx of a PUT as done, and ignores the body).
    _row("updateResourceGroup (a newer client's field: ignored)", "PUT", f"/admin/v2/resourcegroups/{RG}",
         JSON_BODY, json.dumps({"dispatchRateInMsgs": 600, "aFutureField": {"x": 1}}).encode(),
         200),
    _row("updateResourceGroup (with a replicatorDispatchRate entry)", "PUT", f"/admin/v2/resourcegroups/{RG}",
         JSON_BODY, json.dumps({"dispatchRateInMsgs": 600,
                                "replicatorDispatchRate": {"east->west": {"dispatchThrottlingRateInMsg": 1}},
                                }).encode(),
         204),
    _row("getResourceGroup (after updates)", "GET", f"/admin/v2/resourcegroups/{RG}", JAVA, None,
         200, {**FULL, "publishRateInMsgs": 150, "dispatchRateInMsgs": 600,
               "replicatorDispatchRate": {"east->west": WEST}}),
    _row("getResourceGroups", "GET", "/admin/v2/resourcegroups", JAVA, None, 200, [RG]),
    _row("getNamespaceResourceGroup (none attached)", "GET", f"/admin/v2/namespaces/{NS}/resourcegroup", JAVA, None,
         204, b""),
    _row("setNamespaceResourceGroup (group missing)", "POST", f"/admin/v2/namespaces/{NS}/resourcegroup/nope",
         JSON_BODY, b"", 412, {"reason": "ResourceGroup does not exist"}),
    _row("setNamespaceResourceGroup", "POST", f"/admin/v2/namespaces/{NS}/resourcegroup/{RG}", JSON_BODY, b"", 204),
    _row("getNamespaceResourceGroup", "GET", f"/admin/v2/namespaces/{NS}/resourcegroup", JAVA, None,
         200, (BARE, RG)),
    _row("deleteResourceGroup (attached)", "DELETE", f"/admin/v2/resourcegroups/{RG}", JAVA, None,
         412, {"reason": "ResourceGroup is in use"}),
    _row("topicPolicies().setResourceGroup (group missing)", "POST", f"/admin/v2/{TOPIC}/resourceGroup", JSON_BODY,
         b"nope", 412, {"reason": "ResourceGroup does not exist"}),
    _row("topicPolicies().setResourceGroup", "POST", f"/admin/v2/{TOPIC}/resourceGroup", JSON_BODY, RG.encode(), 204),
    _row("topicPolicies().getResourceGroup(applied=false)", "GET", f"/admin/v2/{TOPIC}/resourceGroup?applied=false",
         JAVA, None, 200, (BARE, RG)),
    _row("removeNamespaceResourceGroup", "DELETE", f"/admin/v2/namespaces/{NS}/resourcegroup", JAVA, None, 204, b""),
    _row("removeNamespaceResourceGroup (again: still 204)", "DELETE", f"/admin/v2/namespaces/{NS}/resourcegroup",
         JAVA, None, 204, b""),
    _row("getNamespaceResourceGroup (removed)", "GET", f"/admin/v2/namespaces/{NS}/resourcegroup", JAVA, None,
         204, b""),
    _row("deleteResourceGroup (a topic still attached)", "DELETE", f"/admin/v2/resourcegroups/{RG}", JAVA, None,
         412, {"reason": "ResourceGroup is in use"}),
    _row("topicPolicies().removeResourceGroup (null entity)", "POST", f"/admin/v2/{TOPIC}/resourceGroup", JSON_BODY,
         b"", 204),
    _row("topicPolicies().getResourceGroup(applied=true) (none)", "GET",
         f"/admin/v2/{TOPIC}/resourceGroup?applied=true", JAVA, None, 204, b""),
    _row("deleteResourceGroup", "DELETE", f"/admin/v2/resourcegroups/{RG}", JAVA, None, 204, b""),
    _row("getResourceGroup (deleted)", "GET", f"/admin/v2/resourcegroups/{RG}", JAVA, None,
         404, {"reason": "ResourceGroup does not exist"}),
    _row("getResourceGroups (empty again)", "GET", "/admin/v2/resourcegroups", JAVA, None, 200, []),
]


@pytest.fixture
def empty_config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "groups.yaml", {})


@pytest.fixture
async def daemon(make_daemon, empty_config):
    return await make_daemon(config=empty_config, strategy="static")


def _check(status: int, ctype: str, raw: bytes, want_status: int, want: Any, call: str) -> None:
    assert status == want_status, f"{call}: status {status}, Pulsar answers {want_status}: {raw[:300]!r}"
    if want is None:
        return
    if isinstance(want, bytes):
        assert raw == want, call
    elif isinstance(want, tuple) and want[0] is BARE:
        assert ctype == "application/json" and raw == want[1].encode(), f"{call}: {ctype} {raw!r}"
    elif isinstance(want, dict) and "reason" in want:
        doc = json.loads(raw)
        assert doc["reason"] == want["reason"] and doc["error"], f"{call}: {doc}"
    else:
        assert json.loads(raw) == want, f"{call}: {raw!r}"


async def test_java_admin_client_conversation(daemon, http):
    """The whole conversation in order, against one real daemon: every row reads as Pulsar answers."""
    for param in CONVERSATION:
        method, path, headers, body, status, want = param.values
        async with http.request(method, base_url(daemon) + path, headers=headers, data=body) as r:
            raw = await r.read()
            _check(r.status, r.content_type, raw, status, want, param.id)


async def test_unknown_put_fields_are_named(daemon, http, caplog):
    caplog.set_level(logging.WARNING, logger="rgd.admin")
    body = json.dumps({"publishRateInMsgs": 5, "publishRateInMsg": 7, "zNewField": {"x": 1}}).encode()
    async with http.put(f"{base_url(daemon)}/admin/v2/resourcegroups/g", data=body, headers=JSON_BODY) as r:
        assert r.status == 200 and (await r.json())["ignoredFields"] == ["publishRateInMsg", "zNewField"]
        assert r.headers["X-Rgd-Ignored-Fields"] == "publishRateInMsg,zNewField"
        assert r.headers["Warning"].startswith("299 ") and "publishRateInMsg, zNewField" in r.headers["Warning"]
    assert any("'publishRateInMsg', 'zNewField'" in rec.getMessage() for rec in caplog.records)
    async with http.get(f"{base_url(daemon)}/admin/v2/resourcegroups/g") as r:
        assert (await r.json())["publishRateInMsgs"] == 5
    async with http.put(f"{base_url(daemon)}/admin/v2/resourcegroups/g", json={"publishRateInMsgs": 6}) as r:
        assert r.status == 204 and "X-Rgd-Ignored-Fields" not in r.headers
    hostile = json.dumps({"a\r\nSet-Cookie: x=1": 1, 'q"': 2}).encode()  # names are the client's
    async with http.put(f"{base_url(daemon)}/admin/v2/resourcegroups/g", data=hostile, headers=JSON_BODY) as r:
        assert r.status == 200 and "Set-Cookie" not in r.headers
        assert r.headers["X-Rgd-Ignored-Fields"] == "a%0D%0ASet-Cookie:%20x=1,q%22"


@pytest.mark.parametrize("name, ok", [
    ("a=b", True), ("x:y", True), ("_ns", True), ("a.b-c_d", True), ("A9", True),
    ("bad name", False), ("é", False), ("a/b", False), ("a%2Fb", False), ("a,b", False),
])
async def test_names_follow_pulsars_named_entity_rule(daemon, http, name, ok):
    """NamedEntity.checkName: Pattern `^[-=:.\\w]*$` with matches(); Java's \\w is ASCII."""
    async with http.put(f"{base_url(daemon)}/admin/v2/resourcegroups/{name}", json={}) as r:
        if ok:
            assert r.status == 204
        else:
            assert r.status in (400, 404), name  # 404: a '/' makes it another path
            if r.status == 400:
                assert repr(unquote(name)) in (await r.json())["error"]


async def test_errors_carry_reason_and_error(daemon, http):
    async with http.put(f"{base_url(daemon)}/admin/v2/resourcegroups/g", json={"publishRateInMsgs": "lots"}) as r:
        doc = await r.json()
        assert r.status == 400 and doc["reason"] == "Bad Request" and "publishRateInMsgs" in doc["error"]
    async with http.post(base_url(daemon) + "/v1/acquire", data=b"{") as r:
        doc = await r.json()
        assert r.status == 400 and doc["reason"] == "Bad Request" and doc["error"].startswith("body: malformed JSON")
