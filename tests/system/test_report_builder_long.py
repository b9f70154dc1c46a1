"""Report entries leave out the kinds that say nothing, and every reader reads them alike.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_report_builder.py.
"""

from __future__ import annotations

import numpy as np

from rgd.cluster.report_builder import (
    drop_silent_kinds,
)
from rgd.cluster.usage_map import entry_usage
from rgd.config.groups import KINDS
from rgd.wire.usage_report_pb2 import UsageReport
from tests.unit.test_report_builder import _full_entry


def test_receivers_read_a_silent_kind_and_its_absence_alike() -> None:
    """The daemons' fold and the report job's decoder give the same figures for an entry with
    its silent kinds and without them; the entry is 40 % smaller without."""
    from rgd.fairness.decode import (
        GROUP_FIELDS,
        KIND_FIELDS,
        KIND_SLOTS,
        PER_KIND,
        REPORT_FIELDS,
        decode_reports,
    )
    from rgd.fairness.decode import KINDS as DECODED_KINDS

    full = _full_entry()
    lean = drop_silent_kinds(_full_entry())
    assert [k for k in KINDS if lean.HasField(k)] == ["publish"]
    assert entry_usage(full, 1.0) == entry_usage(lean, 1.0)
    payloads = []
    for gu in (full, lean):
        report = UsageReport(daemon_id="n", sequence=1, publish_time_ms=5, tick_ms=1000, incarnation=1)
        report.groups.append(gu)
        payloads.append(report.SerializeToString())
    assert len(payloads[1]) < 0.7 * len(payloads[0])
    buf = np.frombuffer(b"".join(payloads), np.uint8)
    offs = np.array([0, len(payloads[0])], np.int64)
    lens = np.array([len(p) for p in payloads], np.int64)
    _, _, counts, lims, ng = decode_reports(buf, offs, lens, 8, REPORT_FIELDS, GROUP_FIELDS, KIND_SLOTS,
                                            KIND_FIELDS, PER_KIND * len(DECODED_KINDS), np.zeros(2, np.bool_))
    assert ng == 2
    np.testing.assert_array_equal(counts[0], counts[1])
    np.testing.assert_array_equal(lims[0], lims[1])
    assert lims[:ng].view(np.float64)[1].tolist().count(-1.0) == 2 + 4 * 2  # publish bytes; two absent kinds
