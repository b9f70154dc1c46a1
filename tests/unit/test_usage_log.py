"""Usage log: frames, segments, damage, restarts, archive, retention and lag figures."""

from __future__ import annotations

import os
from pathlib import Path

import fsspec
import pytest

from rgd.usage_log import FrameError, UsageLog, decode_frame, encode_frame, read_segment, scan_bytes
from rgd.usage_log.frame import MAGIC, PUBLISHED, RECEIPT
from rgd.usage_log.segment import parse_name
from rgd.wire.log_entry_pb2 import LogEntryMetadata
from rgd.wire.usage_report_pb2 import UsageReport


class FakeClock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def report(daemon: str, seq: int, groups: int = 3) -> UsageReport:
    r = UsageReport(daemon_id=daemon, sequence=seq, publish_time_ms=1_700_000_000_000 + seq * 1000,
                    tick_ms=1000, incarnation=42)
    for g in range(groups):
        gu = r.groups.add(group=f"g{g}")
        gu.publish.admitted_messages = seq * 10 + g
        gu.publish.quota_messages = 100.0
    return r


def seg_files(d: Path, suffix: str = ".seg") -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.endswith(suffix))


def all_frames(d: Path) -> list:
    out = []
    for p in sorted(p for p in d.iterdir() if parse_name(p.name)):
        frames, _ = read_segment(p)
        out.extend(frames)
    return out


def simulate_crash(log: UsageLog) -> None:
    """Drop the log without rolling: buffered bytes reach the file, the `.open` stays."""
    log._writer.flush()
    log._writer.abandon()
    log._lock_fh.close()
    log._closed_flag = True


# -- frames ---------------------------------------------------------------------------------


def test_frame_round_trip_keeps_payload_bytes_and_crc_catches_flips() -> None:
    payload = report("a", 7).SerializeToString() + b"\x00trailing-bytes-kept"
    meta = LogEntryMetadata(kind=PUBLISHED, log_index=5, daemon_id="a", write_time_us=12)
    buf = encode_frame(meta, payload)
    assert buf[:4] == MAGIC
    f = decode_frame(buf)
    assert f.payload == payload and f.end == len(buf)
    assert f.metadata.log_index == 5 and f.metadata.kind == PUBLISHED
    for pos in (5, 9, len(buf) // 2, len(buf) - 1):
        bad = bytearray(buf)
        bad[pos] ^= 0x10
        with pytest.raises(FrameError):
            decode_frame(bytes(bad))
    with pytest.raises(FrameError) as exc:
        decode_frame(buf[:-3])
    assert exc.value.incomplete


def test_reader_resyncs_after_corrupt_middle_and_counts_torn_tail() -> None:
    frames = [encode_frame(LogEntryMetadata(kind=RECEIPT, log_index=i), b"x" * i) for i in range(10)]
    buf = bytearray(b"".join(frames))
    start4 = sum(len(f) for f in frames[:4])
    buf[start4 + 10] ^= 0xFF  # frame 4 corrupt
    start5 = start4 + len(frames[4])
    buf[start5 + 1] = 0  # frame 5's magic broken too
    torn = bytes(buf[: len(buf) - 5])  # frame 9 torn
    got, st = scan_bytes(torn, "seg-x")
    assert [f.metadata.log_index for f in got] == [0, 1, 2, 3, 6, 7, 8]
    assert st.corrupt_regions == 1 and st.bytes_skipped == len(frames[4]) + len(frames[5])
    assert st.frames_lost == 2
    assert st.tail_bytes == len(frames[9]) - 5
    assert any("seg-x" in p and f"offset {start4}" in p for p in st.problems)


# -- writer, rolls, restarts ----------------------------------------------------------------


def test_append_read_back_published_untouched_and_receipts_without_payload(tmp_path: Path) -> None:
    clock = FakeClock()
    log = UsageLog(tmp_path, "node/1", clock=clock)
    raw = report("node/1", 1).SerializeToString()
    assert log.append_published(raw) == 0
    peer = report("node-2", 9)
    assert log.append_receipt(peer, peer.SerializeToString(), receive_time=clock.t + 0.25) == 1
    log.close()
    (seg,) = seg_files(tmp_path)
    assert seg.name == "node_1-00000000000000000000-00000000000000000001.seg"
    frames, st = read_segment(seg)
    assert not st.damaged and st.frames == 2
    pub, rec = frames
    assert pub.payload == raw and pub.metadata.kind == PUBLISHED and pub.metadata.daemon_id == "node/1"
    m = rec.metadata
    assert rec.payload == b"" and not m.payload_kept
    assert (m.kind, m.publisher_id, m.publisher_sequence, m.publisher_incarnation) == (RECEIPT, "node-2", 9, 42)
    assert m.publish_time_ms == peer.publish_time_ms
    assert m.receive_time_us == int((clock.t + 0.25) * 1e6)


def test_keep_receipt_payloads_flag(tmp_path: Path) -> None:
    log = UsageLog(tmp_path, "a", keep_receipt_payloads=True)
    peer = report("b", 3)
    raw = peer.SerializeToString()
    log.append_receipt(peer, raw, 1.0)
    log.close()
    (f,) = all_frames(tmp_path)
    assert f.payload == raw and f.metadata.payload_kept


def test_roll_by_size_and_age_keeps_index_continuous_across_restarts(tmp_path: Path) -> None:
    clock = FakeClock()
    raw = report("a", 1, groups=20).SerializeToString()
    log = UsageLog(tmp_path, "a", segment_max_bytes=4 * len(raw), segment_max_age_s=60, clock=clock)
    for _ in range(10):
        log.append_published(raw)
    sizes = seg_files(tmp_path)
    assert len(sizes) == 2  # 4 frames exceed 4 * len(raw) once the overhead counts
    log.append_published(raw)
    clock.t += 59
    log.maintain()
    assert len(seg_files(tmp_path)) == 2  # not old enough yet
    clock.t += 1
    log.maintain()
    assert len(seg_files(tmp_path)) == 3  # rolled by age
    log.maintain()
    assert len(seg_files(tmp_path)) == 3  # an empty segment never rolls
    log.close()
    log = UsageLog(tmp_path, "a", clock=clock)
    assert log.next_index == 11
    log.append_published(raw)
    log.close()
    names = [parse_name(p.name) for p in seg_files(tmp_path)]
    assert [(n.first, n.last) for n in names] == [(0, 3), (4, 7), (8, 10), (11, 11)]
    assert [f.metadata.log_index for f in all_frames(tmp_path)] == list(range(12))
    assert not seg_files(tmp_path, ".open")


def test_torn_tail_truncated_on_reopen_and_corrupt_middle_kept(tmp_path: Path) -> None:
    clock = FakeClock()
    log = UsageLog(tmp_path, "a", clock=clock)
    raws = [report("a", i).SerializeToString() for i in range(1, 9)]
    for r in raws:
        log.append_published(r)
    simulate_crash(log)
    (open_seg,) = seg_files(tmp_path, ".open")
    data = bytearray(open_seg.read_bytes())
    frames, _ = scan_bytes(bytes(data))
    mid = frames[3]
    data[mid.offset + 20] ^= 0x55  # corrupt frame 3 in the middle
    data = data[: frames[7].offset + 11]  # tear frame 7
    open_seg.write_bytes(bytes(data))

    log = UsageLog(tmp_path, "a", clock=clock)
    assert log.recovered_tail_bytes == 11
    assert log.next_index == 7  # frame 6 is the last intact one
    log.append_published(b"after-restart")
    log.close()
    got = all_frames(tmp_path)
    assert [f.metadata.log_index for f in got] == [0, 1, 2, 4, 5, 6, 7]
    assert [f.payload for f in got[:6]] == [raws[i] for i in (0, 1, 2, 4, 5, 6)]
    closed = seg_files(tmp_path)
    _frames0, st = read_segment(closed[0])
    assert st.corrupt_regions == 1 and st.frames_lost == 1 and st.tail_bytes == 0
    assert st.bytes_skipped == mid.end - mid.offset


def test_reopen_after_crash_with_nothing_intact_keeps_the_index(tmp_path: Path) -> None:
    log = UsageLog(tmp_path, "a")
    log.append_published(b"one")
    log.roll()
    log.append_published(b"two")
    simulate_crash(log)
    (open_seg,) = seg_files(tmp_path, ".open")
    open_seg.write_bytes(open_seg.read_bytes()[:7])  # torn inside the only frame
    log = UsageLog(tmp_path, "a")
    assert log.next_index == 1 and log.recovered_tail_bytes == 7
    log.close()


def test_second_writer_on_same_log_is_refused(tmp_path: Path) -> None:
    from rgd.usage_log import LogLockedError

    log = UsageLog(tmp_path, "a")
    with pytest.raises(LogLockedError):
        UsageLog(tmp_path, "a")
    UsageLog(tmp_path, "b").close()  # another daemon may share the directory
    log.close()


# -- archive, retention, lag ----------------------------------------------------------------


def fill(log: UsageLog, n: int, raw: bytes) -> None:
    for _ in range(n):
        log.append_published(raw)
    log.roll()


@pytest.mark.parametrize("threaded", [True, False])
def test_archive_to_local_dir_then_retention_and_lag(tmp_path: Path, threaded: bool) -> None:
    clock = FakeClock()
    local, arch = tmp_path / "log", tmp_path / "archive"
    raw = report("a", 1).SerializeToString()
    log = UsageLog(local, "a", archive_uri=str(arch), retention_s=100, clock=clock, archive_threaded=threaded)
    fill(log, 3, raw)
    fill(log, 2, raw)
    lag = log.lag()
    assert (lag.unarchived_records, lag.unarchived_segments, lag.undeleted_records) == (5, 2, 0)
    assert lag.unarchived_bytes == sum(p.stat().st_size for p in seg_files(local))
    clock.t += 7
    assert log.lag().oldest_unarchived_age_s == pytest.approx(7)
    assert log.wait_archived(timeout=20)
    archived = sorted(p.name for p in (arch / "a").iterdir())
    assert archived == [p.name for p in seg_files(local)]
    for p in seg_files(local):
        assert (arch / "a" / p.name).read_bytes() == p.read_bytes()
    lag = log.lag()
    assert (lag.unarchived_records, lag.undeleted_records, lag.oldest_unarchived_age_s) == (0, 0, 0.0)
    clock.t += 100
    lag = log.lag()
    assert lag.undeleted_records == 5 and lag.undeleted_bytes > 0  # past retention, not yet deleted
    log.maintain()
    assert seg_files(local) == [] and log.lag().undeleted_records == 0
    assert len(list((arch / "a").iterdir())) == 2  # the archive keeps its copies
    log.close()


def test_archive_to_fsspec_memory_uri_and_restart_requeues(tmp_path: Path) -> None:
    fs = fsspec.filesystem("memory")
    uri = "memory://rgd-test-archive"
    if fs.exists("/rgd-test-archive"):
        fs.rm("/rgd-test-archive", recursive=True)
    raw = report("a", 1).SerializeToString()
    log = UsageLog(tmp_path, "a", archive_uri=uri, archive_threaded=False)
    fill(log, 4, raw)
    log.close(archive_timeout=0)  # nothing copied yet: a later start must do it
    assert not fs.exists("/rgd-test-archive/a")
    log = UsageLog(tmp_path, "a", archive_uri=uri, archive_threaded=False)
    assert log.lag().unarchived_records == 4
    log.maintain()  # inline mode copies one segment per call
    assert log.lag().unarchived_records == 0
    (seg,) = seg_files(tmp_path)
    assert fs.cat_file(f"/rgd-test-archive/a/{seg.name}") == seg.read_bytes()
    assert (tmp_path / "a.archived").read_text().split() == [seg.name]
    log.close()
    log = UsageLog(tmp_path, "a", archive_uri=uri, archive_threaded=False)
    assert log.lag().unarchived_records == 0  # the manifest remembers
    log.close()


def test_failed_archive_copies_are_counted_and_retried(tmp_path: Path) -> None:
    clock = FakeClock()
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the archive directory should be")
    log = UsageLog(tmp_path / "log", "a", archive_uri=str(blocker), archive_threaded=False, clock=clock,
                   retention_s=0)
    fill(log, 2, b"r")
    log.maintain()
    lag = log.lag()
    assert lag.archive_failures == 1 and lag.unarchived_records == 2 and "not-a-dir" in lag.last_archive_error
    log.maintain()
    assert log.lag().archive_failures == 1  # backing off
    assert seg_files(tmp_path / "log")  # never deleted while unarchived, whatever the retention
    blocker.unlink()
    clock.t += 10
    log.maintain()
    assert log.lag().unarchived_records == 0
    log.maintain()
    assert seg_files(tmp_path / "log") == []  # retention 0: deleted once archived
    log.close()
    assert os.path.exists(blocker / "a")
