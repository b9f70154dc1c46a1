"""A failing usage log (full disk) never stops the tick: reports, folds and limits go on.

The disk fault is injected under Python's buffered file: the raw writes of every
segment file fail with the kernel's ENOSPC while the "disk" is full, so the
buffering, the roll (flush, fsync, rename) and the retry run as in production.
`scripts/probe_disk_full.py` does the same on a real, full tmpfs.
"""

from __future__ import annotations

import builtins
import errno
import io
import logging
from pathlib import Path

import pytest

from rgd.usage_log import read_segment
from rgd.usage_log import segment as segment_module
from tests.support.live import base_url, wait_for, write_config


class Disk:
    """A switch for 'the disk is full'; while on, raw writes of log segments raise ENOSPC."""

    def __init__(self) -> None:
        self.full = False
        self.refused = 0

    def open(self, path, mode="r", buffering=-1, **kw):
        if "a" not in mode and "w" not in mode:
            return builtins.open(path, mode, buffering, **kw)
        disk = self

        class Raw(io.FileIO):
            def write(self, b):  # type: ignore[override]
                if disk.full:
                    disk.refused += 1
                    raise OSError(errno.ENOSPC, "No space left on device")
                return super().write(b)

        raw = Raw(path, mode.replace("b", ""))
        return io.BufferedWriter(raw, buffer_size=buffering if buffering > 0 else io.DEFAULT_BUFFER_SIZE)


@pytest.mark.parametrize("segment_bytes", [512, 64 * 1024 * 1024], ids=["small-segments", "large-segments"])
async def test_full_disk_keeps_ticking_shows_in_readyz_and_resumes(
        make_daemon, http, tmp_path: Path, monkeypatch, caplog, segment_bytes: int) -> None:
    disk = Disk()
    monkeypatch.setattr(segment_module, "open", disk.open, raising=False)
    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 100}}, {"t/ns": "g"})
    a = await make_daemon("a", cfg, tick=0.1, log_segment_bytes=segment_bytes)
    await make_daemon("b", cfg, tick=0.1)
    url = base_url(a)
    ask = {"namespace": "t/ns", "kind": "publish", "messages": 1}
    async with http.post(url + "/v1/acquire", json=ask) as r:
        assert r.status == 200

    caplog.set_level(logging.INFO, logger="rgd.usage_log")
    disk.full = True
    # The log must fail for real: a small segment rolls within a tick or two, a large one
    # fails when the tick flushes its buffer... after 1 MiB: push receipts and reports through.
    await wait_for(lambda: a.log_guard.state.failing, 20)
    ticks_at_failure = a.ticks
    received_at_failure = a.metrics.reports_received._value.get()
    async with http.get(url + "/readyz") as r:
        body = await r.json()
        assert r.status == 200, body  # still serving
        assert body["degraded"] and "No space left" in body["degraded"][0], body
    async with http.get(url + "/metrics") as r:
        text = await r.text()
        assert "rgd_usage_log_failing 1.0" in text
    # The tick goes on: more ticks, peers' reports still folded, acquires still answered.
    await wait_for(lambda: a.ticks >= ticks_at_failure + 10, 10)
    await wait_for(lambda: a.metrics.reports_received._value.get() >= received_at_failure + 5, 10)
    async with http.post(url + "/v1/acquire", json=ask) as r:
        assert r.status == 200
    assert "b" in a.node.members()
    mine = f"usage log in {a.settings.log_dir} "
    failing_lines = [r for r in caplog.records if r.getMessage().startswith(mine) and "failing" in r.getMessage()]
    assert len(failing_lines) == 1, [r.getMessage() for r in caplog.records]
    assert not any(r.exc_info for r in caplog.records)

    # Space returns: writing resumes by itself, one line says so, readiness is clean again.
    disk.full = False
    await wait_for(lambda: not a.log_guard.state.failing, 10)
    index_after = a.usage_log.next_index
    await wait_for(lambda: a.usage_log.next_index > index_after + 5, 10)
    assert [r for r in caplog.records if r.getMessage().startswith(mine) and "writing again" in r.getMessage()]
    async with http.get(url + "/readyz") as r:
        assert (await r.json())["degraded"] == []
    assert a.log_guard.state.dropped_records > 0
    # Everything written before and after the fault reads back intact and in index order.
    a.usage_log.roll()
    indices = []
    for seg in sorted(Path(a.settings.log_dir).glob("*.seg")):
        frames, _stats = read_segment(seg)
        indices += [f.metadata.log_index for f in frames]
    assert indices == sorted(indices) and len(indices) == len(set(indices))
    assert indices[-1] == a.usage_log.next_index - 1
