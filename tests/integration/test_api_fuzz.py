"""Property-based: random bodies against a real daemon process never get a 5xx,
and rejected requests change nothing."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rgd.devtools.daemon_process import DaemonProcess
from tests.support.live import write_config

json_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
                | st.text(max_size=20))
json_values = st.recursive(
    json_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=12
)
ask_like = st.fixed_dictionaries(
    {},
    optional={
        "namespace": st.one_of(st.just("acme/orders"), st.text(max_size=12), json_scalars),
        "kind": st.one_of(st.sampled_from(["publish", "dispatch"]), json_scalars),
        "messages": st.one_of(st.integers(-5, 2**64), json_scalars),
        "bytes": st.one_of(st.integers(-5, 2**64), json_scalars),
        "topic": json_scalars,
        "extra": json_scalars,
    },
)
bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    ask_like.map(lambda v: json.dumps(v).encode()),
    st.lists(ask_like, max_size=5).map(lambda v: json.dumps({"requests": v}).encode()),
    st.binary(max_size=64),
)
paths = st.sampled_from(["/v1/acquire", "/v1/usage", "/admin/v2/resourcegroups/gold", "/admin/v2/resourcegroups/x y"])


@pytest.fixture(scope="module")
def daemon(broker, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    config = write_config(tmp / "groups.yaml", {"gold": {"publishRateInMsgs": 1000}},
                          namespaces={"acme/orders": "gold"})
    tokens = tmp / "tokens"
    tokens.write_text(TOKEN + "\n")
    d = DaemonProcess("fuzz", ["--pulsar-url", broker.url, "--config", str(config), "--data-dir", str(tmp),
                               "--admin-tokens-file", str(tokens),
                               "--log-dir", str(tmp / "log"), "--topic", "non-persistent://public/default/fuzz",
                               "--config-topic", "persistent://public/default/fuzz-config"],
                      log_path=tmp / "daemon.out").start()
    d.wait_ready()
    yield d
    assert d.stop() == 0


TOKEN = "fuzz-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def send(d: DaemonProcess, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
    req = urllib.request.Request(d.url + urllib.parse.quote(path), data=body, method=method,
                                 headers={"Content-Type": "application/json", **AUTH})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=paths, body=bodies)
def test_random_bodies_never_5xx(daemon, path, body):
    method = "PUT" if path.startswith("/admin") else "POST"
    before = send(daemon, "GET", "/admin/v2/resourcegroups/gold", None)
    status, payload = send(daemon, method, path, body)
    assert status < 500, payload
    if status >= 400:
        assert "error" in json.loads(payload)
        # A rejected request changed nothing.
        assert send(daemon, "GET", "/admin/v2/resourcegroups/gold", None) == before


# -- schemathesis: every operation of the OpenAPI document, checked against the document --

import schemathesis  # noqa: E402

# 412 is Pulsar's answer to attaching an undefined group (ResourceGroup does not exist): a
# schema-valid request the daemon must refuse, like the 404s and 409s schemathesis expects,
# and a refusal when schemathesis sends a non-name (a topic's group is the bare body text).
CONFIG = schemathesis.config.SchemathesisConfig.from_dict({"checks": {
    "positive_data_acceptance": {"expected-statuses": ["2xx", "3xx", "401", "403", "404", "409", "412", "429", "5xx"]},
    "negative_data_rejection": {"expected-statuses": [
        "400", "401", "403", "404", "405", "406", "409", "412", "415", "422", "428", "429", "5xx"]},
}})
SPEC = schemathesis.openapi.from_path(str(Path(__file__).resolve().parents[2] / "rgd" / "api" / "openapi.json"),
                                      config=CONFIG)


def config_snapshot(d: DaemonProcess) -> bytes:
    """Everything an admin write could change, as the daemon reports it."""
    _status, names = send(d, "GET", "/admin/v2/resourcegroups", None)
    parts = [names]
    for name in json.loads(names):
        parts.append(send(d, "GET", f"/admin/v2/resourcegroups/{name}", None)[1])
    return b"|".join(parts)


@SPEC.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_openapi_operations_conform(case, daemon):
    before = config_snapshot(daemon)
    response = case.call_and_validate(base_url=daemon.url, headers=AUTH)
    if response.status_code >= 400:
        assert config_snapshot(daemon) == before, "a rejected request changed the config"
