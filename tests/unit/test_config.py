import os
import subprocess
import sys
from pathlib import Path

import pytest

from rgd.config.file import ConfigError, parse_config
from rgd.config.groups import ResourceGroup
from rgd.config.settings import Settings, SettingsError, merge, resolve
from rgd.config.store import ConfigChange, ConfigStore

GOOD = b"""
daemon: {tick: 0.5}
resourcegroups:
  gold: {publishRateInMsgs: 100, dispatchRateInBytes: 5000}
  silver: {publishRateInMsgs: 10}
namespaces: {acme/orders: silver}
tenants: {acme: gold}
"""


def test_parse_and_resolve_namespace_wins_over_tenant():
    doc = parse_config(GOOD, "c.yaml")
    assert doc.daemon == {"tick": 0.5}
    reg = doc.registry
    assert reg.resolve("acme/orders").name == "silver"
    assert reg.resolve("acme/billing").name == "gold"
    assert reg.resolve("other/x") is None
    assert reg.groups["gold"].rates("dispatch") == (-1, 5000)


def test_toml_is_accepted():
    doc = parse_config(b'[resourcegroups.gold]\npublishRateInMsgs = 5\n', "c.toml")
    assert doc.registry.groups["gold"].publish_msgs == 5


@pytest.mark.parametrize(
    "text, needle",
    [
        (b"resourcegroups: {gold: {publishRateInMsg: 1}}", "resourcegroups.gold.publishRateInMsg: unknown field"),
        (b"resourcegroups: {gold: {publishRateInMsgs: -5}}", "resourcegroups.gold.publishRateInMsgs"),
        (b"resourcegroups: {gold: {publishRateInMsgs: abc}}", "a number in 0..1000000000000000, got 'abc'"),
        (b"resourcegroups: {gold: {}}\nnamespaces: {acme/x: nope}",
         "namespaces.acme/x: resource group 'nope' is not defined"),
        (b"resourcegroups: {gold: {}}\nnamespaces: {acme: gold}", "must be 'tenant/namespace'"),
        (b"groups: {}", "groups: unknown key"),
        (b"resourcegroups: [1, 2]", "resourcegroups: expected a mapping"),
        (b"resourcegroups: {gold: {publishRateInMsgs: 1}", "not valid YAML"),
        (b"- 1\n- 2", "top level must be a mapping"),
    ],
)
def test_bad_config_names_the_problem(text, needle):
    with pytest.raises(ConfigError) as exc:
        parse_config(text, "c.yaml")
    assert needle in str(exc.value)
    assert "c.yaml" in str(exc.value)


def test_settings_layering_and_errors():
    s = resolve({"tick": 2, "id": "from-file"}, {"RGD_TICK": "0.5"}, {"id": "from-flag"})
    assert s.tick == 0.5 and s.id == "from-flag"
    with pytest.raises(SettingsError, match="environment: tick"):
        resolve({}, {"RGD_TICK": "fast"}, {})
    with pytest.raises(SettingsError, match="command line: listen"):
        resolve({}, {}, {"listen": "nowhere"})
    with pytest.raises(SettingsError, match="daemon: colour: unknown setting"):
        merge(Settings(), {"colour": "blue"}, "c.yaml daemon")
    with pytest.raises(SettingsError, match="strategy"):
        resolve({}, {}, {"strategy": "magic"})
    assert resolve({}, {"RGD_LOG_RECEIPT_PAYLOADS": "yes"}, {}).log_receipt_payloads is True
    # The cluster work runs in a second process or in a second thread, not both.
    with pytest.raises(SettingsError, match="command line: cluster_thread: cluster_process is set too"):
        resolve({"cluster_process": True}, {}, {"cluster_thread": True})
    assert resolve({"cluster_process": True}, {}, {"cluster_thread": True, "cluster_process": False}).cluster_thread


def test_config_store_last_writer_wins_and_is_idempotent():
    base = parse_config(GOOD, "c.yaml").registry
    store = ConfigStore()
    store.set_base(base)
    newer = ConfigChange("group/gold", {"publishRateInMsgs": 500}, 2000, "d2")
    older = ConfigChange("group/gold", {"publishRateInMsgs": 300}, 1000, "d1")
    assert store.apply(newer)
    assert not store.apply(older)  # late, older: ignored
    assert not store.apply(newer)  # redelivered: no-op
    assert store.effective.groups["gold"].publish_msgs == 500
    store.set_base(base)  # a file reload keeps admin changes on top
    assert store.effective.groups["gold"].publish_msgs == 500
    assert store.apply(ConfigChange("namespace/acme/orders", None, 3000, "d1"))
    assert store.effective.resolve("acme/orders").name == "gold"  # falls back to tenant
    assert store.apply(ConfigChange("group/silver", None, 3000, "d1"))
    assert "silver" not in store.effective.groups


def test_config_change_decode_validates():
    change = ConfigChange("group/g", {"publishRateInMsgs": 1}, 5, "d")
    assert ConfigChange.decode(change.encode()) == change
    for bad in (b"nope", b"[]",
                b'{"key": "group/g", "value": {"publishRateInMsgs": "lots"}, "version_ms": 1, "origin": "d"}',
                    b'{"key": "topic/acme/x", "value": null, "version_ms": 1, "origin": "d"}',
                b'{"key": "weird/g", "value": null, "version_ms": 1, "origin": "d"}',
                b'{"key": "group/g", "value": null, "version_ms": "1", "origin": "d"}'):
        with pytest.raises(ValueError):
            ConfigChange.decode(bad)


def test_partial_update_keeps_other_fields():
    base = ResourceGroup("g", publish_msgs=10, dispatch_msgs=20)
    g = ResourceGroup.from_admin("g", {"publishRateInMsgs": 50}, base=base)
    assert (g.publish_msgs, g.dispatch_msgs) == (50, 20)


OLD_CONFIG = b"""
daemon:
  tick: 1.0
  outage_grace: 10.0
resourcegroups:
  gold: {publishRateInMsgs: 100}
"""


def test_removed_outage_grace_is_named_with_why_from_every_source(tmp_path):
    path = tmp_path / "rgd.yaml"
    path.write_bytes(OLD_CONFIG)
    doc = parse_config(OLD_CONFIG, str(path))
    with pytest.raises(SettingsError) as exc:
        resolve(doc.daemon, {}, {}, str(path))
    message = str(exc.value)
    assert message.startswith(f"{path} daemon: outage_grace: removed: ")
    assert "unknown setting" not in message
    assert "leases" in message and "safe share" in message and "upgrades.md" in message
    with pytest.raises(SettingsError, match="environment: outage_grace: removed: "):
        resolve({}, {"RGD_OUTAGE_GRACE": "10"}, {})
    # The daemon does not start on such a file: it exits 2 with the same words.
    rgd = Path(sys.executable).with_name("rgd")
    proc = subprocess.run([str(rgd), "run", "--config", str(path)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "RGD_LISTEN": "127.0.0.1:0"})
    assert proc.returncode == 2, proc.stderr
    assert f"rgd: {path} daemon: outage_grace: removed: " in proc.stderr
    # --outage-grace is no flag any more.
    proc = subprocess.run([str(rgd), "run", "--outage-grace", "10"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 2 and "--outage-grace" in proc.stderr
