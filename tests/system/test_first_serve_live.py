"""A daemon that starts serving a group a peer is busy in leaves the peer its share from its
first ask, live.

A daemon holds a peer's entries of groups it does not serve as the bytes they came in and
parses them when a broker first asks it for the group (rgd/cluster/usage_map.py,
`fold_group`; docs/design/protocol.md, M3). Peers report only what changed, so a busy
peer's steady figure was sent long before: dropped or left unparsed, the newcomer would
count the peer idle and grant itself the whole quota beside the peer's share.

Two daemons, quota 100 msg/s: d1 offered 80 from the start; d2's brokers ask nothing
until 4 s in, then 80. The cluster must stay within the quota plus 10 % in every
second, and d2's first second must leave d1 most of what it was using.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.cluster_harness import Cluster
from tests.support.scripts import load_script

probe = load_script("reaction_probe")

QUOTA = 100.0
START = 4.0  # d2's first ask, seconds into the load
SECONDS = 8.0


@pytest.mark.timing
def test_a_daemon_first_asked_for_a_busy_group_leaves_the_peer_its_share(broker, tmp_path: Path) -> None:
    c = Cluster(broker.url, tmp_path, quota=QUOTA)
    try:
        c.start_members("d1", "d2")
        counts = probe.Counts()
        streams = [(c.daemons["d1"].url, ("d1", "gold"), "acme/x", lambda _t: 80.0),
                   (c.daemons["d2"].url, ("d2", "gold"), "acme/y", lambda t: 0.0 if t < START else 80.0)]
        asyncio.run(probe.run_load(streams, SECONDS, counts))
    finally:
        c.stop_all()
    keys = [("d1", "gold"), ("d2", "gold")]
    first = counts.first_ask[("d2", "gold")]
    assert START <= first < START + 0.5
    windows = [sum(counts.decided_in(k, s, s + 1.0) for k in keys)
               for s in [first - 1.0 + i * probe.BIN for i in range(int((SECONDS - first) / probe.BIN))]]
    d2_first = counts.admitted_in(("d2", "gold"), first, first + 1.0)
    print(f"\nd2's first second: {d2_first} admitted; worst second of the cluster from then: {max(windows)}")
    assert max(windows) <= 1.1 * QUOTA, windows
    assert d2_first <= QUOTA - 0.6 * 80.0, d2_first
