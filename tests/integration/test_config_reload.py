"""Config reload: any content change is noticed; parsing uses libyaml, off the event loop.

Latency while a 10,000-group file reloads is measured by
`scripts/probe_config_reload.py` (a benchmark, not a timed test).

Here with a daemon and the parsing worker process; the in-process checks are in
tests/unit/test_config_reload_pure.py.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from tests.support.live import wait_for, write_config


def quota(d, group: str = "g") -> float:
    return d.config.effective.groups[group].rates("publish")[0]


async def test_a_change_of_same_size_and_mtime_is_reloaded(make_daemon, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 1000}})
    before = cfg.stat()
    d = await make_daemon("a", cfg, tick=0.1)
    assert quota(d) == 1000
    cfg.write_text(cfg.read_text().replace("1000", "2000"))
    os.utime(cfg, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = cfg.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    await wait_for(lambda: quota(d) == 2000, 15)
    assert d.metrics.config_reloads.labels("ok")._value.get() == 1


async def test_a_bad_file_is_reported_once_and_a_fixed_one_loads(make_daemon, tmp_path: Path, caplog) -> None:
    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 1000}})
    d = await make_daemon("a", cfg, tick=0.1)
    caplog.set_level(logging.ERROR, logger="rgd.daemon")
    cfg.write_text("resourcegroups: {g: {publishRateInMsgs: [not a number")
    errors = d.metrics.config_reloads.labels("error")
    await wait_for(lambda: errors._value.get() == 1, 15)
    polls = d.ticks
    await wait_for(lambda: d.ticks >= polls + 10, 10)  # ten more polls of the same bad content
    assert errors._value.get() == 1
    assert quota(d) == 1000  # the last good config stays
    assert len([r for r in caplog.records if "config reload failed" in r.getMessage()]) == 1
    write_config(cfg, {"g": {"publishRateInMsgs": 3000}})
    await wait_for(lambda: quota(d) == 3000, 15)


async def test_a_parsing_worker_that_dies_is_replaced(tmp_path: Path) -> None:
    import signal

    from rgd.config.file import ConfigError, load_config
    from rgd.config.reload import ConfigReloader

    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 1000}})
    reloader = ConfigReloader(cfg, load_config(cfg).digest)
    try:
        assert await reloader.poll() is None  # unchanged
        write_config(cfg, {"g": {"publishRateInMsgs": 2000}})
        doc = await reloader.poll()
        assert doc is not None and doc.registry.groups["g"].rates("publish")[0] == 2000
        for pid in list(reloader._pool._processes):  # the worker dies between reloads
            os.kill(pid, signal.SIGKILL)
        write_config(cfg, {"g": {"publishRateInMsgs": 3000}})
        try:
            doc = await reloader.poll()
        except ConfigError as exc:  # the death was noticed by this parse: said, then retried
            assert "worker died" in str(exc)
            doc = await reloader.poll()
        assert doc is not None and doc.registry.groups["g"].rates("publish")[0] == 3000
    finally:
        reloader.close()


