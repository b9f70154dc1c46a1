"""A report too large for one broker message goes out as consecutive reports; peers hold every entry.

When trimming namespace lists is not enough (tens of thousands of groups with traffic
on one daemon), ClusterNode splits its report (report_builder.split_points): the head
keeps its sequence number, continuations take the next ones, and the daemon publishes
them back to back. Live here: two daemons on the real broker, one whose every tick report is split, the other
holding all its entries with no report counted lost. The pure cut and ClusterNode on a fake
clock are in tests/unit/test_report_split.py.
"""

from __future__ import annotations

import asyncio

import pytest

import rgd.cluster.node
from rgd.cluster.node import ClusterNode, TickOutcome
from rgd.transport.session import PulsarSession
from tests.support.live import base_url, wait_for, write_config

# The group names of the pure tests (tests/unit/test_report_split.py): 60 groups whose entries
# overflow the 2 000-byte budget set below.
GROUPS = [f"group-{i:03d}" for i in range(60)]


@pytest.mark.parametrize("client", ["prompt", "slow"])
async def test_peers_hold_every_entry_of_a_daemon_whose_reports_are_split(make_daemon, http, tmp_path,
                                                                          monkeypatch, client) -> None:
    """`slow`: every send waits 40 ms before it reaches the client, as on a loaded machine, so
    react's reports (answers to peers, rises) are numbered while a split tick report is still
    going out part by part; they must still reach the topic in the order they were numbered."""
    monkeypatch.setattr(rgd.cluster.node, "MAX_REPORT_BYTES", 2_000)
    if client == "slow":
        publish_report = PulsarSession.publish_report

        async def slow(session: PulsarSession, data: bytes, properties: dict[str, str] | None) -> None:
            await asyncio.sleep(0.04)
            await publish_report(session, data, properties)

        monkeypatch.setattr(PulsarSession, "publish_report", slow)
    published_continuations: list[int] = []
    tick_report = ClusterNode.tick_report

    def counting(node: ClusterNode, now: float) -> TickOutcome:
        out = tick_report(node, now)
        if node.node_id == "a" and len(out.parts) > 1:
            published_continuations.append(len(out.parts) - 1)
        return out

    monkeypatch.setattr(ClusterNode, "tick_report", counting)
    groups = {name: {"publishRateInMsgs": 1000} for name in GROUPS}
    cfg = write_config(tmp_path / "c.yaml", groups, tenants={f"t-{name}": name for name in GROUPS})
    a = await make_daemon("a", cfg, tick=0.2)
    b = await make_daemon("b", cfg, tick=0.2)
    await wait_for(lambda: len(a.node.members()) == 2 and len(b.node.members()) == 2, 15)
    asks = [{"namespace": f"t-{name}/ns", "messages": 1} for name in GROUPS]
    async with http.post(base_url(a) + "/v1/acquire", json={"requests": asks}) as r:
        assert r.status == 200

    def b_holds(name: str) -> bool:
        b.usage_map.fold_group(name)  # b serves none of them: a's entries are held unparsed till asked about
        return "a" in b.usage_map.groups.get(name, {})

    await wait_for(lambda: all(b_holds(name) for name in GROUPS), 10)
    ticks = a.ticks
    step = 0
    while a.ticks < ticks + 5:  # demand rising on both: early reports, and answers to the other's
        step += 1
        for d in (a, b):
            async with http.post(base_url(d) + "/v1/acquire",
                                 json={"requests": [{"namespace": "t-group-000/ns", "messages": 5 * step}]}) as r:
                assert r.status == 200
        await asyncio.sleep(0.03)
        assert step < 200, "a made no 5 ticks in 6 s"
    assert published_continuations and min(published_continuations) >= 1  # a's reports went out split
    assert b.metrics.reports_lost._value.get() == 0
    assert b.metrics.reports_rejected.labels("duplicate")._value.get() == 0
    assert a.metrics.publish_errors._value.get() == 0
    assert "a" in b.node.members() and "b" in a.node.members()
