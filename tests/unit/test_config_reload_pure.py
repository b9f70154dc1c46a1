"""Config reload: any content change is noticed; parsing uses libyaml, off the event loop.

Latency while a 10,000-group file reloads is measured by
`scripts/probe_config_reload.py` (a benchmark, not a timed test).

Here the in-process checks; with a daemon and the parsing worker, tests/integration/test_config_reload.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

from rgd.config import file as config_file
from rgd.config.file import parse_config
from tests.support.live import write_config


def quota(d, group: str = "g") -> float:
    return d.config.effective.groups[group].rates("publish")[0]


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


def test_a_file_caught_half_written_is_not_taken(tmp_path: Path) -> None:
    from rgd.config.file import load_config
    from rgd.config.reload import ConfigReloader

    cfg = write_config(tmp_path / "c.yaml", {"g": {"publishRateInMsgs": 1000}})
    full = cfg.read_bytes()
    reloader = ConfigReloader(cfg, load_config(cfg).digest)
    cfg.write_bytes(b"")  # an editor truncated the file and is about to write it again
    reloader.settle = lambda _s: cfg.write_bytes(full.replace(b"1000", b"2000"))  # ... and now it has
    assert reloader.read_if_changed() is None  # the two reads differ: not taken
    reloader.settle = lambda _s: None
    assert reloader.read_if_changed() == full.replace(b"1000", b"2000")
