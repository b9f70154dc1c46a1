"""The fast segment decoder against the protobuf library and the usage_log reader (no Spark)."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rgd.fairness.decode import (
    CRC_TABLES,
    F_INDEX,
    G_HASH,
    R_DHASH,
    R_INC,
    R_LEAVING,
    R_OK,
    R_PUB_MS,
    R_SEQ,
    R_TICK_MS,
    crc32,
    decode_segment,
    decode_segment_python,
    name_key,
)
from rgd.fairness.merge import merge_loss
from rgd.fairness.receipts import boundary_staleness, reduce_receipts
from rgd.fairness.series import DIMS, Grid, assemble
from rgd.fairness.task import process_segment
from rgd.usage_log.frame import encode_frame
from rgd.usage_log.segment import scan_bytes
from rgd.wire.log_entry_pb2 import LogEntryMetadata
from rgd.wire.usage_report_pb2 import UsageReport


def test_crc_matches_zlib() -> None:
    rng = random.Random(5)
    for n in (0, 1, 7, 8, 9, 63, 64, 1000):
        b = bytes(rng.getrandbits(8) for _ in range(n + 3))
        assert crc32(np.frombuffer(b, np.uint8), 3, n + 3, CRC_TABLES) == zlib.crc32(b[3:])


def test_name_key_matches_kernel() -> None:
    r = UsageReport(daemon_id="nodé-7")
    seg = decode_segment(encode_frame(LogEntryMetadata(kind=1, daemon_id="w"), r.SerializeToString()))
    assert seg.reports[0, R_DHASH] == name_key("nodé-7") and seg.names[name_key("nodé-7")] == "nodé-7"


kind_values = st.fixed_dictionaries({
    "admitted_messages": st.integers(0, 2**40), "admitted_bytes": st.integers(0, 2**50),
    "throttled_messages": st.integers(0, 2**20), "throttled_bytes": st.integers(0, 2**30),
    "limit_messages": st.floats(-1, 1e9), "limit_bytes": st.floats(-1, 1e12),
    "quota_messages": st.sampled_from([-1.0, 0.0, 100.0, 1234.5]), "quota_bytes": st.floats(-1, 1e12)})
group_st = st.tuples(st.text(min_size=0, max_size=12), st.lists(st.text(max_size=8), max_size=3),
                     st.integers(0, 1000), kind_values, kind_values)
report_st = st.tuples(st.text(min_size=1, max_size=10), st.integers(1, 2**40), st.integers(-2**40, 2**42),
                      st.integers(0, 2**31), st.booleans(), st.integers(0, 2**45), st.lists(group_st, max_size=5),
                      st.lists(st.integers(0, 2**32 - 1), max_size=4))  # heard: packed fixed32, skipped


def build(rep: tuple) -> UsageReport:
    daemon, seq, pub, tick, leaving, inc, groups, heard = rep
    r = UsageReport(daemon_id=daemon, sequence=seq, publish_time_ms=pub, tick_ms=tick, leaving=leaving,
                    incarnation=inc, heard=heard)
    for name, nss, topics, pub_k, dis_k in groups:
        g = r.groups.add(group=name, topics=topics)
        g.namespaces.extend(nss)
        for k, vals in ((g.publish, pub_k), (g.dispatch, dis_k)):
            for f, v in vals.items():
                setattr(k, f, v)
    return r


@settings(max_examples=60, deadline=None)
@given(st.lists(report_st, min_size=1, max_size=6))
def test_reports_decode_like_protobuf(reports: list[tuple]) -> None:
    built = [build(r) for r in reports]
    buf = b"".join(encode_frame(LogEntryMetadata(kind=1, log_index=i, daemon_id="w"), r.SerializeToString())
                   for i, r in enumerate(built))
    seg = decode_segment(buf)
    assert seg.reports[:, R_OK].tolist() == [1] * len(built)
    row = 0
    for i, r in enumerate(built):
        R = seg.reports[i]
        assert (R[R_SEQ], R[R_PUB_MS], R[R_TICK_MS], R[R_LEAVING], R[R_INC]) == (
            r.sequence, r.publish_time_ms, r.tick_ms, int(r.leaving), r.incarnation)
        assert seg.names[int(R[R_DHASH])] == r.daemon_id
        for g in r.groups:
            assert seg.names.get(int(seg.group_meta[row, G_HASH]), "") == g.group
            counts, limits = seg.counts[row].tolist(), seg.limits[row].tolist()
            for off, k in ((0, g.publish), (4, g.dispatch)):
                assert counts[off:off + 4] == [k.admitted_messages, k.admitted_bytes, k.throttled_messages,
                                               k.throttled_bytes]
                assert limits[off:off + 4] == [k.limit_messages, k.limit_bytes, k.quota_messages, k.quota_bytes]
            row += 1
    assert row == seg.group_meta.shape[0]


def receipt_frame(i: int, pub: str, seq: int, recv_us: int, pub_ms: int, inc: int = 9) -> bytes:
    return encode_frame(LogEntryMetadata(kind=2, log_index=i, daemon_id="r", receive_time_us=recv_us,
                                         publisher_id=pub, publisher_sequence=seq, publisher_incarnation=inc,
                                         publish_time_ms=pub_ms))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4), st.integers(0, 40))
def test_damage_counted_like_the_usage_log_reader(flips: list[tuple[int, int]], cut: int) -> None:
    frames = []
    for i in range(30):
        if i % 6 == 0:
            r = build(("d", i + 1, 1000 * i, 1000, False, 5, [("g", [], 0, {"admitted_messages": i}, {})], []))
            frames.append(encode_frame(LogEntryMetadata(kind=1, log_index=i, daemon_id="d"), r.SerializeToString()))
        else:
            frames.append(receipt_frame(i, f"p{i % 3}", i, 10_000 * i, 10 * i))
    buf = bytearray(b"".join(frames))
    for pos, val in flips:
        buf[pos % len(buf)] ^= val
    data = bytes(buf[: max(0, len(buf) - cut)])
    ref, st_ref = scan_bytes(data, "seg")
    seg = decode_segment(data, "seg")
    assert seg.frames[F_INDEX].tolist() == [f.metadata.log_index for f in ref]
    assert (seg.corrupt_regions, seg.bytes_skipped, seg.tail_bytes, seg.frames_lost) == (
        st_ref.corrupt_regions, st_ref.bytes_skipped, st_ref.tail_bytes, st_ref.frames_lost)
    assert decode_segment_python(data)[0] == len(ref)


def test_garbage_never_raises() -> None:
    rng = np.random.default_rng(1)
    for n in (0, 3, 100, 5000):
        junk = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        seg = decode_segment(b"\xabRGL" + junk)
        assert seg.frames.shape[1] == 0 and seg.tail_bytes == n + 4
    # a CRC-valid frame whose payload is not a report: counted, not fatal
    seg = decode_segment(encode_frame(LogEntryMetadata(kind=1, log_index=0), b"\xff\xff\xff"))
    assert seg.bad_payloads == 1 and seg.group_meta.shape[0] == 0


def test_receipts_loss_delay_staleness_across_segments() -> None:
    def seg(rows: list[tuple[str, int, int, int]], order: int):
        recv = np.array([r[2] for r in rows], np.int64)
        return reduce_receipts(np.full(len(rows), 1, np.int64), np.array([name_key(r[0]) for r in rows]),
                               np.array([r[3] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64),
                               recv, (recv // 1000 - 5).astype(np.int64), order=order, grid_ms=1000)

    a = [("p", s, s * 1_000_000, 1) for s in (1, 2, 3, 5, 6, 6)] + [("q", 10, 1_500_000, 1)]
    b = [("p", s, s * 1_000_000, 1) for s in (7, 9)] + [("p", 1, 20_000_000, 2), ("p", 3, 22_000_000, 2)]
    ta, tb = seg(a, 0), seg(b, 100)
    runs = pd.concat([pd.DataFrame(ta.runs), pd.DataFrame(tb.runs)])
    loss = merge_loss(runs).set_index(["publisher", "incarnation"])
    p, q = name_key("p"), name_key("q")
    assert loss.loc[(p, 1), ["received", "distinct", "expected", "lost", "duplicates"]].tolist() == [8, 7, 9, 2, 1]
    assert loss.loc[(p, 2), ["lost"]].tolist() == [1]  # a new incarnation restarts, 2 is missing
    assert loss.loc[(q, 1), ["lost", "expected"]].tolist() == [0, 1]
    pa_ = pd.DataFrame(ta.pairs).set_index("publisher")
    assert pa_.loc[p, "delay_max"] == 5.0 and pa_.loc[p, "delay_min"] == 5.0 and pa_.loc[p, "n"] == 6
    # staleness inside a segment: receive(i) - publish(i-1): 1000 + 5 ms, 2000 + 5 across the gap, 5 for the dup
    assert sorted(pa_.loc[p, ["stale_max"]].tolist()) == [2005.0]
    edges = pd.concat([pd.DataFrame(ta.edges), pd.DataFrame(tb.edges)])
    bs = boundary_staleness(edges)
    assert bs["stale_ms"].tolist() == [7000 - 6000 + 5]  # p inc 1: seq 7 arrives after 6 was published


def test_series_rows_round_trip(tmp_path: Path) -> None:
    raws = []
    for t in range(12):
        r = UsageReport(daemon_id="d1", sequence=t + 1, publish_time_ms=(1000 + t) * 1000 + 300, tick_ms=1000)
        for gname in ("a", "b"):
            if gname == "b" and t % 3:
                continue  # suppressed
            g = r.groups.add(group=gname)
            g.publish.admitted_messages = 10 * t + (gname == "b")
            g.publish.throttled_messages = t
            g.publish.limit_messages = 50.0
            g.publish.quota_messages = 100.0 if t < 6 else 200.0
            g.dispatch.quota_messages = g.dispatch.quota_bytes = -1.0
            g.dispatch.limit_messages = g.dispatch.limit_bytes = -1.0
        raws.append(encode_frame(LogEntryMetadata(kind=1, log_index=t, daemon_id="d1"), r.SerializeToString()))
    grid = Grid(1000, 8, 3, origin=1000)
    rows, meta = process_segment(b"".join(raws), "x", grid)
    assert meta.error is None and meta.group_rows == 12 + 4
    assert {(r.chunk, r.b0, r.n) for r in rows if r.group_key == name_key("a")} == {(0, 1000, 8), (1, 1005, 7)}
    m = assemble([r for r in rows if r.group_key == name_key("b") and r.chunk == 0], 1000, 8)
    k = DIMS.index("publish_messages")
    assert m.reports[0].tolist() == [1, 0, 0, 1, 0, 0, 1, 0]
    assert m.admitted[k][0].tolist() == [1, 0, 0, 31, 0, 0, 61, 0]
    assert m.quota[k][0, [0, 6]].tolist() == [100, 200]
    assert DIMS.index("dispatch_messages") not in m.admitted  # no traffic, no quota: not shipped
    tot = dict(zip(meta.totals["group"].tolist(), meta.totals["counts"][:, 0].tolist()))
    assert tot[name_key("a")] == sum(10 * t for t in range(12))


def _load_make_logs():
    path = Path(__file__).resolve().parents[2] / "bench" / "make_logs.py"
    spec = importlib.util.spec_from_file_location("make_logs", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_logs"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_bench_generator_writes_what_it_says(tmp_path: Path) -> None:
    info = _load_make_logs().generate(tmp_path, daemons=3, groups=4, ticks=30, segment_bytes=20_000, loss=0.05,
                                      progress=False)
    segs = sorted(tmp_path.glob("*.seg"))
    assert len(segs) == info["segments"] > 3
    frames = groups = receipts = 0
    admitted: dict[str, int] = {}
    for p in segs:
        data = p.read_bytes()
        f, g, r = decode_segment_python(data)
        frames, groups, receipts = frames + f, groups + g, receipts + r
        seg = decode_segment(data)
        assert seg.frames.shape[1] == f and seg.group_meta.shape[0] == g and not seg.problems
        for key, cnt in zip(seg.group_meta[:, G_HASH].tolist(), seg.counts[:, 0].tolist()):
            admitted[seg.names[key]] = admitted.get(seg.names[key], 0) + cnt
    assert groups == info["group_rows"] == 3 * 4 * 30 and receipts == info["receipts"]
    assert admitted == info["expected"]["admitted_messages"]
    assert info["receipts"] + info["receipts_lost"] == 3 * 3 * 30


def test_restatements_add_no_usage(tmp_path):
    """A new member's restatement repeats the tick's counts: replays must count them once."""
    from rgd.fairness.decode import decode_segment, decode_segment_python
    from rgd.usage_log import UsageLog
    from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport

    log = UsageLog(tmp_path, "d1", archive_threaded=False)
    g = GroupUsage(group="gold")
    g.publish.admitted_messages = 7
    tick = UsageReport(daemon_id="d1", sequence=1, publish_time_ms=1_700_000_000_000, tick_ms=1000, incarnation=1)
    tick.groups.append(g)
    again = UsageReport()
    again.CopyFrom(tick)
    again.sequence, again.restatement = 2, True
    log.append_published(tick.SerializeToString())
    log.append_published(again.SerializeToString())
    log.close()
    [seg] = sorted(tmp_path.glob("*.seg"))
    data = seg.read_bytes()
    assert decode_segment_python(data)[1] == 1
    decoded = decode_segment(data, seg.name)
    assert int(decoded.counts[:, 0].sum()) == 7


def _schema_variant():
    """rgd's usage report schema with one more traffic kind and two fields renumbered, in a pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto()
    UsageReport.DESCRIPTOR.file.CopyToProto(fdp)
    fdp.name, fdp.package = "variant/usage_report.proto", "rgdvariant.v1"
    msgs = {m.name: m for m in fdp.message_type}
    for m in fdp.message_type:
        for f in m.field:
            if f.type_name:
                f.type_name = f.type_name.replace(".rgd.v1.", ".rgdvariant.v1.")
    kind_field = next(f for f in msgs["GroupUsage"].field if f.name == "dispatch")
    extra = msgs["GroupUsage"].field.add()
    extra.CopyFrom(kind_field)
    extra.name, extra.json_name, extra.number = "storage", "storage", 7
    next(f for f in msgs["UsageReport"].field if f.name == "sequence").number = 20
    next(f for f in msgs["KindUsage"].field if f.name == "admitted_messages").number = 11
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"rgdvariant.v1.{n}"))
            for n in ("UsageReport", "GroupUsage", "KindUsage")}


def test_decoder_follows_the_schema_new_kind_and_renumbered_fields() -> None:
    """Field numbers and kinds come from descriptors: a schema with one more kind and moved fields decodes
    with specs built from it, and agrees with the protobuf library on every value."""
    from rgd.fairness.decode import (
        COUNT_FIELDS,
        G_REP,
        LIMIT_FIELDS,
        PER_KIND,
        GroupFields,
        KindFields,
        ReportFields,
        decode_reports,
        field_numbers,
        kind_fields,
        kind_slots,
    )

    V = _schema_variant()
    kinds = kind_fields(V["GroupUsage"].DESCRIPTOR, V["KindUsage"].DESCRIPTOR)
    assert kinds == ("publish", "dispatch", "replication", "storage")
    rf = field_numbers(ReportFields, V["UsageReport"].DESCRIPTOR, {
        **{n: "varint" for n in ReportFields._fields}, "daemon_id": "string", "groups": "message"})
    assert rf.sequence == 20
    gf = field_numbers(GroupFields, V["GroupUsage"].DESCRIPTOR, {"group": "string"})
    kf = field_numbers(KindFields, V["KindUsage"].DESCRIPTOR,
                       {**{n: "varint" for n in COUNT_FIELDS}, **{n: "double" for n in LIMIT_FIELDS}})
    assert kf.admitted_messages == 11
    slots = kind_slots(V["GroupUsage"].DESCRIPTOR, kinds)
    rng = random.Random(3)
    reports = []
    for i in range(5):
        r = V["UsageReport"](daemon_id=f"n{i}", sequence=1000 + i, publish_time_ms=7_000 + i, tick_ms=1000,
                             incarnation=42)
        for gname in ("g1", "g2"):
            g = r.groups.add(group=gname)
            for k in kinds:
                ku = getattr(g, k)
                for f in COUNT_FIELDS:
                    setattr(ku, f, rng.randrange(0, 2**40))
                for f in LIMIT_FIELDS:
                    setattr(ku, f, rng.choice([-1.0, 0.5, 1e6]))
        reports.append(r)
    payloads = [r.SerializeToString() for r in reports]
    buf = np.frombuffer(b"".join(payloads), np.uint8)
    offs = np.cumsum([0] + [len(p) for p in payloads[:-1]]).astype(np.int64)
    lens = np.array([len(p) for p in payloads], np.int64)
    R, gmeta, counts, lims, ng = decode_reports(buf, offs, lens, 64, rf, gf, slots, kf, PER_KIND * len(kinds),
                                             np.zeros(len(payloads), np.bool_))
    assert ng == 10
    lims = lims.view(np.float64)
    row = 0
    for i, r in enumerate(reports):
        assert (R[i, R_OK], R[i, R_SEQ], R[i, R_PUB_MS], R[i, R_INC]) == (1, r.sequence, r.publish_time_ms,
                                                                        r.incarnation)
        for g in r.groups:
            assert gmeta[row, G_REP] == i and gmeta[row, G_HASH] == name_key(g.group)
            for j, k in enumerate(kinds):
                ku = getattr(g, k)
                assert counts[row, PER_KIND * j:PER_KIND * (j + 1)].tolist() == [getattr(ku, f) for f in COUNT_FIELDS]
                assert lims[row, PER_KIND * j:PER_KIND * (j + 1)].tolist() == [getattr(ku, f) for f in LIMIT_FIELDS]
            row += 1


def test_a_retyped_field_fails_at_import_time() -> None:
    from rgd.fairness.decode import KindFields, field_numbers

    with pytest.raises(TypeError, match="admitted_messages is no longer a double field"):
        field_numbers(KindFields, UsageReport.DESCRIPTOR.fields_by_name["groups"].message_type.fields_by_name[
            "publish"].message_type, {n: "double" for n in KindFields._fields})


def test_the_report_kinds_are_the_daemons_kinds() -> None:
    """The decoder's kinds (from the wire schema) and the daemon's (rgd.config.groups.KINDS) must not drift apart."""
    from rgd.config.groups import KINDS as DAEMON_KINDS
    from rgd.fairness.decode import KINDS as WIRE_KINDS
    from rgd.fairness.merge import TOTAL_COLS

    assert WIRE_KINDS == DAEMON_KINDS
    assert tuple(f"{k}_{u}" for k in DAEMON_KINDS for u in ("messages", "bytes")) == DIMS
    assert TOTAL_COLS[:4] == ("publish_messages_admitted", "publish_bytes_admitted", "publish_messages_throttled",
                              "publish_bytes_throttled")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0.0, 1000.0, 2000.0]), st.floats(0, 1e6, width=32),
                          st.floats(0, 1e3, width=32), st.sampled_from([50.0, 60.0, float("inf")]),
                          st.sampled_from([100.0, 200.0, float("inf"), float("nan")])), min_size=1, max_size=40),
       st.integers(1, 3))
def test_blob_round_trip(cells: list[tuple], ndims: int) -> None:
    """pack_blob/unpack_blob: reports and tick lengths exact everywhere, counts as float32, limits and quotas
    exact wherever a report is (the only buckets the reducer reads them at)."""
    from rgd.fairness.series import pack_blob, unpack_blob

    rep, tick, adm, thr, lim, quo = (np.array(c, dtype=float) for c in zip(*cells))
    per_dim = [(adm * (d + 1), thr, lim, quo) for d in range(ndims)]
    dims = sum(1 << d for d in range(ndims))
    out = unpack_blob(pack_blob(rep, tick, per_dim), rep.size, dims)
    assert out[("reports", -1)].tolist() == rep.astype(np.int64).tolist()
    assert out[("tick_ms", -1)].tolist() == tick.tolist()
    has = rep > 0
    for d in range(ndims):
        assert out[("admitted", d)].tolist() == (adm * (d + 1)).astype(np.float32).tolist()
        assert out[("throttled", d)].tolist() == thr.astype(np.float32).tolist()
        np.testing.assert_array_equal(out[("limit", d)][has], lim[has])
        np.testing.assert_array_equal(out[("quota", d)][has], quo[has])


def _assemble_reference(rows, w0: int, width: int) -> dict:
    """Oracle for series.assemble: the plain numpy version over unpack_blob, one row after another."""
    from rgd.fairness.series import unpack_blob

    daemons = sorted({r.daemon_key for r in rows})
    D = len(daemons)
    dims = 0
    for r in rows:
        dims |= r.dims
    ks = [k for k in range(len(DIMS)) if dims >> k & 1]
    out = {"reports": np.zeros((D, width), np.int64), "tick": np.zeros((D, width))}
    for k in ks:
        out[("adm", k)], out[("thr", k)] = np.zeros((D, width)), np.zeros((D, width))
        out[("lim", k)], out[("quo", k)] = np.full((D, width), np.nan), np.full((D, width), np.nan)
    for r in sorted(rows, key=lambda r: (r.daemon_key, r.order)):
        d = daemons.index(r.daemon_key)
        a = unpack_blob(r.blob, r.n, r.dims)
        for i in range(r.n):
            t = r.b0 + i - w0
            if not 0 <= t < width:
                continue
            rep = a[("reports", -1)][i]
            out["reports"][d, t] += rep
            out["tick"][d, t] += a[("tick_ms", -1)][i]
            for k in ks:
                if r.dims >> k & 1:
                    out[("adm", k)][d, t] += a[("admitted", k)][i]
                    out[("thr", k)][d, t] += a[("throttled", k)][i]
                if rep > 0:
                    out[("lim", k)][d, t] = a[("limit", k)][i] if r.dims >> k & 1 else np.inf
                    out[("quo", k)][d, t] = a[("quota", k)][i] if r.dims >> k & 1 else np.inf
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(1, 25), st.integers(1, 3),
                          st.integers(0, 2**31)), min_size=1, max_size=8), st.integers(0, 20), st.integers(1, 30))
def test_assemble_matches_the_plain_version(specs: list[tuple], w0: int, width: int) -> None:
    """Rows of several daemons and segments, overlapping, clipped by the window, with differing dimensions."""
    from rgd.fairness.series import SeriesRow, assemble, pack_blob

    rows = []
    for order, (daemon, b0, n, dims, seed) in enumerate(specs):
        rng = np.random.default_rng(seed)
        rep = rng.integers(0, 3, n).astype(float)
        tick = np.where(rep > 0, 1000.0 * rep, 0.0)
        per_dim = [(rng.integers(0, 50, n).astype(float), rng.integers(0, 5, n).astype(float),
                    rng.choice([10.0, 20.0, np.inf], n), rng.choice([100.0, np.inf], n))
                   for k in range(len(DIMS)) if dims >> k & 1]
        rows.append(SeriesRow(1, 0, daemon, order, b0, n, dims, pack_blob(rep, tick, per_dim)))
    m = assemble(rows, w0, width)
    ref = _assemble_reference(rows, w0, width)
    np.testing.assert_array_equal(m.reports, ref["reports"])
    np.testing.assert_array_equal(m.tick_ms, ref["tick"])
    for k in m.admitted:
        np.testing.assert_array_equal(m.admitted[k], ref[("adm", k)])
        np.testing.assert_array_equal(m.throttled[k], ref[("thr", k)])
        np.testing.assert_array_equal(m.limit[k], ref[("lim", k)])
        np.testing.assert_array_equal(m.quota[k], ref[("quo", k)])


def test_a_kind_the_report_does_not_carry_is_unlimited_one_it_carries_is_protobufs() -> None:
    """A report from before the replication kind existed has no `replication` entry: the decoder
    reads it as unlimited (-1), as the daemons fold it (usage_map.group_rates); a carried entry,
    even an empty one, reads as the protobuf library reads it (limits 0.0: blocked)."""
    from rgd.cluster.usage_map import group_rates
    from rgd.fairness.decode import (
        GROUP_FIELDS,
        KIND_FIELDS,
        KIND_SLOTS,
        KINDS,
        LIMIT_FIELDS,
        PER_KIND,
        REPORT_FIELDS,
        decode_reports,
    )

    old = UsageReport(daemon_id="n", sequence=1, publish_time_ms=5, tick_ms=1000, incarnation=1)
    g = old.groups.add(group="g")
    g.publish.admitted_messages, g.publish.limit_messages, g.publish.quota_messages = 3, 10.0, 20.0
    g.dispatch.limit_messages = g.dispatch.limit_bytes = -1.0
    new = UsageReport()
    new.CopyFrom(old)
    new.groups[0].replication.SetInParent()  # carried, every field at its default
    payloads = [old.SerializeToString(), new.SerializeToString()]
    buf = np.frombuffer(b"".join(payloads), np.uint8)
    offs = np.array([0, len(payloads[0])], np.int64)
    lens = np.array([len(p) for p in payloads], np.int64)
    _, _, _, lims, ng = decode_reports(buf, offs, lens, 8, REPORT_FIELDS, GROUP_FIELDS, KIND_SLOTS, KIND_FIELDS,
                                       PER_KIND * len(KINDS), np.zeros(len(payloads), np.bool_))
    lims = lims[:ng].view(np.float64)
    r = KINDS.index("replication")
    assert lims[0, PER_KIND * r:PER_KIND * (r + 1)].tolist() == [-1.0] * 4
    assert lims[1, PER_KIND * r:PER_KIND * (r + 1)].tolist() == [0.0] * 4
    p = KINDS.index("publish")
    assert lims[0, PER_KIND * p:PER_KIND * (p + 1)].tolist() == [getattr(g.publish, f) for f in LIMIT_FIELDS]
    assert group_rates(old.groups[0], 1.0)["replication"].limit_messages == math.inf
    assert group_rates(new.groups[0], 1.0)["replication"].limit_messages == 0.0
