"""Pulsar's replicatorDispatchRate map and shadowMode on the ResourceGroup: parsing, the
admin shape, and the per-remote-cluster budgets the cluster shares (rgd.config.groups)."""

from __future__ import annotations

import re

import pytest

from rgd.config.file import ConfigError, parse_config
from rgd.config.groups import (
    GroupRegistry,
    InvalidGroup,
    ResourceGroup,
    budget_name,
    check_name,
    replication_budgets,
    replicator_key,
    split_budget,
)
from rgd.config.store import ConfigChange, ConfigStore

BODY = {
    "replicationDispatchRateInMsgs": 100,
    "replicatorDispatchRate": {
        "east->west": {"dispatchThrottlingRateInMsg": 60, "dispatchThrottlingRateInByte": 6000,
                       "ratePeriodInSecond": 1, "relativeToPublishRate": False},
        "north->west": {"dispatchThrottlingRateInMsg": 5},  # another local cluster's entry
    },
}


def test_the_key_is_pulsars_local_arrow_remote():
    assert replicator_key("east", "west") == "east->west"


def test_the_map_round_trips_through_the_admin_shape():
    g = ResourceGroup.from_admin("gold", BODY)
    doc = g.to_admin()
    assert doc["replicatorDispatchRate"] == {
        "east->west": {"dispatchThrottlingRateInMsg": 60, "dispatchThrottlingRateInByte": 6000,
                       "ratePeriodInSecond": 1, "relativeToPublishRate": False},
        "north->west": {"dispatchThrottlingRateInMsg": 5, "dispatchThrottlingRateInByte": -1,
                        "ratePeriodInSecond": 1, "relativeToPublishRate": False},
    }
    assert "shadowMode" not in doc  # rgd's own field shows only when on
    assert ResourceGroup.from_admin("gold", doc) == g


def test_an_update_without_the_map_keeps_it_and_shadow_mode_toggles():
    g = ResourceGroup.from_admin("gold", {**BODY, "shadowMode": True})
    assert g.shadow_mode and g.to_admin()["shadowMode"] is True
    h = ResourceGroup.from_admin("gold", {"publishRateInMsgs": 7}, base=g)
    assert h.replicator_rates == g.replicator_rates and h.shadow_mode
    assert not ResourceGroup.from_admin("gold", {"shadowMode": False}, base=h).shadow_mode
    emptied = ResourceGroup.from_admin("gold", {"replicatorDispatchRate": {}}, base=h)
    assert emptied.replicator_rates == () and "replicatorDispatchRate" not in emptied.to_admin()


@pytest.mark.parametrize(("body", "message"), [
    ({"replicatorDispatchRate": []}, "replicatorDispatchRate: expected an object"),
    ({"replicatorDispatchRate": {"east->west": 5}}, "replicatorDispatchRate.east->west: expected a DispatchRate"),
    ({"replicatorDispatchRate": {"east->west": {"dispatchThrottlingRateInMsgs": 5}}},
     "replicatorDispatchRate.east->west.dispatchThrottlingRateInMsgs: unknown field"),
    ({"replicatorDispatchRate": {"east->west": {"dispatchThrottlingRateInByte": -5}}},
     "replicatorDispatchRate.east->west.dispatchThrottlingRateInByte: out of range, expected -1"),
    ({"replicatorDispatchRate": {"east->west": {"ratePeriodInSecond": 0}}}, "ratePeriodInSecond"),
    ({"replicatorDispatchRate": {"east->west": {"ratePeriodInSecond": 2**31}}},
     "ratePeriodInSecond: expected a whole number of seconds in 1..2147483647, got an integer"),
    ({"replicatorDispatchRate": {"": {}}}, "is not a key"),
    ({"shadowMode": "yes"}, "shadowMode: expected true or false"),
])
def test_bad_values_are_named(body, message):
    with pytest.raises(InvalidGroup, match=message.replace(".", r"\.").replace("[", r"\[")):
        ResourceGroup.from_admin("gold", body, strict=False)


def test_budgets_of_this_cluster_only_and_the_fallback():
    groups = {"gold": ResourceGroup.from_admin("gold", BODY)}
    budgets = replication_budgets(groups, "east")
    assert list(budgets) == ["gold@west"]
    b = budgets["gold@west"]
    assert b.rates("replication") == (60.0, 6000.0) and b.rates("publish") == (-1.0, -1.0)
    assert replication_budgets(groups, "north")["gold@west"].rates("replication") == (5.0, -1.0)
    reg = GroupRegistry(groups=dict(groups))
    reg.with_budgets("east")
    assert reg.replication_budget(groups["gold"], "west") is reg.budget_map()["gold@west"]
    # a remote cluster without an entry replicates under the group's own replication rates
    assert reg.replication_budget(groups["gold"], "south") is groups["gold"]
    assert set(reg.budget_map()) == {"gold", "gold@west"}


def test_a_budget_name_is_never_a_group_name():
    assert split_budget(budget_name("gold", "west")) == ("gold", "west")
    assert split_budget("gold") == ("gold", "")
    with pytest.raises(InvalidGroup):
        check_name("resource group", "gold@west")
    with pytest.raises(ConfigError, match="gold@west"):
        parse_config(b"resourcegroups:\n  gold@west: {publishRateInMsgs: 1}\n", "c.yaml")
    with pytest.raises(InvalidGroup):
        ConfigChange("group/gold@west", {"publishRateInMsgs": 1}, 1, "d1").validate()


def test_the_store_derives_budgets_for_its_local_cluster():
    store = ConfigStore(local_cluster="east")
    store.apply(ConfigChange("group/gold", ResourceGroup.from_admin("gold", BODY).to_admin(), 1, "d1"))
    assert set(store.effective.budget_map()) == {"gold", "gold@west"}
    store.apply(ConfigChange("group/gold", {**BODY, "replicatorDispatchRate": {}}, 2, "d1"))
    assert set(store.effective.budget_map()) == {"gold"}


def test_the_config_file_takes_the_map_and_shadow_mode():
    doc = parse_config(b"""
resourcegroups:
  gold:
    shadowMode: true
    replicationDispatchRateInMsgs: 100
    replicatorDispatchRate:
      east->west: {dispatchThrottlingRateInMsg: 60}
""", "c.yaml")
    gold = doc.registry.groups["gold"]
    assert gold.shadow_mode and gold.replicator_rates[0].messages == 60.0


@pytest.mark.parametrize(("body", "message"), [
    (b'{"namespace": "a/b", "kind": "publish", "remote_cluster": "west"}', "remote_cluster: only for kind replication"),
    (b'{"namespace": "a/b", "kind": "replication", "remote_cluster": "we@st"}', "remote_cluster: expected a cluster"),
    (b'{"namespace": "a/b", "kind": "replication", "remote_cluster": ""}', "remote_cluster: expected a cluster"),
    (b'{"requests": [{"namespace": "a/b", "kind": "replication", "remote_cluster": 5}]}',
     "requests[0].remote_cluster: expected a cluster"),
])
def test_bad_remote_clusters_are_named(body, message):
    from rgd.api.errors import ApiError
    from rgd.api.requests import parse_body

    with pytest.raises(ApiError, match=re.escape(message)):
        parse_body(body)


def test_both_parsers_read_remote_cluster_alike():
    from rgd.api.requests import decode_well_formed, parse_asks, parse_json

    body = b'{"namespace": "a/b", "kind": "replication", "remote_cluster": "west", "messages": 2}'
    assert decode_well_formed(body) == parse_asks(parse_json(body))
    assert decode_well_formed(body)[0][0].remote_cluster == "west"


def test_the_cluster_name_setting_follows_the_name_rule():
    from rgd.config.settings import Settings, SettingsError, validate

    assert validate(Settings(cluster_name="us-east:1")).cluster_name == "us-east:1"
    with pytest.raises(SettingsError, match="cluster_name"):
        validate(Settings(cluster_name="us east"))
