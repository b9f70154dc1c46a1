"""SIGKILL a daemon under load and restart it: no burst above the quota, peers
accept its new incarnation without counting loss, its log repairs a torn tail."""

from __future__ import annotations

import asyncio
import signal
import time

from rgd.devtools.load_generator import Stream, constant, run_streams
from rgd.usage_log import read_segment
from rgd.wire.usage_report_pb2 import UsageReport
from tests.support.cluster_harness import Cluster, wait_until

QUOTA = 300.0
DEMANDS = {"d1": 240.0, "d2": 90.0, "d3": 30.0}


def test_killed_daemon_rejoins_without_burst(broker, tmp_path):
    c = Cluster(broker.url, tmp_path, quota=QUOTA)
    try:
        for d in DEMANDS:
            c.start(d, wait=False)
        for d in c.daemons.values():
            d.wait_ready()
        t0 = time.monotonic()
        notes: dict[str, float] = {}

        async def scenario():
            load = asyncio.create_task(run_streams(
                [Stream(c.daemons[d].url, f"acme/{d}", constant(r)) for d, r in DEMANDS.items()], 22, t0))
            await asyncio.sleep(7)  # deliberate: the scenario's timeline (the crash 7 s into the load)
            c.daemons["d1"].signal(signal.SIGKILL)
            c.daemons["d1"].process.wait()
            # A crash mid-write: half a frame at the end of the open segment.
            [open_seg] = list((tmp_path / "logs" / "d1").glob("*.open"))
            notes["intact_bytes"] = open_seg.stat().st_size
            with open(open_seg, "ab") as fh:
                fh.write(b"RGDL\x00\x00\x01")
            await asyncio.to_thread(c.start, "d1", False)  # same id and log dir, a new port
            notes["restarted"] = time.monotonic() - t0
            return await load

        # The restarted d1 listens on a new port; its stream keeps hitting the old one
        # (connection refused = counted errors) so cluster admission can only be lower.
        # Drive the restarted process too, from the restart on.
        async def with_rejoin():
            base = asyncio.create_task(scenario())
            while "restarted" not in notes:
                await asyncio.sleep(0.05)
            rejoin = asyncio.create_task(run_streams(
                [Stream(c.daemons["d1"].url, "acme/d1", constant(240))], 22 - notes["restarted"], t0))
            return await base, await rejoin

        stats, rejoined = asyncio.run(with_rejoin())
        per_second = [sum(s.admitted.get(t, 0) for s in stats) + rejoined[0].admitted.get(t, 0) for t in range(2, 21)]
        print(f"\ncrash+restart at {notes['restarted']:.1f}s; cluster admission per second from 2 s: {per_second}")
        assert max(per_second) <= 1.10 * QUOTA
        wait_until(lambda: c.daemons["d1"].get_json("/readyz")[0] == 200, 10)
        for peer in ("d2", "d3"):
            assert c.metric(peer, "rgd_reports_rejected_total", reason="stale_incarnation") == 0
            assert c.metric(peer, "rgd_reports_rejected_total", reason="duplicate") == 0
            assert c.metric(peer, "rgd_reports_lost_total") == 0
        # And it gets its fair share back: 180/90/30.
        assert abs(rejoined[0].admitted_between(17, 21) / 4 - 180) <= 18
    finally:
        c.stop_all()
    # The log repaired its torn tail on reopen: every segment reads clean, and the log
    # index runs on without a gap from the first incarnation into the second.
    segments = sorted((tmp_path / "logs" / "d1").glob("*.seg"))
    frames = []
    for seg in segments:
        got, stats = read_segment(seg)
        assert stats.corrupt_regions == 0 and stats.tail_bytes == 0, stats.problems
        frames += got
    indexes = [f.metadata.log_index for f in frames]
    assert indexes == list(range(indexes[0], indexes[0] + len(indexes)))
    incarnations = {UsageReport.FromString(f.payload).incarnation for f in frames if f.payload}
    assert len(incarnations) == 2, "expected reports from both incarnations"
