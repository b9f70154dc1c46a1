"""The /metrics exposition: streamed a family at a time, the same text as prometheus-client's
own `generate_latest` of the whole registry, and never holding two per-group families.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_metrics.py.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from rgd.api.metrics import LimiterCollector
from tests.unit.test_metrics import _daemon


def test_one_per_group_family_at_a_time(tmp_path: Path) -> None:
    """Each family is built when the exposition asks for it and freed once it is rendered:
    before, every family of the scrape was alive until the last was rendered (tens of MB at
    5 000 groups, kept by the process as RSS)."""
    collector = LimiterCollector(_daemon(tmp_path))
    alive: list[weakref.ref] = []
    yielded = 0
    for family in collector.collect():
        gc.collect()
        assert [ref for ref in alive if ref() is not None] == [], f"still alive when {family.name} was built"
        if any("group" in sample.labels for sample in family.samples):
            alive.append(weakref.ref(family))
        yielded += 1
        del family
    assert yielded > 10 and len(alive) >= 7  # all but the map's and last tick's (no tick ran)
