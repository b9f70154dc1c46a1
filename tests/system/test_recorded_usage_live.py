"""Usage recorded after the fact once a second reads at its rate, live, in every daemon layout.

Brokers charge dispatch after the fact (`POST /v1/usage`), and one that records each second's
messages at once leaves nothing between its records. Measured over an early report's window
(a fifth of a tick since the last report), such a record read as five times its rate: a rise,
reported at once with that figure, so peers held five times the daemon's demand for part of
every second and gave themselves less. A record covers the time since the one before it
(rgd.limiting.limiter.KindState.recorded_span), so the figures read the rate. The split layout hands
that time over with the counts (rgd.daemon.limiter_link), so it is checked too.

Two daemons, one group (quota 300 msg/s, far above the load: nothing is throttled); d1's
brokers record 40 messages once a second for 9 s. Every report d1 publishes (its usage log)
must read about 40 a second (one record a tick, or two in a tick whose records came either
side of its edges, then over the two seconds they cover, or none), never a burst's rate, and
name the group at most once a tick (no early report of a rise that is not one).
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.acknowledged_rise import read_logs
from tests.support.cluster_harness import LAYOUTS, Cluster

RECORDS = 9
MESSAGES = 40


def _record(url: str) -> None:
    body = json.dumps({"namespace": "acme/x", "kind": "publish", "messages": MESSAGES,
                       "bytes": MESSAGES * 100}).encode()
    request = urllib.request.Request(url + "/v1/usage", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert json.loads(resp.read()) == {"recorded": 1, "ungrouped": 0}


@pytest.mark.timing
@pytest.mark.parametrize("layout", ["one-process", "cluster-process"])
def test_usage_recorded_once_a_second_is_reported_at_its_rate_not_as_a_rise(broker, tmp_path: Path,
                                                                           layout: str) -> None:
    c = Cluster(broker.url, tmp_path, extra=LAYOUTS[layout])
    try:
        c.start_members("d1", "d2")
        started = time.time()
        for i in range(RECORDS):
            time.sleep(max(0.0, started + i - time.time()))
            _record(c.daemons["d1"].url)
        c.wait_ticks(2)
    finally:
        c.stop_all()
    reports = sorted(read_logs(tmp_path / "logs")["d1"].published.items())
    # After the second record: the first covers the time since the group's bucket was born.
    figures = [g.publish.admitted_messages + g.publish.throttled_messages
               for _, r in reports if r.publish_time_ms >= (started + 1.5) * 1000
               for g in r.groups if g.group == "gold" and g.HasField("publish")]
    print(f"\n{layout}: d1's figures for gold after its second record: {figures}")
    assert figures, "d1 reported nothing of gold"
    assert max(figures) <= 1.5 * MESSAGES, figures  # a record measured over a fifth of a tick read 200
    assert sum(f >= 0.75 * MESSAGES for f in figures) >= len(figures) // 2, figures
    # At most a report of gold a tick: a rise went out between ticks as well, every second.
    assert len(figures) <= RECORDS + 2, figures
