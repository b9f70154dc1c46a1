"""Hostile reports are rejected with a reason and never applied."""

from __future__ import annotations

import math

import pytest

from rgd.cluster.report_codec import (
    MAX_REPORT_BYTES,
    REJECT_CLOCK,
    REJECT_INVALID,
    REJECT_MALFORMED,
    REJECT_OVERSIZED,
    REJECT_SIGNATURE,
    REJECT_SPOOFED,
    HmacKeys,
    Rejected,
    decode_report,
)
from rgd.cluster.usage_map import UsageMap, member_tag
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport

NOW = 1_800_000_000_000


def report(**kw) -> UsageReport:
    r = UsageReport(daemon_id=kw.pop("daemon_id", "peer"), sequence=kw.pop("sequence", 1),
                    publish_time_ms=kw.pop("publish_time_ms", NOW), tick_ms=kw.pop("tick_ms", 1000),
                    incarnation=kw.pop("incarnation", 7), leaving=kw.pop("leaving", False))
    for g in kw.pop("groups", []):
        r.groups.append(g)
    assert not kw
    return r


def group(name="gold", **kind) -> GroupUsage:
    g = GroupUsage(group=name)
    for k, v in kind.items():
        setattr(g.publish, k, v)
    return g


def decode(r: UsageReport | bytes, **kw):
    data = r if isinstance(r, bytes) else r.SerializeToString()
    return decode_report(data, NOW, "me", 99, **kw)


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\xff\xff\xff\xff", REJECT_MALFORMED),
        (b"", REJECT_MALFORMED),  # parses as an empty report: no daemon id
        (report(sequence=0).SerializeToString(), REJECT_MALFORMED),
        (report(incarnation=0).SerializeToString(), REJECT_MALFORMED),
        (b"\x00" * (MAX_REPORT_BYTES + 1), REJECT_OVERSIZED),
        (report(groups=[group(limit_messages=math.nan)]).SerializeToString(), REJECT_INVALID),
        (report(groups=[group(limit_messages=-5)]).SerializeToString(), REJECT_INVALID),
        (report(groups=[group(limit_bytes=math.inf)]).SerializeToString(), REJECT_INVALID),
        (report(groups=[group(admitted_messages=2**63)]).SerializeToString(), REJECT_INVALID),
        (report(groups=[group(quota_messages=1e300)]).SerializeToString(), REJECT_INVALID),
        (report(tick_ms=0).SerializeToString(), REJECT_INVALID),
        (report(publish_time_ms=NOW + 3600_000).SerializeToString(), REJECT_CLOCK),
        (report(publish_time_ms=1).SerializeToString(), REJECT_CLOCK),
        (report(daemon_id="me", incarnation=5).SerializeToString(), REJECT_SPOOFED),
        (report(groups=[group(), group()]).SerializeToString(), REJECT_MALFORMED),
        (report(groups=[group(name="")]).SerializeToString(), REJECT_MALFORMED),
    ],
)
def test_hostile_reports_are_rejected_by_reason(data, reason):
    with pytest.raises(Rejected) as exc:
        decode(data)
    assert exc.value.reason == reason


def test_a_sane_report_passes_and_unlimited_is_minus_one():
    r = decode(report(groups=[group(admitted_messages=5, limit_messages=-1, limit_bytes=100)]))
    assert r.groups[0].publish.admitted_messages == 5


def test_duplicates_out_of_order_and_restarts_in_the_usage_map():
    m = UsageMap()
    me = member_tag("me", 99)
    assert m.fold(report(sequence=1), 0.0, me).accepted
    assert m.fold(report(sequence=1), 0.1, me).reason == "duplicate"
    r3 = m.fold(report(sequence=4), 0.2, me)
    assert r3.accepted and r3.lost == 2
    assert m.fold(report(sequence=3), 0.3, me).reason == "duplicate"  # out of order: too late
    restart = m.fold(report(sequence=1, incarnation=8), 0.4, me)
    assert restart.accepted and restart.lost == 0  # a new incarnation restarts the sequence
    assert m.fold(report(sequence=9, incarnation=7), 0.5, me).reason == "stale_incarnation"
    assert m.fold(report(sequence=2, incarnation=8, leaving=True), 0.6, me).accepted
    assert "peer" not in m.members


def test_hmac_sign_verify_and_rotation(tmp_path):
    old_new = tmp_path / "a"
    old_new.write_text("k1:first-secret-0123456789\nk2:second-secret-0123456789\n")
    new_old = tmp_path / "b"
    new_old.write_text("k2:second-secret-0123456789\nk1:first-secret-0123456789\n")
    a, b = HmacKeys.load(str(old_new)), HmacKeys.load(str(new_old))
    data = report().SerializeToString()
    assert decode(data, properties=a.sign(data), keys=b)  # signed with k1, b still accepts k1
    assert decode(data, properties=b.sign(data), keys=a)  # signed with k2, a already accepts k2
    for props in ({}, {"rgd-key-id": "k1", "rgd-hmac": "00" * 32}, {**a.sign(data), "rgd-key-id": "k9"}):
        with pytest.raises(Rejected) as exc:
            decode(data, properties=props, keys=a)
        assert exc.value.reason == REJECT_SIGNATURE
    tampered = report(sequence=2).SerializeToString()
    with pytest.raises(Rejected):
        decode(tampered, properties=a.sign(data), keys=a)
    bad = tmp_path / "bad"
    bad.write_text("k1:short\n")
    with pytest.raises(ValueError, match="16"):
        HmacKeys.load(str(bad))


