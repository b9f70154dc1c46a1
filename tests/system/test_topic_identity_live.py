"""Live, signed daemons against replays and oversized reports from the topic.

A third daemon runs, its genuine signed reports are captured from the topic, it
leaves; replayed, they are rejected (`replay`) and its ghost never rejoins. A
report with 100,000 group entries is rejected before parsing
(`too_many_groups`) and the daemons' memory does not grow by its size. The
timing figures of the same attacks are scripts/probe_topic_attacks.py's.
"""

from __future__ import annotations

import time

import pulsar

from rgd.wire.usage_report_pb2 import UsageReport
from tests.support.cluster_harness import Cluster, wait_until


def _members(c: Cluster, daemon_id: str) -> set[str]:
    _, doc = c.daemons[daemon_id].get_json("/readyz")
    return set(doc["members"])


def _send_until(producer, messages: list[tuple[bytes, dict[str, str]]], done, rounds: int = 6) -> None:
    """Send `messages` again until `done()` holds, at most `rounds` times, waiting up to 5 s
    after each round. The topic is non-persistent: the broker may drop a message for a
    consumer that is busy (Pulsar does when it has no permits), so a count of one send can
    fall short on a loaded machine (CI: 4 of 5 counted). Every copy that does arrive must
    still be rejected, so the counts only grow if the rejection works."""
    for _ in range(rounds):
        for data, props in messages:
            producer.send(data, properties=props)
        try:
            wait_until(done, 5)
            return
        except AssertionError:
            continue
    raise AssertionError(f"not done after {rounds} rounds of {len(messages)} messages")


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_a_departed_daemons_replayed_reports_and_a_huge_report_are_rejected(broker, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("k1:live-identity-secret-0123456789\n")
    c = Cluster(broker.url, tmp_path, quota=300, tick=0.5)
    c.extra = ["--report-hmac-keys-file", str(keys)]
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        spy = client.subscribe(c.topic, "spy", consumer_type=pulsar.ConsumerType.Exclusive)
        for d in ("d1", "d2", "d3"):
            c.start(d, wait=False)
        for d in ("d1", "d2", "d3"):
            c.daemons[d].wait_ready()
        wait_until(lambda: _members(c, "d1") == {"d1", "d2", "d3"}, 10)
        time.sleep(1.5)  # deliberate: d3 publishes a few tick reports for the spy to capture
        c.daemons["d3"].stop()
        wait_until(lambda: _members(c, "d1") == {"d1", "d2"} == _members(c, "d2"), 10)
        # Read what the topic carried until now. Not "until 300 ms pass without a message":
        # d1 and d2 tick every 0.5 s, and with their phases 0.2-0.3 s apart no gap is that
        # long, so that loop never ended (a CI run hung here for ten minutes).
        caught_up_ms = int(time.time() * 1000)
        deadline = time.monotonic() + 30
        captured = []
        while time.monotonic() < deadline:
            try:
                msg = spy.receive(300)
            except pulsar.Timeout:
                break
            if msg.publish_timestamp() > caught_up_ms:
                break
            report = UsageReport.FromString(msg.data())
            if report.daemon_id == "d3" and not report.leaving:
                captured.append((msg.data(), dict(msg.properties())))
        assert len(captured) >= 2
        producer = client.create_producer(c.topic, batching_enabled=False)
        _send_until(producer, captured, lambda: all(
            c.metric(d, "rgd_reports_rejected_total", reason="replay") >= len(captured) for d in ("d1", "d2")))
        time.sleep(1.0)  # a tick: had the ghost been admitted, /readyz would list it now
        assert _members(c, "d1") == {"d1", "d2"} == _members(c, "d2")

        huge = UsageReport(daemon_id="bloat", sequence=1, incarnation=1, tick_ms=1000,
                           publish_time_ms=int(time.time() * 1000))
        for i in range(100_000):
            huge.groups.add(group=f"x{i:06d}").publish.throttled_messages = 100
        data = huge.SerializeToString()
        rss = {d: _rss_mb(c.daemons[d].process.pid) for d in ("d1", "d2")}
        floods = []
        for seq in range(2, 7):
            huge.sequence = seq
            floods.append((huge.SerializeToString(), {}))
        _send_until(producer, floods, lambda: all(
            c.metric(d, "rgd_reports_rejected_total", reason="too_many_groups") >= 5 for d in ("d1", "d2")))
        # At least five 1.5 MB reports, none kept: what the old code grew by (~120 MB) is far above this.
        for d in ("d1", "d2"):
            assert _rss_mb(c.daemons[d].process.pid) - rss[d] < 20, f"{d}: {len(data)}-byte reports kept"
        assert _members(c, "d1") == {"d1", "d2"}
    finally:
        client.close()
        c.stop_all()
