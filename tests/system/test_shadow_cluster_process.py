"""Shadow mode with `rgd run --shadow --cluster-process` (a real daemon process): the serving
process answers allowed with the real decision, and the cluster process's /metrics counts
what would have been throttled."""

from __future__ import annotations

import json
import urllib.request

from tests.support.cluster_harness import CLUSTER_PROCESS, Cluster, wait_until
from tests.support.live import write_config


def test_shadow_counts_reach_the_cluster_process(broker, tmp_path):
    c = Cluster(broker.url, tmp_path, extra=[*CLUSTER_PROCESS, "--shadow"])
    write_config(c.config, {"zero": {"publishRateInMsgs": 0}}, tenants={"acme": "zero"})
    try:
        d = c.start("d1")
        body = json.dumps({"requests": [{"namespace": "acme/orders", "messages": 2}] * 5}).encode()
        req = urllib.request.Request(d.url + "/v1/acquire", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            results = json.loads(r.read())["results"]
        assert [a["allowed"] for a in results] == [True] * 5
        assert {a["shadow"]["reason"] for a in results} == {"message_rate"}
        wait_until(lambda: c.metric("d1", "rgd_shadow_throttled_events_total", group="zero", kind="publish",
                                    reason="message_rate", remote_cluster="") == 5, timeout=10)
        assert c.metric("d1", "rgd_shadow_throttled_messages_total", group="zero", kind="publish") == 10
        assert c.metric("d1", "rgd_admitted_messages_total", group="zero", kind="publish") == 10
        assert c.metric("d1", "rgd_throttled_messages_total", group="zero", kind="publish") == 0
    finally:
        c.stop_all()
