"""Partitions in the simulator: the scenario event, the topic cut, the brokers still answered."""

from __future__ import annotations

import pytest
import yaml

from rgd.wire.usage_report_pb2 import UsageReport
from sim.engine import Simulation
from sim.node import wall_ms
from sim.scenario import ScenarioError, load, parse
from sim.transport import Transport, TransportSpec

DOC = """
ticks: 30
daemons: [a, b, c]
groups:
  g: {publishRateInMsgs: 100}
demand:
  g: {a: 60, b: 60, c: 60}
events:
  - {at: 8, partition: [c]}
  - {at: 20, heal: [c]}
"""


class Receipts:
    """A ReportLog that keeps who received whose report when."""

    def __init__(self) -> None:
        self.got: list[tuple[float, str, str]] = []  # now, receiver, sender
        self.published_at: list[int] = []  # per receipt in `got`: the report's publish time (wall ms)
        self.sent: list[tuple[float, str]] = []

    def published(self, node_id: str, data: bytes, now: float) -> None:
        self.sent.append((now, node_id))

    def received(self, node_id: str, report: UsageReport, data: bytes, now: float) -> None:
        self.got.append((now, node_id, report.daemon_id))
        self.published_at.append(report.publish_time_ms)

    def tick(self, node_id: str, now: float) -> None:
        pass

    def attach(self, node: object) -> None:  # tick accounting: not what this test watches
        pass

    def detach(self, node: object, graceful: bool) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_partition_events_parse() -> None:
    sc = parse(yaml.safe_load(DOC))
    assert [(e.at, e.partition, e.heal) for e in sc.events] == [(8, ("c",), ()), (20, (), ("c",))]
    assert load("partition").events[0].partition == ("c",)


def test_bad_partition_events_name_the_key() -> None:
    doc = yaml.safe_load(DOC)
    doc["events"] = [{"at": 3, "partition": ["c"], "heal": ["c"]}]
    with pytest.raises(ScenarioError, match=r"events\[0\]: daemon 'c' is both partitioned and healed"):
        parse(doc)
    doc["events"] = [{"at": 3, "partition": [5]}]
    with pytest.raises(ScenarioError, match=r"events\[0\]\.partition\[0\]"):
        parse(doc)
    for events, message in (([{"at": 3, "heal": ["c"]}], "'c' is not partitioned"),
                            ([{"at": 3, "partition": ["zz"]}], "'zz' is not running"),
                            ([{"at": 3, "partition": ["c"]}, {"at": 4, "partition": ["c"]}], "partitioned already")):
        doc["events"] = events
        with pytest.raises(ScenarioError, match=message):
            Simulation(parse(doc), "rgd").run()


def test_a_cut_daemon_neither_hears_nor_is_heard_while_its_brokers_get_answers() -> None:
    log = Receipts()
    sim = Simulation(parse(yaml.safe_load(DOC)), "rgd", log=log)
    result = sim.run()
    cut = [(t, r, s) for t, r, s in log.got if 8.0 <= t < 20.0]
    assert cut, "peers kept exchanging reports during the cut"
    # A report the cut daemon published at the react just before the cut (7.999999 s, stamped
    # 8 000 ms) may still arrive as it starts; none it published during the cut arrives.
    sent_in_cut = [x for x, at in zip(log.got, log.published_at, strict=True)
                   if x[2] == "c" and wall_ms(8.0) < at < wall_ms(20.0)]
    assert not sent_in_cut, "a report the cut daemon published during the cut reached someone"
    assert not [x for x in cut if x[1] == "c"], "the cut daemon received a report"
    assert any(s == "c" for t, s in log.sent if 8.0 <= t < 20.0), "the cut daemon stopped publishing"
    # Before and after the cut, its reports reach both peers.
    for lo, hi in ((1.0, 8.0), (21.0, 30.0)):
        assert {r for t, r, s in log.got if s == "c" and lo <= t < hi and r != "c"} == {"a", "b"}
    # Its brokers keep asking it all along (60 msg/s, 30 s: asked 1 800 in all), and it keeps
    # answering: yes while its lease holds, then no. The lease (3 ticks) runs from the send time
    # of its last report a peer acknowledged, before the cut at 8.0, so from tick 11 on it admits
    # nothing until the heal (docs/design/protocol.md, P4); it had its share just before.
    state = sim.nodes["c"].limiter.states[("g", "publish")]
    assert state.total_admitted_messages + state.total_throttled_messages >= 1_700
    series = result.dims["g/publish"]
    assert series[7] is not None and series[7].admitted["c"] >= 30, series[7].admitted
    assert series[8] is not None and series[8].admitted["c"] > 0, series[8].admitted
    for k in range(11, 20):
        tick = series[k]
        assert tick is not None and tick.admitted["c"] == 0, (k, tick.admitted)
    assert result.reports_cut > 0
    assert result.changes[1].label == "partition c" and result.changes[2].label == "heal c"


def test_the_topic_drops_what_a_cut_daemon_sends_and_what_is_due_to_it() -> None:
    t = Transport(TransportSpec(delay=1.0), seed=1)
    t.publish("a", b"before", 0.0, ["a", "b", "c"])  # in flight to c when c is cut
    t.cut.add("c")
    t.publish("c", b"from-c", 0.5, ["a", "b", "c"])
    t.publish("b", b"from-b", 0.5, ["a", "b", "c"])
    got = t.due(5.0)
    assert got == [("a", b"before"), ("b", b"before"), ("a", b"from-b"), ("b", b"from-b")]
    assert t.cut_off == 3 + 2  # c's three deliveries, and the two due to it
