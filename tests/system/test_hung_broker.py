"""A broker that freezes with its connections open (SIGSTOP) is an outage, told by our own
reports no longer coming back: not ready with the reason, rgd_broker_connected 0, nothing
admitted once the lease ends (docs/design/protocol.md, P4), no peer evicted (a topic that
carries nothing shows no member silent), and a clean recovery on SIGCONT. The echo
bookkeeping is also tested as pure logic."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request

import pytest

from rgd.config.settings import Settings
from rgd.transport import session as transport
from rgd.transport.broker_liveness import ECHO_DEADLINE_MIN_S, BrokerLiveness, echo_deadline
from rgd.transport.embedded_broker import start_or_join
from rgd.transport.session import CLOSE_TIMEOUT, PulsarSession
from tests.support.cluster_harness import Cluster, wait_until

QUOTA = 300.0
TICK = 0.5


def test_echo_deadline_is_a_tick_and_a_half_with_a_floor() -> None:
    assert echo_deadline(1.0) == 1.5
    assert echo_deadline(2.5) == 3.75
    assert echo_deadline(0.1) == ECHO_DEADLINE_MIN_S


def test_a_report_not_back_within_the_deadline_makes_the_broker_unresponsive() -> None:
    live = BrokerLiveness(deadline=1.0, heard_at=0.0)
    assert live.unresponsive(50.0) is None  # nothing awaited: nothing to tell
    live.published(1, 10.0)
    assert live.unresponsive(11.0) is None  # exactly the deadline: still in time
    live.echoed(1, 10.02)
    assert live.unresponsive(30.0) is None and live.heard_at == 10.02
    live.published(2, 11.0)
    live.published(3, 12.0)
    reason = live.unresponsive(12.5)
    assert reason is not None and "report 2" in reason  # the oldest one awaited
    assert "2.5 s" in reason  # silent since the echo at 10.02
    live.echoed(3, 12.6)  # 2 was lost on the way (non-persistent topic), 3 came back: in order
    assert live.unresponsive(12.6) is None


def test_a_new_session_awaits_nothing_and_counts_as_heard() -> None:
    live = BrokerLiveness(deadline=1.0, heard_at=0.0)
    live.published(1, 1.0)
    assert live.unresponsive(5.0) is not None
    live.reset(5.0)
    assert live.unresponsive(9.0) is None and live.heard_at == 5.0


def test_many_reports_awaited_keep_memory_bounded_and_the_verdict() -> None:
    live = BrokerLiveness(deadline=1.0, heard_at=0.0)
    for seq in range(1, 10_001):
        live.published(seq, seq * 0.01)
    assert len(live._outstanding) <= 256
    assert live.unresponsive(101.0) is not None  # the oldest kept is still far past the deadline


def _put(url: str, doc: dict) -> int:
    req = urllib.request.Request(url, json.dumps(doc).encode(), {"Content-Type": "application/json"}, method="PUT")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def own_broker(tmp_path):
    b = start_or_join(tmp_path / "hung-broker")
    yield b
    if b.process is not None and b.process.poll() is None:
        b.process.send_signal(signal.SIGCONT)
    b.stop()


@pytest.mark.timing
def test_a_frozen_broker_is_an_outage_that_ends_the_leases(own_broker, tmp_path) -> None:
    c = Cluster(own_broker.url, tmp_path, quota=QUOTA, tick=TICK)  # lease: 3 ticks
    try:
        for d in ("d1", "d2"):
            c.start(d, wait=False)
        for d in c.daemons.values():
            d.wait_ready()
        wait_until(lambda: all(len(d.get_json("/readyz")[1]["members"]) == 2 for d in c.daemons.values()), 10)
        evicted_before = sum(c.metric(d, "rgd_evictions_total", reason="ttl") for d in c.daemons)
        # The premises hold before the freeze, and the metrics say so.
        wait_until(lambda: all(c.metric(d, "rgd_round_trip_seconds") > 0 for d in c.daemons), 3 * TICK + 2)
        for name in c.daemons:
            assert c.metric(name, "rgd_lease_valid") == 1
            assert c.metric(name, "rgd_lease_seconds_left") > 0
            assert c.metric(name, "rgd_members_unacknowledging") == 0
            assert c.metric(name, "rgd_members_out_of_sync") == 0
            assert c.metric(name, "rgd_leases_expired_total") == 0
        own_broker.process.send_signal(signal.SIGSTOP)
        # A report is published every tick and may take a tick to come back: two ticks,
        # plus a second for a busy machine.
        # (The lease may end first and make a daemon not ready before the broker's silence is
        # told: wait for the verdict on the broker itself.)
        wait_until(lambda: all(d.get_json("/readyz")[1]["broker_connected"] is False for d in c.daemons.values()),
                   2 * TICK + 1.0)
        for name, d in c.daemons.items():
            status, doc = d.get_json("/readyz")
            assert status == 503 and doc["broker_connected"] is False, doc
            assert "has not come back" in doc["broker_unresponsive"], doc
            assert c.metric(name, "rgd_broker_connected") == 0
            assert c.metric(name, "rgd_broker_unresponsive_total") == 1
        # Within the lease (3 ticks) and a tick: nobody acknowledges us, so we admit nothing.
        wait_until(lambda: all(c.metric(d, "rgd_lease_valid") == 0 for d in c.daemons), 3 * TICK + TICK + 2)
        assert c.local_limit("d1") == c.local_limit("d2") == 0.0
        for name in c.daemons:
            assert c.metric(name, "rgd_lease_seconds_left") == 0
            assert c.metric(name, "rgd_leases_expired_total") == 1
        for d in c.daemons.values():
            lease = d.get_json("/readyz")[1]["lease"]
            assert lease["valid"] is False and lease["why"], lease
        # Nobody is evicted: a topic that carries nothing, not even our own reports, shows no
        # member silent (P4: silence is judged on the topic as far as we have read it, and we
        # read nothing after our last echo). Judged on our clock, each peer was evicted here,
        # a lease into the freeze.
        time.sleep(3 * TICK + TICK + 2)  # as long as the eviction took
        for d in c.daemons.values():
            assert d.get_json("/readyz")[1]["members"] == ["d1", "d2"]
        assert sum(c.metric(d, "rgd_evictions_total", reason="ttl") for d in c.daemons) == evicted_before
        # An admin write meanwhile: in force here at once, queued for the others, not held up.
        started = time.monotonic()
        status = _put(c.daemons["d1"].url + "/admin/v2/resourcegroups/gold", {"publishRateInMsgs": 200})
        assert status == 202 and time.monotonic() - started < 2.0
        own_broker.process.send_signal(signal.SIGCONT)
        wait_until(lambda: all(d.get_json("/readyz")[0] == 200 for d in c.daemons.values()), 10)
        wait_until(lambda: all(d.get_json("/readyz")[1]["members"] == ["d1", "d2"] for d in c.daemons.values()),
                   3 * TICK + 2)
        for name, d in c.daemons.items():
            doc = d.get_json("/readyz")[1]
            assert doc["broker_unresponsive"] is None and doc["lease"]["valid"] is True
            assert c.metric(name, "rgd_broker_connected") == 1
            assert c.metric(name, "rgd_broker_reconnects_total") == 1  # the same session went on
        # The queued change went out once the broker answered again (the same session).
        wait_until(lambda: c.daemons["d2"].get_json("/admin/v2/resourcegroups/gold")[1].get("publishRateInMsgs")
                   == 200, 3 * TICK + 2)
        wait_until(lambda: c.local_limit("d1") > 0 and c.local_limit("d2") > 0, 3 * TICK + 2)
    finally:
        if own_broker.process.poll() is None:
            own_broker.process.send_signal(signal.SIGCONT)
        c.stop_all()


async def test_a_session_on_a_frozen_broker_closes_within_its_bound(own_broker, tmp_path) -> None:
    """A stopping daemon closes its Pulsar session; on a broker that does not answer, each
    close step gives up after CLOSE_TIMEOUT instead of waiting for a callback that may never
    come (a test's teardown once hung there for 10 minutes), and the client is kept
    referenced so the garbage collector never destroys it on one of its own threads."""
    settings = Settings(id="closer", pulsar_url=own_broker.url, topic=f"non-persistent://public/default/c-{tmp_path.name}",
                        config_topic=f"persistent://public/default/cc-{tmp_path.name}")
    session = PulsarSession(own_broker.url, settings, "closer")
    await session.open()
    own_broker.process.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        await session.close()
        took = time.monotonic() - started
    finally:
        own_broker.process.send_signal(signal.SIGCONT)
    # Two bounded steps (the two producers, consumer and reader together, then the client).
    # Unbounded, each waited for the client's 10 s operation timeout: 40 s, past Kubernetes'
    # default 30 s grace before SIGKILL; bounded one by one, 10 s, past the 10 s `rgd up`
    # waits after SIGTERM.
    print(f"close took {took:.2f} s")
    assert CLOSE_TIMEOUT <= 2.0 and took <= 2 * CLOSE_TIMEOUT + 1.0, took
    if took > CLOSE_TIMEOUT:  # at least one step hung: its client is kept, never collected
        assert session.client in transport._UNCLOSED
