"""Identity, replays and bounded work per report (pure logic, real report messages).

Signed reports are bound to a sender, an incarnation and a sequence: a departed
incarnation's genuine reports are replays. Caps on groups per report (counted on
the wire, before parsing), members in the map and the rate of new members;
plausibility of counts from the group's quota and the report's tick.

Its long runs (property searches and long fake-clock runs, each a second or more): pure code,
but kept out of tests/unit so that tier stays under 20 s; the quick tests are in tests/unit/test_report_identity.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.cluster.report_codec import (
    count_groups,
)
from rgd.wire.usage_report_pb2 import UsageReport
from tests.unit.test_report_identity import report

# -- groups per report, counted before parsing ------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=40), max_size=60, unique=True),
       st.lists(st.text(max_size=30), max_size=5), st.integers(1, 2**63), st.booleans())
def test_count_groups_agrees_with_the_parser(names, namespaces, big, leaving):
    r = report(seq=big, incarnation=big, leaving=leaving)
    for n in names:
        g = r.groups.add(group=n, namespaces=namespaces, topics=len(n))
        g.dispatch.limit_bytes = -1.0
        g.publish.admitted_bytes = big
    data = r.SerializeToString()
    assert count_groups(data, 10**9) == len(UsageReport.FromString(data).groups)
    # Stops once past the cap: the cost is bounded by the cap, not the message.
    assert count_groups(data, 3) == min(len(names), 4)
