"""The tick accounting (rgd.usage_log.accounting): what the limiter's collects took, logged once
each, and what a replay makes of it: totals from the accounting alone, a lost frame's count
known exactly from the running totals, a log without a final frame read as a crash."""

from __future__ import annotations

from pathlib import Path

from rgd.config.groups import ResourceGroup
from rgd.fairness.decode import A_ADM_M, A_FINAL, decode_segment, decode_segment_python, name_key
from rgd.fairness.merge import accounting_summary
from rgd.fairness.series import Grid
from rgd.fairness.task import process_segment
from rgd.limiting.limiter import Limiter
from rgd.usage_log import UsageLog, read_segment
from rgd.usage_log.accounting import TickAccounting
from rgd.wire.log_entry_pb2 import LogEntryMetadata
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport

GOLD = ResourceGroup("gold", publish_msgs=10)
SILVER = ResourceGroup("silver", publish_msgs=1000)
GROUPS = {"gold": GOLD, "silver": SILVER}
T0 = 1_700_000_000.0


def _ask(limiter: Limiter, group: ResourceGroup, n: int, now: float) -> int:
    return sum(limiter.acquire(group, "publish", 1, 100, f"{group.name}/ns", now=now).allowed for _ in range(n))


def test_every_collect_is_one_record_with_running_totals() -> None:
    limiter = Limiter(lambda: 0.0)
    taken = []
    limiter.on_collect = taken.append
    acct = TickAccounting("d1", 7, int(T0 * 1000))
    allowed = _ask(limiter, GOLD, 30, 0.0) + _ask(limiter, SILVER, 5, 0.0)
    record, cumulative = acct.record(limiter.collect(), limiter.states, GROUPS, int(T0 * 1000) + 1000)
    assert len(taken) == 1  # the hook saw the collect
    rep = UsageReport.FromString(record)
    assert (rep.daemon_id, rep.sequence, rep.incarnation, rep.tick_ms) == ("d1", 1, 7, 1000)
    by_group = {g.group: g.publish for g in rep.groups}
    assert by_group["silver"].admitted_messages == 5
    assert by_group["gold"].admitted_messages + by_group["gold"].throttled_messages == 30
    assert cumulative[0] == allowed and cumulative[2] == 35 - allowed
    assert by_group["gold"].quota_messages == 10
    _ask(limiter, SILVER, 3, 1.0)
    record, cumulative = acct.record(limiter.collect(), limiter.states, GROUPS, int(T0 * 1000) + 2000)
    assert UsageReport.FromString(record).sequence == 2 and cumulative[0] == allowed + 3


def _log_run(tmp_path: Path, *, lose: int | None = None, final: bool = True) -> tuple[Path, list[int]]:
    """Five ticks of one daemon: accounting frames (one torn out when `lose` is given) and
    published reports that suppress silver after the first tick."""
    log = UsageLog(tmp_path, "d1", archive_threaded=False, accounting=True, clock=lambda: T0)
    limiter = Limiter(lambda: 0.0)
    acct = TickAccounting("d1", 7, int(T0 * 1000))
    admitted = []
    for t in range(5):
        now = float(t)
        n = _ask(limiter, GOLD, 12, now) + _ask(limiter, SILVER, 4, now)
        admitted.append(n)
        record, cumulative = acct.record(limiter.collect(), limiter.states, GROUPS, int((T0 + t + 1) * 1000))
        if t != lose:
            log.append_accounting(record, cumulative, final=final and t == 4, write_time=T0 + t + 1)
        published = UsageReport(daemon_id="d1", sequence=t + 1, publish_time_ms=int((T0 + t + 1) * 1000),
                                tick_ms=1000, incarnation=7)
        for g in UsageReport.FromString(record).groups:
            if t == 0 or g.group == "gold":
                published.groups.append(g)
        log.append_published(published.SerializeToString(), write_time=T0 + t + 1)
    log.close()
    (seg,) = sorted(tmp_path.glob("d1-*.seg"))
    return seg, admitted


def test_accounting_frames_are_flushed_as_written(tmp_path: Path) -> None:
    log = UsageLog(tmp_path, "d1", archive_threaded=False, accounting=True)
    log.append_accounting(b"", (1, 2, 3, 4))
    (open_seg,) = tmp_path.glob("d1-*.open")
    frames, _ = read_segment(open_seg)  # in the file before any close or maintain: a SIGKILL keeps it
    assert frames[0].metadata.kind == LogEntryMetadata.ACCOUNTING
    assert frames[0].metadata.cumulative_throttled_bytes == 4
    log.append_published(b"")
    log.close()
    (seg,) = tmp_path.glob("d1-*.seg")
    assert [f.metadata.accounted for f in read_segment(seg)[0]] == [False, True]


def test_replay_counts_the_accounting_and_skips_accounted_reports(tmp_path: Path) -> None:
    seg_path, admitted = _log_run(tmp_path)
    data = seg_path.read_bytes()
    seg = decode_segment(data)
    assert seg.accounting.size == 5 and seg.published.size == 5
    assert seg.group_meta.shape[0] == 10  # 5 ticks x 2 groups, all from the accounting
    assert decode_segment_python(data)[1] == 10
    assert seg.counts[:, 0].sum() == sum(admitted)
    assert seg.accounting_meta[:, A_ADM_M].tolist() == [sum(admitted[:i + 1]) for i in range(5)]
    assert seg.accounting_meta[:, A_FINAL].tolist() == [0, 0, 0, 0, 1]
    _, meta = process_segment(data, str(seg_path), Grid(1000, 3600, 10))
    totals = dict(zip(meta.totals["group"].tolist(), meta.totals["counts"][:, 0].tolist()))
    assert sum(totals.values()) == sum(admitted) and totals[name_key("silver")] == 4 * 5
    summary = accounting_summary([meta], meta.names, ["d1"])
    assert summary["source"] == "tick accounting" and summary["daemons"]["d1"]["ended"] == "stopped"
    assert summary["missing_frames"] == 0 and summary["missing_admitted_messages"] == 0


def test_a_lost_frame_is_counted_exactly_and_a_missing_final_frame_is_a_crash(tmp_path: Path) -> None:
    seg_path, admitted = _log_run(tmp_path, lose=2, final=False)
    _, meta = process_segment(seg_path.read_bytes(), str(seg_path), Grid(1000, 3600, 10))
    d1 = accounting_summary([meta], meta.names, ["d1"])["daemons"]["d1"]
    assert d1["missing_frames"] == 1 and d1["missing_admitted_messages"] == admitted[2]
    assert d1["ended"] == "crashed" and d1["last_collect_ms"] == int((T0 + 5) * 1000)


def test_a_log_without_accounting_is_published_reports_only(tmp_path: Path) -> None:
    log = UsageLog(tmp_path, "old", archive_threaded=False)
    report = UsageReport(daemon_id="old", sequence=1, publish_time_ms=int(T0 * 1000), tick_ms=1000, incarnation=1)
    report.groups.append(GroupUsage(group="gold"))
    report.groups[0].publish.admitted_messages = 9
    log.append_published(report.SerializeToString())
    log.close()
    (seg_path,) = tmp_path.glob("old-*.seg")
    _, meta = process_segment(seg_path.read_bytes(), str(seg_path), Grid(1000, 3600, 10))
    assert meta.totals["counts"][:, 0].tolist() == [9]
    summary = accounting_summary([meta], meta.names, ["old"])
    assert summary["source"] == "published reports only" and summary["daemons_published_only"] == ["old"]


async def test_the_daemon_builds_large_records_off_the_loop_in_order(tmp_path: Path) -> None:
    from rgd.config.file import parse_config
    from rgd.config.settings import Settings
    from rgd.daemon.wiring import ACCOUNT_INLINE_KEYS, Daemon

    n = ACCOUNT_INLINE_KEYS + 100
    doc = "resourcegroups:\n" + "".join(f"  g{i}: {{publishRateInMsgs: 5}}\n" for i in range(n))
    daemon = Daemon(Settings(id="big", log_dir=str(tmp_path / "log"), data_dir=str(tmp_path / "data")),
                    parse_config(doc.encode(), str(tmp_path / "rgd.yaml")))
    daemon._open_usage_log()
    groups = daemon.config.effective.groups
    allowed = 0
    for tick in range(3):
        for i in range(n):
            allowed += _ask(daemon.limiter, groups[f"g{i}"], 2 + tick, float(tick))
        daemon.limiter.collect()  # as the tick does: the record is built in a worker thread
    assert daemon._accounting_pending  # not on the loop
    allowed += _ask(daemon.limiter, groups["g0"], 1, 3.0)
    await daemon._account_final()
    assert daemon.usage_log is not None
    daemon.usage_log.close()
    frames = [f for seg in sorted((tmp_path / "log").glob("big-*.seg")) for f in read_segment(seg)[0]]
    acct = [f for f in frames if f.metadata.kind == LogEntryMetadata.ACCOUNTING]
    assert [UsageReport.FromString(f.payload).sequence for f in acct] == [1, 2, 3, 4]
    assert [f.metadata.final for f in acct] == [False, False, False, True]
    assert acct[-1].metadata.cumulative_admitted_messages == allowed
    assert sum(g.publish.admitted_messages for f in acct for g in UsageReport.FromString(f.payload).groups) == allowed
