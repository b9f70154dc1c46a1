"""Config reload: any content change is noticed; parsing uses libyaml, off the event loop.

Latency while a 10,000-group file reloads is measured by
`scripts/probe_config_reload.py` (a benchmark, not a timed test).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml

from rgd import config_file
from rgd.config_file import parse_config

from tests.conftest import wait_for, write_config


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


def test_the_c_loader_is_used_and_the_pure_loader_is_a_warned_fallback(monkeypatch, caplog) -> None:
    # This project's PyYAML wheels carry libyaml; the daemon must use it.
    assert yaml.__with_libyaml__ and config_file.YAML_LOADER is yaml.CSafeLoader
    text = b"resourcegroups:\n  g: {publishRateInMsgs: 5}\nnamespaces: {a/b: g}\n"
    fast = parse_config(text, "c.yaml")
    monkeypatch.setattr(config_file, "YAML_LOADER", yaml.SafeLoader)
    monkeypatch.setattr(config_file, "_warned_pure", False)
    caplog.set_level(logging.WARNING, logger="rgd.config")
    slow = parse_config(text, "c.yaml")
    parse_config(text, "c.yaml")
    assert slow.registry.groups == fast.registry.groups and slow.registry.namespaces == {"a/b": "g"}
    assert len([r for r in caplog.records if "no libyaml" in r.getMessage()]) == 1


async def test_a_parsing_worker_that_dies_is_replaced(tmp_path: Path) -> None:
    import signal

    from rgd.config_file import ConfigError, load_config
    from rgd.config_reload import ConfigReloader

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


def test_a_file_caught_half_written_is_not_taken(tmp_path: Path) -> None:
    from rgd.config_file import load_config
    from rgd.config_reload import ConfigReloader

    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 1000}})
    full = cfg.read_bytes()
    reloader = ConfigReloader(cfg, load_config(cfg).digest)
    cfg.write_bytes(b"")  # an editor truncated the file and is about to write it again
    reloader.settle = lambda _s: cfg.write_bytes(full.replace(b"1000", b"2000"))  # ... and now it has
    assert reloader.read_if_changed() is None  # the two reads differ: not taken
    reloader.settle = lambda _s: None
    assert reloader.read_if_changed() == full.replace(b"1000", b"2000")
