"""A live, HMAC-signed cluster (keys mid-rotation) under hostile topic traffic:
every bad message is rejected and counted by reason, none is applied, and the
daemons keep their fair shares."""

from __future__ import annotations

import asyncio
import math
import time

import pulsar
import pytest

from rgd.cluster.report_codec import HmacKeys
from rgd.devtools.load_generator import Stream, constant, run_streams
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport
from tests.support.cluster_harness import Cluster, wait_until


def hostile_reports(now_ms: int) -> dict[str, UsageReport]:
    def rep(daemon_id="intruder", **kw):
        r = UsageReport(daemon_id=daemon_id, sequence=kw.get("sequence", 1), publish_time_ms=kw.get("t", now_ms),
                        tick_ms=1000, incarnation=kw.get("incarnation", 1))
        g = GroupUsage(group="gold")
        g.publish.admitted_messages = kw.get("admitted", 100000)
        g.publish.limit_messages = kw.get("limit", 1.0)
        r.groups.append(g)
        return r

    return {
        "invalid_value": rep(limit=math.nan),
        "invalid_value2": rep(admitted=2**63, sequence=2),
        "clock_skew": rep(t=now_ms + 3_600_000),
        "clock_skew2": rep(t=now_ms - 86_400_000),
        "spoofed_self": rep(daemon_id="d2", incarnation=5),
    }


def test_signed_cluster_rejects_hostile_traffic(broker, tmp_path):
    k1 = tmp_path / "keys-d1"
    k1.write_text("k1:first-secret-abcdefghij\nk2:second-secret-abcdefghij\n")  # signs with k1
    k2 = tmp_path / "keys-d2"
    k2.write_text("k2:second-secret-abcdefghij\nk1:first-secret-abcdefghij\n")  # already on k2
    c = Cluster(broker.url, tmp_path, quota=300)
    try:
        c.extra = ["--report-hmac-keys-file", str(k1)]
        c.start("d1", wait=False)
        c.extra = ["--report-hmac-keys-file", str(k2)]
        c.start("d2", wait=False)
        for d in c.daemons.values():
            d.wait_ready()
        signer = HmacKeys.load(str(k1))
        client = pulsar.Client(broker.url)
        try:
            spy = client.subscribe(c.topic, "spy", consumer_type=pulsar.ConsumerType.Exclusive)
            producer = client.create_producer(c.topic, batching_enabled=False)
            t0 = time.monotonic()

            async def scenario():
                load = asyncio.create_task(run_streams(
                    [Stream(c.daemons["d1"].url, "acme/a", constant(240)),
                     Stream(c.daemons["d2"].url, "acme/b", constant(90))], 14, t0))
                await asyncio.sleep(4)  # deliberate: the scenario's timeline (the attacks start 4 s in)
                # A genuine report from d1, captured and replayed: a duplicate.
                genuine = await asyncio.to_thread(spy.receive, 5000)
                while UsageReport.FromString(genuine.data()).daemon_id != "d1":
                    genuine = await asyncio.to_thread(spy.receive, 5000)
                producer.send(genuine.data(), properties=dict(genuine.properties()))
                # Unsigned, and signed with an unknown key: bad signature.
                forged = hostile_reports(int(time.time() * 1000))["invalid_value"].SerializeToString()
                producer.send(forged)
                producer.send(forged, properties={"rgd-key-id": "k1", "rgd-hmac": "ab" * 32})
                # Validly signed but absurd or lying: rejected by value.
                for r in hostile_reports(int(time.time() * 1000)).values():
                    data = r.SerializeToString()
                    producer.send(data, properties=signer.sign(data))
                producer.send(b"\x08\x96\x01garbage", properties=signer.sign(b"\x08\x96\x01garbage"))
                return await load

            stats = asyncio.run(scenario())
        finally:
            client.close()

        wait_until(lambda: c.metric("d2", "rgd_reports_rejected_total", reason="spoofed_self") >= 1, 5)
        for d in ("d1", "d2"):
            assert c.metric(d, "rgd_reports_rejected_total", reason="bad_signature") >= 2
            assert c.metric(d, "rgd_reports_rejected_total", reason="invalid_value") >= 2
            assert c.metric(d, "rgd_reports_rejected_total", reason="clock_skew") >= 2
            assert c.metric(d, "rgd_reports_rejected_total", reason="malformed") >= 1
        assert c.metric("d2", "rgd_reports_rejected_total", reason="duplicate") >= 1
        # Nothing was applied: no intruder in the map, fair shares intact (240/90 at 300 -> 210/90).
        _, stats_doc = c.daemons["d1"].get_json("/admin/v2/resourcegroups/gold/stats")
        assert set(stats_doc["members"]) == {"d1", "d2"}
        assert stats[0].admitted_between(9, 13) / 4 == pytest.approx(210, rel=0.1)
        assert stats[1].admitted_between(9, 13) / 4 == pytest.approx(90, rel=0.1)
    finally:
        c.stop_all()
