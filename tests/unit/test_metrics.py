"""The /metrics exposition: streamed a family at a time, the same text as prometheus-client's
own `generate_latest` of the whole registry, and never holding two per-group families.

Here in process; HEAD then GET on one HTTP connection is in tests/integration/test_metrics_http.py, and
the one-per-group-family run in tests/system/test_metrics_long.py.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rgd.config.file import parse_config
from rgd.config.groups import KINDS
from rgd.config.settings import Settings
from rgd.daemon.wiring import Daemon

GROUPS = 50


def _daemon(tmp_path: Path) -> Daemon:
    doc = "resourcegroups:\n" + "".join(
        f"  g{i}: {{publishRateInMsgs: {100 + i}, dispatchRateInBytes: {1000 * (i + 1)}}}\n" for i in range(GROUPS)
    )
    config = parse_config(doc.encode(), str(tmp_path / "rgd.yaml"))
    daemon = Daemon(Settings(id="m", log_dir=str(tmp_path / "log"), data_dir=str(tmp_path / "data")), config)
    for i in range(GROUPS):
        group = daemon.config.effective.groups[f"g{i}"]
        for kind in KINDS:
            daemon.limiter.acquire(group, kind, 1 + i, 100, "tenant/ns", now=1.0)
        daemon.limiter.acquire(group, "publish", 100_000, 100, "tenant/ns", now=1.0)  # denied: an event
    return daemon


def test_the_chunks_are_the_whole_registrys_exposition(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path)
    chunks = list(daemon.metrics.chunks())
    assert len(chunks) > 10  # one per family, not one for all
    text = b"".join(chunks)
    assert text == generate_latest(daemon.metrics.registry)
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}
    admitted = {(s.labels["group"], s.labels["kind"]): s.value for s in families["rgd_admitted_messages"].samples
                if s.name == "rgd_admitted_messages_total"}
    assert len(admitted) == GROUPS * len(KINDS)


def test_a_family_built_in_parts_reads_as_one(tmp_path: Path, monkeypatch) -> None:
    """Per-group families are built and rendered SAMPLES_PER_PART samples at a time (a
    scrape's memory at 5 000 groups); the text is the same as built whole, one header per
    family, which prometheus-client's own generate_latest of the registry shows."""
    import rgd.api.metrics

    daemon = _daemon(tmp_path)
    whole = generate_latest(daemon.metrics.registry)
    chunks_whole = len(list(daemon.metrics.chunks()))
    monkeypatch.setattr(rgd.api.metrics, "SAMPLES_PER_PART", 7)
    parts = list(daemon.metrics.chunks())
    assert len(parts) > chunks_whole + 50  # 100 or 200 samples a family: 15 to 29 parts each
    assert b"".join(parts) == whole
    assert generate_latest(daemon.metrics.registry) != whole  # the parts, rendered each with its header
    names = [f.name for f in text_string_to_metric_families(whole.decode())]
    assert len(names) == len(set(names))


def test_the_inbox_backlog_is_exported(tmp_path: Path) -> None:
    """Reports waiting to be folded, in count and bytes, as the daemon's inbox holds them."""
    from rgd.daemon.wiring import Inbound
    from rgd.wire.usage_report_pb2 import UsageReport

    daemon = _daemon(tmp_path)
    families = {f.name: f for f in text_string_to_metric_families(daemon.metrics.render().decode())}
    assert families["rgd_inbox_reports"].samples[0].value == 0
    for size in (100, 250):
        daemon.inbox.put_nowait(Inbound(UsageReport(daemon_id="b"), b"", size, 0.0))
        daemon.inbox_bytes += size
    families = {f.name: f for f in text_string_to_metric_families(daemon.metrics.render().decode())}
    assert families["rgd_inbox_reports"].samples[0].value == 2
    assert families["rgd_inbox_bytes"].samples[0].value == 350
