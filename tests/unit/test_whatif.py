"""rgd whatif's pure parts: reading tick counts, rebuilding offered load, --set, the scenario it runs.

Expected figures are literals worked out by hand from the inputs (no code shared with
what is judged)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rgd.whatif.logged import KindCounts, TickCounts, tick_counts
from rgd.whatif.offered import ADMITTED_MESSAGES, THROTTLED_MESSAGES, Span, rebuild
from rgd.whatif.proposal import ProposalError, check_groups, parse_changes
from rgd.whatif.replay import scenario_doc
from rgd.wire.log_entry_pb2 import LogEntryMetadata
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage, UsageReport

T0 = 1_800_000_000_000  # a whole second, Unix ms


def kc(admitted: int, throttled: int = 0, quota: float = 100.0, size: int = 10) -> KindCounts:
    return KindCounts(admitted, admitted * size, throttled, throttled * size, quota, -1.0)


def tick(daemon: str, end_s: float, groups: dict[str, KindCounts] | None = None, tick_ms: int = 1000,
         incarnation: int = 1, leaving: bool = False, seq: int = 0) -> TickCounts:
    return TickCounts(daemon, incarnation, seq, T0 + int(end_s * 1000), tick_ms, leaving,
                      {g: {"publish": c} for g, c in (groups or {}).items()})


def published(report: UsageReport) -> tuple[LogEntryMetadata, bytes]:
    return LogEntryMetadata(kind=LogEntryMetadata.PUBLISHED, daemon_id=report.daemon_id), report.SerializeToString()


# -- tick_counts ------------------------------------------------------------------------------


def test_a_tick_report_gives_its_counts_and_quotas_per_kind():
    r = UsageReport(daemon_id="d1", sequence=4, publish_time_ms=T0, tick_ms=500, incarnation=7)
    r.groups.append(GroupUsage(group="g", publish=KindUsage(admitted_messages=3, admitted_bytes=30,
                                                            throttled_messages=2, throttled_bytes=20,
                                                            quota_messages=50, quota_bytes=-1)))
    t = tick_counts(*published(r))
    assert (t.daemon, t.incarnation, t.sequence, t.end_ms, t.tick_ms, t.start_ms) == ("d1", 7, 4, T0, 500, T0 - 500)
    assert t.groups == {"g": {"publish": KindCounts(3, 30, 2, 20, 50.0, -1.0)}}  # absent kinds: not there


def test_restatements_receipts_and_garbage_add_no_counts():
    r = UsageReport(daemon_id="d1", sequence=1, publish_time_ms=T0, tick_ms=1000, restatement=True)
    r.groups.append(GroupUsage(group="g", publish=KindUsage(admitted_messages=3)))
    assert tick_counts(*published(r)) is None
    assert tick_counts(LogEntryMetadata(kind=LogEntryMetadata.RECEIPT), b"") is None
    assert tick_counts(LogEntryMetadata(kind=LogEntryMetadata.PUBLISHED), b"\xff\xff\xff") is None


def test_a_report_without_a_tick_length_covers_a_second():
    r = UsageReport(daemon_id="d1", sequence=1, publish_time_ms=T0)
    assert tick_counts(*published(r)).tick_ms == 1000


def accounting(report: UsageReport, final: bool = False) -> tuple[LogEntryMetadata, bytes]:
    return (LogEntryMetadata(kind=LogEntryMetadata.ACCOUNTING, daemon_id=report.daemon_id, final=final),
            report.SerializeToString())


def test_an_accounting_frame_gives_exact_counts_and_its_log_s_published_reports_none():
    r = UsageReport(daemon_id="d1", sequence=3, publish_time_ms=T0, tick_ms=800, incarnation=7, complete=True)
    r.groups.append(GroupUsage(group="g", publish=KindUsage(admitted_messages=5, admitted_bytes=50,
                                                            throttled_messages=1, throttled_bytes=10,
                                                            quota_messages=50, quota_bytes=-1)))
    r.groups.append(GroupUsage(group="idle", publish=KindUsage(quota_messages=10, quota_bytes=-1)))
    t = tick_counts(*accounting(r))
    assert (t.daemon, t.incarnation, t.sequence, t.end_ms, t.tick_ms, t.leaving, t.accounted) == \
        ("d1", 7, 3, T0, 800, False, True)
    assert t.groups == {"g": {"publish": KindCounts(5, 50, 1, 10, 50.0, -1.0)},
                        "idle": {"publish": KindCounts(0, 0, 0, 0, 10.0, -1.0)}}
    assert tick_counts(*accounting(r, final=True)).leaving  # a clean stop ends the incarnation
    meta, payload = published(r)
    assert tick_counts(meta, payload).accounted is False  # an older rgd's log: its reports are the counts
    meta.accounted = True
    assert tick_counts(meta, payload) is None  # counted in the ACCOUNTING frames already


def test_accounting_frames_are_never_filled_in():
    """A group absent from an accounting frame admitted nothing that tick (the frame holds every
    group the limiter knows): no suppression to fill, unlike a published report."""
    acct = [TickCounts("a", 1, 1, T0 + 1000, 1000, False, {"g": {"publish": kc(80, 20)}}, True),
            TickCounts("a", 1, 2, T0 + 2000, 1000, False, {}, True),
            TickCounts("a", 1, 3, T0 + 3000, 1000, False, {"g": {"publish": kc(40)}}, True)]
    load = rebuild(acct)
    assert load.counts[("g", "a", "publish")][ADMITTED_MESSAGES].tolist() == [80, 0, 40]
    assert load.filled[("g", "a", "publish")][ADMITTED_MESSAGES].tolist() == [0, 0, 0]
    assert (load.suppressed_entries, load.logged_entries, load.accounted_ticks) == (0, 2, 3)


# -- rebuild ----------------------------------------------------------------------------------


def test_a_suppressed_group_counts_as_unchanged_until_it_is_reported_again():
    load = rebuild([
        tick("a", 1, {"g": kc(80, 20)}),
        tick("a", 2),  # g suppressed: as at 1
        tick("a", 3),  # and again
        tick("a", 4, {"g": kc(40, 0)}),
        tick("a", 5, {"g": kc(0, 0)}),  # went idle: reported at once
        tick("a", 6),  # idle, left out: nothing
    ])
    a = load.counts[("g", "a", "publish")]
    assert load.seconds == 6
    assert a[ADMITTED_MESSAGES].tolist() == [80, 80, 80, 40, 0, 0]
    assert a[THROTTLED_MESSAGES].tolist() == [20, 20, 20, 0, 0, 0]
    assert load.filled[("g", "a", "publish")][ADMITTED_MESSAGES].tolist() == [0, 80, 80, 0, 0, 0]
    assert load.reported[("g", "a", "publish")][ADMITTED_MESSAGES] == 120  # 80 + 40: what the log holds
    assert (load.suppressed_entries, load.logged_entries) == (2, 3)
    assert load.total("g", "publish", ADMITTED_MESSAGES) == 280


def test_a_kind_left_out_of_a_reported_group_is_idle_not_suppressed():
    both = {"publish": kc(10), "dispatch": kc(5)}
    load = rebuild([
        TickCounts("a", 1, 1, T0 + 1000, 1000, False, {"g": both}),
        TickCounts("a", 1, 2, T0 + 2000, 1000, False, {"g": {"publish": kc(10)}}),  # dispatch went silent
        TickCounts("a", 1, 3, T0 + 3000, 1000, False, {}),  # g suppressed: publish carried, dispatch not
    ])
    assert load.counts[("g", "a", "publish")][ADMITTED_MESSAGES].tolist() == [10, 10, 10]
    assert load.counts[("g", "a", "dispatch")][ADMITTED_MESSAGES].tolist() == [5, 0, 0]


def test_a_suppressed_tick_of_another_length_carries_the_rate_not_the_count():
    load = rebuild([tick("a", 1, {"g": kc(100)}), tick("a", 3, tick_ms=2000)])
    assert load.counts[("g", "a", "publish")][ADMITTED_MESSAGES].tolist() == [100, 100, 100]


def test_counts_spread_over_the_seconds_a_tick_covers():
    load = rebuild([tick("a", 1.5, {"g": kc(100)}, tick_ms=1000), tick("b", 1.0, {"g": kc(10)})])
    # a: [0.5 s, 1.5 s) -> half in second 0, half in second 1
    assert load.counts[("g", "a", "publish")][ADMITTED_MESSAGES].tolist() == [50, 50]
    assert load.counts[("g", "b", "publish")][ADMITTED_MESSAGES].tolist() == [10, 0]


def test_a_split_report_is_one_tick():
    load = rebuild([tick("a", 1, {"g": kc(5)}, seq=1), tick("a", 1, {"h": kc(7)}, seq=2),
                    tick("a", 2, {"g": kc(5)}, seq=3)])  # h suppressed at 2: carried
    assert load.counts[("h", "a", "publish")][ADMITTED_MESSAGES].tolist() == [7, 7]
    assert load.spans["a"] == [Span(0, 1, False)]


def test_spans_end_on_leaving_on_silence_and_on_a_new_incarnation():
    load = rebuild([
        tick("a", 1, {"g": kc(10)}), tick("a", 2), tick("a", 3, leaving=True),
        tick("a", 6, {"g": kc(10)}, incarnation=2), tick("a", 7, incarnation=2),  # back; g carried at 7
        tick("a", 12, incarnation=2),  # 5 s of silence: it was down; nothing carried into it
        tick("a", 13, incarnation=3),
        tick("b", 1, {"g": kc(1)}), tick("b", 13),
    ])
    assert load.spans["a"] == [Span(0, 2, True), Span(5, 6, False), Span(11, 11, False), Span(12, 12, False)]
    assert load.counts[("g", "a", "publish")][ADMITTED_MESSAGES].tolist() == [10, 10, 10, 0, 0, 10, 10] + [0] * 6
    assert load.spans["b"] == [Span(0, 0, False), Span(12, 12, False)]


def test_quotas_hold_from_the_report_that_carried_them_and_before_the_first():
    load = rebuild([tick("b", 1, {"h": kc(1)}),  # the log starts a second before g's first report
                    tick("a", 2, {"g": kc(1, quota=50)}), tick("a", 3), tick("a", 4, {"g": kc(1, quota=70)})])
    q = load.quotas[("g", "publish")]
    assert q[0].tolist() == [50, 50, 50, 70]
    assert q[1].tolist() == [-1, -1, -1, -1]


# -- --set ------------------------------------------------------------------------------------


def test_set_parses_fields_and_values():
    out = parse_changes(["tenant.a.publishRateInMsgs=500", "g.dispatchRateInBytes=-1", "g.dispatchRateInBytes=7e3"])
    check_groups(out, ["tenant.a", "g"])
    assert [(c.group, c.field, c.value) for c in out] == [
        ("tenant.a", "publishRateInMsgs", 500.0), ("g", "dispatchRateInBytes", 7000.0)]  # the last of a field wins
    assert str(out[0]) == "tenant.a.publishRateInMsgs=500"


@pytest.mark.parametrize(("spec", "names"), [
    ("h.publishRateInMsgs=5", "unknown group 'h'"),
    ("g.publishRate=5", "unknown field 'publishRate'"),
    ("g.publishRateInMsgs=lots", "value 'lots' is not a number"),
    ("g.publishRateInMsgs=nan", "--set 'g.publishRateInMsgs=nan': publishRateInMsgs: out of range, expected -1"),
    ("g.publishRateInMsgs=-5", "--set 'g.publishRateInMsgs=-5': publishRateInMsgs: out of range, expected -1"),
    ("g.publishRateInMsgs", "expected GROUP.FIELD=VALUE"),
    ("publishRateInMsgs=5", "expected GROUP.FIELD=VALUE"),
])
def test_set_errors_name_what_is_wrong(spec: str, names: str):
    with pytest.raises(ProposalError, match=names.replace(".", r"\.").replace("(", r"\(")):
        check_groups(parse_changes([spec]), ["g"])


# -- the scenario -----------------------------------------------------------------------------


def test_the_scenario_offers_the_logged_load_while_each_daemon_ran():
    from sim.scenario import parse

    load = rebuild([
        tick("a", 1, {"g": kc(80, 20)}), tick("a", 2), tick("a", 3, {"g": kc(30, 0, quota=60)}, leaving=True),
        tick("b", 2, {"g": kc(10, 0, size=100)}), tick("b", 3), tick("b", 4),
    ])
    doc = scenario_doc(load, parse_changes(["g.publishRateInBytes=9000"]))
    limits = {"publishRateInMsgs": 100.0, "publishRateInBytes": 9000.0, "dispatchRateInMsgs": -1.0,
              "dispatchRateInBytes": -1.0, "replicationDispatchRateInMsgs": -1.0,
              "replicationDispatchRateInBytes": -1.0}
    assert doc["ticks"] == 4 and doc["daemons"] == ["a"]
    assert doc["groups"] == {"g": limits}
    assert doc["demand"] == {"g": {"a": {"publish": 100.0}, "b": {"publish": 0.0}}}
    assert doc["message_sizes"] == {"g": {"a": 10, "b": 100}}
    assert doc["events"] == [
        {"at": 1, "join": ["b"], "demand": {"g": {"b": {"publish": 10.0}}}},
        {"at": 2, "groups": {"g": {**limits, "publishRateInMsgs": 60.0}}, "demand": {"g": {"a": {"publish": 30.0}}}},
        {"at": 3, "leave": ["a"], "demand": {"g": {"a": {"publish": 0.0}}}},
    ]
    parse(doc)  # the simulator takes it as it is


def test_logged_figures_judge_the_log_like_a_replay():
    from rgd.whatif.replay import logged_figures

    # quota 100; a offered 100 and admitted 80, b offered 20 and admitted 20: fair is 80/20
    load = rebuild([tick("a", 1, {"g": kc(80, 20)}), tick("b", 1, {"g": kc(20)}),
                    tick("a", 2, {"g": kc(100, 0)}), tick("b", 2, {"g": kc(10, 10)})])  # 110 of 100, unfair
    f = logged_figures(load, "g", "publish", {"a": 10.0, "b": 10.0})
    assert (f.admitted_messages, f.throttled_messages) == (210, 30)
    assert f.overshoot_pct == pytest.approx(10.0)
    assert f.seconds_over == 1
    assert f.jain[0] == pytest.approx(1.0)
    # second 2: offered 100 and 20, fair 80/20; admitted 100 and 10, which the judge (one message of
    # slack either way) takes as 99/80 = 1.2375 and 11/20 = 0.55 of the fair shares
    assert f.jain[1] == pytest.approx((1.2375 + 0.55) ** 2 / (2 * (1.2375 ** 2 + 0.55 ** 2)))
    assert not math.isnan(f.jain_mean)
    assert np.isfinite(f.quota).all()


def test_reports_found_twice_count_once_and_receipts_add_nothing(tmp_path):
    """A segment both in a daemon's log directory and in its archive (LOGS above both)."""
    import shutil

    from rgd.usage_log import UsageLog
    from rgd.whatif.logged import read_ticks

    log = UsageLog(tmp_path / "logs" / "d1", "d1", clock=lambda: T0 / 1000, archive_threaded=False)
    for seq in (1, 2):
        r = UsageReport(daemon_id="d1", sequence=seq, publish_time_ms=T0 + 1000 * seq, tick_ms=1000, incarnation=9)
        r.groups.append(GroupUsage(group="g", publish=KindUsage(admitted_messages=seq)))
        log.append_published(r.SerializeToString(), (T0 + 1000 * seq) / 1000)
        log.append_receipt(r, r.SerializeToString(), (T0 + 1000 * seq) / 1000)  # as a peer's receipt would be
    log.close()
    (segment,) = (tmp_path / "logs" / "d1").glob("*.seg")
    (tmp_path / "archive").mkdir()
    shutil.copy(segment, tmp_path / "archive" / segment.name)
    ticks, stats = read_ticks(str(tmp_path))
    assert [(t.sequence, t.groups["g"]["publish"].admitted_messages) for t in ticks] == [(1, 1), (2, 2)]
    assert (stats.segments, stats.frames, stats.reports, stats.duplicates) == (2, 8, 2, 2)
