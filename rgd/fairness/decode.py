"""Decode whole segments into columns: frames, entry metadata, reports and their groups.

Why not the protobuf library per frame: a segment of one busy daemon holds
about 3 600 reports of 100 groups and 360 000 receipts; protobuf objects cost
~3 us per group row and ~2 us per receipt in Python, which caps a 2-core run
far below the report's 300 000 group rows/s target. These kernels walk the
bytes once, check each frame's CRC-32 (the same polynomial as zlib.crc32) and
decode just the fields the report needs straight into numpy columns. They are
compiled by numba when it is installed (the `spark` extra) and run as plain,
slow Python otherwise, with identical results. `decode_segment_python` is the
reference built on `rgd.usage_log` and the protobuf library: tests check the
two agree, and the benchmark uses it as its baseline.

Damage handling matches `rgd.usage_log.segment.iter_frames`: a frame that
fails (magic, bounds, CRC, unparsable metadata) starts a corrupt region that
ends at the next offset where a whole frame checks out; bytes after the last
good frame are the tail. A PUBLISHED frame whose payload is not a valid
UsageReport is kept as a frame but its report is dropped and counted.

Protobuf subset: varint, 64-bit, length-delimited and 32-bit wire types;
unknown fields and known fields with an unexpected wire type are skipped (as
protobuf does); a repeated message field seen twice merges field-wise (as
protobuf does for singular sub-messages). Strings are returned as
(offset, length) into the segment plus a 64-bit FNV-1a hash used as the key.

Field numbers come from the messages' descriptors (rgd.wire), never from
literals: `field_numbers` reads them into a namedtuple per message, which the
kernels take as an argument and compare against (`fn == M.log_index`): as
fast as literals, and a renamed or retyped field fails at import. Arguments,
not globals: numba's cache keys on this file's source, so a global would keep
a stale number after the schema changed. The traffic kinds are every
KindUsage field of GroupUsage, in declaration order (KINDS), found through a
field number -> slot table: a new kind in the schema is decoded, totalled and
analysed with no other change.
"""

from __future__ import annotations

import mmap
from collections import namedtuple
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt
from google.protobuf.descriptor import FieldDescriptor

from rgd.wire.log_entry_pb2 import LogEntryMetadata
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage, UsageReport

# The kernels' argument types, for readers and mypy (numba types the calls itself).
Buf = npt.NDArray[np.uint8]
Arr = npt.NDArray[Any]
Int = int | np.integer[Any]

try:  # compiled when available; the same functions run as Python without numba
    from numba import njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only where numba is absent
    HAVE_NUMBA = False

    def njit(*args: Any, **kwargs: Any) -> Any:  # type: ignore[no-redef]
        if args and callable(args[0]):
            return args[0]
        return lambda f: f


MAGIC0, MAGIC1, MAGIC2, MAGIC3 = 0xAB, 0x52, 0x47, 0x4C  # b"\xabRGL", see rgd.usage_log.frame
MAX_META = 64 * 1024
MAX_PAYLOAD = 64 * 1024 * 1024

# Reasons a frame was rejected (codes written by the kernel, names for messages).
REASONS = {1: "bad magic", 2: "metadata length out of bounds", 3: "truncated frame",
           4: "payload length out of bounds", 5: "CRC mismatch", 6: "metadata does not parse"}

_VARINT = frozenset({FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_INT32,
                     FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_ENUM, FieldDescriptor.TYPE_BOOL})
_WIRE = {"varint": _VARINT, "string": frozenset({FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES}),
         "double": frozenset({FieldDescriptor.TYPE_DOUBLE}), "message": frozenset({FieldDescriptor.TYPE_MESSAGE})}


def field_numbers(fields: Any, descriptor: Any, how: dict[str, str]) -> Any:
    """`fields` (a namedtuple class naming message fields) filled with their numbers from `descriptor`.

    `how` says how the kernel reads each field (varint, string, double,
    message); a field the schema lost (KeyError) or gave another type
    (TypeError) fails here, at import, instead of decoding garbage.
    """
    numbers = []
    for name in fields._fields:
        f = descriptor.fields_by_name[name]
        if f.type not in _WIRE[how[name]]:
            raise TypeError(f"{descriptor.full_name}.{name} is no longer a {how[name]} field: "
                            "update rgd.fairness.decode")
        numbers.append(f.number)
    return fields(*numbers)


def kind_fields(group_descriptor: Any, kind_descriptor: Any) -> tuple[str, ...]:
    """The traffic kinds: every field of the group message whose type is the kind message, in order."""
    return tuple(f.name for f in group_descriptor.fields
                 if f.message_type is not None and f.message_type.full_name == kind_descriptor.full_name)


def kind_slots(group_descriptor: Any, kinds: tuple[str, ...]) -> np.ndarray:
    """int64 table: group field number -> index of its kind in `kinds`, -1 for any other field."""
    slots = np.full(max(f.number for f in group_descriptor.fields) + 1, -1, dtype=np.int64)
    for i, k in enumerate(kinds):
        slots[group_descriptor.fields_by_name[k].number] = i
    return slots


# Fields (rows) of the frame table F[field, frame].
F_OFF, F_END, F_KIND, F_WRITE_US, F_INDEX, F_DHASH, F_DOFF, F_DLEN, F_RECV_US, F_PHASH, F_POFF, F_PLEN, \
    F_SEQ, F_INC, F_PUB_MS, F_KEPT, F_ACCOUNTED, F_PAYOFF, F_PAYLEN = range(19)
F_COLS = 19
MetaFields = namedtuple("MetaFields", "kind write_time_us daemon_id log_index receive_time_us publisher_id "
                                      "publisher_sequence publisher_incarnation publish_time_ms payload_kept "
                                      "accounted")
META_FIELDS = field_numbers(MetaFields, LogEntryMetadata.DESCRIPTOR, {
    **{n: "varint" for n in MetaFields._fields}, "daemon_id": "string", "publisher_id": "string"})
# Columns of the report table R (one row per PUBLISHED frame, then one per ACCOUNTING frame).
R_OK, R_DHASH, R_DOFF, R_DLEN, R_SEQ, R_PUB_MS, R_TICK_MS, R_LEAVING, R_INC, R_NGROUPS = range(10)
R_COLS = 10
ReportFields = namedtuple("ReportFields", "daemon_id sequence publish_time_ms tick_ms leaving groups incarnation "
                                          "restatement")
REPORT_FIELDS = field_numbers(ReportFields, UsageReport.DESCRIPTOR, {
    **{n: "varint" for n in ReportFields._fields}, "daemon_id": "string", "groups": "message"})
# Group rows: G_META columns; counts [ng, PER_KIND * len(KINDS)] and limits likewise, as in DecodedSegment.
G_REP, G_HASH, G_NOFF, G_NLEN = range(4)
G_META = 4
GroupFields = namedtuple("GroupFields", "group")
GROUP_FIELDS = field_numbers(GroupFields, GroupUsage.DESCRIPTOR, {"group": "string"})
KINDS: tuple[str, ...] = kind_fields(GroupUsage.DESCRIPTOR, KindUsage.DESCRIPTOR)  # publish, dispatch, ...
KIND_SLOTS = kind_slots(GroupUsage.DESCRIPTOR, KINDS)
COUNT_FIELDS = ("admitted_messages", "admitted_bytes", "throttled_messages", "throttled_bytes")  # varints
LIMIT_FIELDS = ("limit_messages", "limit_bytes", "quota_messages", "quota_bytes")  # doubles (-1: unlimited)
UNLIMITED_BITS = int(np.array(-1.0).view(np.int64))  # a limit of -1.0 as the int64 bits lims holds
PER_KIND = len(COUNT_FIELDS)
KindFields = namedtuple("KindFields", COUNT_FIELDS + LIMIT_FIELDS)  # type: ignore[misc]  # one list of names, not two
KIND_FIELDS = field_numbers(KindFields, KindUsage.DESCRIPTOR,
                            {**{n: "varint" for n in COUNT_FIELDS}, **{n: "double" for n in LIMIT_FIELDS}})
KIND_PUBLISHED, KIND_RECEIPT = LogEntryMetadata.PUBLISHED, LogEntryMetadata.RECEIPT
KIND_ACCOUNTING = LogEntryMetadata.ACCOUNTING
# Per ACCOUNTING frame, from its metadata (DecodedSegment.accounting_meta columns).
A_ADM_M, A_ADM_B, A_THR_M, A_THR_B, A_FINAL = range(5)
A_COLS = 5
MAX_PROBLEMS = 50


def _crc_tables() -> np.ndarray:
    """Slicing-by-16 tables for the reflected CRC-32 polynomial 0xEDB88320 (zlib's), as uint32.

    16 bytes per step and 4-byte entries (16 KB, half of L1): about 1.35x the
    bytes per second of slicing-by-8 over int64 tables."""
    t = np.zeros((16, 256), dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[0, i] = c
    for k in range(1, 16):
        for i in range(256):
            t[k, i] = (int(t[k - 1, i]) >> 8) ^ int(t[0, int(t[k - 1, i]) & 0xFF])
    return t


CRC_TABLES = _crc_tables()


@njit(cache=True, nogil=True)
def _le32(buf: Buf, p: Int) -> np.uint32:  # pragma: no cover - compiled
    return (np.uint32(buf[p]) | (np.uint32(buf[p + 1]) << 8) | (np.uint32(buf[p + 2]) << 16)
            | (np.uint32(buf[p + 3]) << 24))


@njit(cache=True, nogil=True)
def crc32(buf: Buf, start: Int, end: Int, t: Arr) -> np.int64:  # pragma: no cover - compiled
    """zlib.crc32(buf[start:end]), slicing by 16 bytes (returned as an int64)."""
    crc = np.uint32(0xFFFFFFFF)
    p = start
    while p + 16 <= end:
        one = _le32(buf, p) ^ crc
        two = _le32(buf, p + 4)
        three = _le32(buf, p + 8)
        four = _le32(buf, p + 12)
        crc = (t[15, one & 0xFF] ^ t[14, (one >> 8) & 0xFF] ^ t[13, (one >> 16) & 0xFF] ^ t[12, one >> 24]
               ^ t[11, two & 0xFF] ^ t[10, (two >> 8) & 0xFF] ^ t[9, (two >> 16) & 0xFF] ^ t[8, two >> 24]
               ^ t[7, three & 0xFF] ^ t[6, (three >> 8) & 0xFF] ^ t[5, (three >> 16) & 0xFF] ^ t[4, three >> 24]
               ^ t[3, four & 0xFF] ^ t[2, (four >> 8) & 0xFF] ^ t[1, (four >> 16) & 0xFF] ^ t[0, four >> 24])
        p += 16
    while p < end:
        crc = t[0, (crc ^ np.uint32(buf[p])) & 0xFF] ^ (crc >> 8)
        p += 1
    return np.int64(crc ^ np.uint32(0xFFFFFFFF))


@njit(cache=True, nogil=True)
def fnv1a(buf: Buf, start: Int, length: Int) -> np.int64:  # pragma: no cover - compiled
    """64-bit FNV-1a of buf[start:start+length], as int64 (the key of a daemon or group name)."""
    h = np.uint64(14695981039346656037)
    prime = np.uint64(1099511628211)
    for i in range(start, start + length):
        h = (h ^ np.uint64(buf[i])) * prime
    return np.int64(h)


@njit(cache=True, nogil=True)
def read_varint(buf: Buf, p: Int, end: Int) -> tuple[Int, Int]:  # pragma: no cover - compiled
    """(value as int64 bits, next offset); next offset -1 when malformed or past `end`."""
    result = np.int64(0)
    shift = 0
    while p < end and shift < 64:
        b = np.int64(buf[p])
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
        shift += 7
    return result, -1


@njit(cache=True, nogil=True)
def read_u32be(buf: Buf, p: Int) -> np.int64:  # pragma: no cover - compiled
    return (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) | np.int64(buf[p + 3])


@njit(cache=True, nogil=True)
def read_u64le(buf: Buf, p: Int) -> np.int64:  # pragma: no cover - compiled
    v = np.int64(0)
    for k in range(8):
        v |= np.int64(buf[p + k]) << (8 * k)
    return v


@njit(cache=True, nogil=True)
def read_length_delimited(buf: Buf, p: Int, end: Int) -> tuple[Int, Int]:  # pragma: no cover - compiled
    """(start, length) of the length-delimited value at `p`; start -1 when malformed
    or running past `end`: the one bounds check every wire-type-2 field goes through."""
    ln, q = read_varint(buf, p, end)
    if q < 0 or ln < 0 or q + ln > end:
        return -1, 0
    return q, ln


@njit(cache=True, nogil=True)
def skip_field(buf: Buf, p: Int, end: Int, wt: Int) -> Int:  # pragma: no cover - compiled
    """Offset after a field's value of wire type `wt`; -1 when malformed."""
    if wt == 0:
        _, q = read_varint(buf, p, end)
        return q
    if wt == 1:
        return p + 8 if p + 8 <= end else -1
    if wt == 2:
        q, ln = read_length_delimited(buf, p, end)
        return q + ln if q >= 0 else -1
    if wt == 5:
        return p + 4 if p + 4 <= end else -1
    return -1


@njit(cache=True, nogil=True)
def decode_metadata(buf: Buf, p: Int, end: Int, F: Arr, i: Int, M: Any) -> bool:  # pragma: no cover - compiled
    """LogEntryMetadata (field numbers M) in buf[p:end] into frame column F[:, i]; False when malformed."""
    for c in range(F_KIND, F_PAYOFF):
        F[c, i] = 0
    while p < end:
        tag, p = read_varint(buf, p, end)
        if p < 0:
            return False
        fn = tag >> 3
        wt = tag & 7
        if wt == 0 and (fn == M.kind or fn == M.write_time_us or fn == M.log_index or fn == M.receive_time_us
                        or fn == M.publisher_sequence or fn == M.publisher_incarnation
                        or fn == M.publish_time_ms or fn == M.payload_kept or fn == M.accounted):
            v, p = read_varint(buf, p, end)
            if p < 0:
                return False
            if fn == M.kind:
                F[F_KIND, i] = v
            elif fn == M.write_time_us:
                F[F_WRITE_US, i] = v
            elif fn == M.log_index:
                F[F_INDEX, i] = v
            elif fn == M.receive_time_us:
                F[F_RECV_US, i] = v
            elif fn == M.publisher_sequence:
                F[F_SEQ, i] = v
            elif fn == M.publisher_incarnation:
                F[F_INC, i] = v
            elif fn == M.publish_time_ms:
                F[F_PUB_MS, i] = v
            elif fn == M.accounted:
                F[F_ACCOUNTED, i] = 1 if v != 0 else 0
            else:
                F[F_KEPT, i] = 1 if v != 0 else 0
        elif wt == 2 and (fn == M.daemon_id or fn == M.publisher_id):
            q, ln = read_length_delimited(buf, p, end)
            if q < 0:
                return False
            if fn == M.daemon_id:
                F[F_DOFF, i] = q
                F[F_DLEN, i] = ln
                F[F_DHASH, i] = fnv1a(buf, q, ln)
            else:
                F[F_POFF, i] = q
                F[F_PLEN, i] = ln
                F[F_PHASH, i] = fnv1a(buf, q, ln)
            p = q + ln
        else:
            p = skip_field(buf, p, end, wt)
            if p < 0:
                return False
    return True


@njit(cache=True, nogil=True)
def try_frame(buf: Buf, pos: Int, t: Arr, F: Arr, i: Int, M: Any) -> tuple[Int, Int]:  # pragma: no cover - compiled
    """Decode the frame at `pos` into F[:, i]; returns (reason, end): reason 0 = good."""
    n = buf.size
    if n - pos < 8:
        return 3, 0
    if buf[pos] != MAGIC0 or buf[pos + 1] != MAGIC1 or buf[pos + 2] != MAGIC2 or buf[pos + 3] != MAGIC3:
        return 1, 0
    mlen = read_u32be(buf, pos + 4)
    if mlen > MAX_META:
        return 2, 0
    p = pos + 8 + mlen
    if p + 4 > n:
        return 3, 0
    plen = read_u32be(buf, p)
    if plen > MAX_PAYLOAD:
        return 4, 0
    end = p + 4 + plen + 4
    if end > n:
        return 3, 0
    if crc32(buf, pos + 4, end - 4, t) != read_u32be(buf, end - 4):
        return 5, 0
    if not decode_metadata(buf, pos + 8, pos + 8 + mlen, F, i, M):
        return 6, 0
    F[F_OFF, i] = pos
    F[F_END, i] = end
    F[F_PAYOFF, i] = p + 4
    F[F_PAYLEN, i] = plen
    return 0, end


@njit(cache=True, nogil=True)
def count_frames(buf: Buf) -> tuple[Int, Int]:  # pragma: no cover - compiled
    """Frames along the chain of well-formed headers from offset 0 (no CRC), and where it stopped.

    Only sizes the frame table exactly; scan_frames does the real checking."""
    n = buf.size
    pos: Int = 0
    count = 0
    while pos + 8 <= n:
        if buf[pos] != MAGIC0 or buf[pos + 1] != MAGIC1 or buf[pos + 2] != MAGIC2 or buf[pos + 3] != MAGIC3:
            break
        mlen = read_u32be(buf, pos + 4)
        if mlen > MAX_META or pos + 12 + mlen > n:
            break
        plen = read_u32be(buf, pos + 8 + mlen)
        end = pos + 16 + mlen + plen
        if plen > MAX_PAYLOAD or end > n:
            break
        count += 1
        pos = end
    return count, pos


@njit(cache=True, nogil=True)
def scan_frames(buf: Buf, t: Arr, cap: Int, M: Any) -> tuple[Arr, Arr, Arr, Int, Int]:  # pragma: no cover - compiled
    """Every good frame of a segment, with resync. Returns (F[:, :nf], stats, problems) or nf=-1 if cap too small.

    stats: [frames, corrupt_regions, bytes_skipped, tail_bytes]
    problems: rows of (offset, reason, region length, is_tail) for the first MAX_PROBLEMS regions.
    """
    n = buf.size
    F = np.empty((F_COLS, cap), dtype=np.int64)  # [field, frame]; every field of a good frame is written
    stats = np.zeros(4, dtype=np.int64)
    problems = np.zeros((MAX_PROBLEMS, 4), dtype=np.int64)
    nprob = 0
    nf = 0
    pos: Int = 0
    while pos < n:
        if nf >= cap:
            return F, stats, problems, -1, nprob
        reason, end = try_frame(buf, pos, t, F, nf, M)
        if reason == 0:
            nf += 1
            pos = end
            continue
        # resync: the next magic at which a whole frame checks out
        q = pos + 1
        found = -1
        while q + 4 <= n:
            if buf[q] == MAGIC0 and buf[q + 1] == MAGIC1 and buf[q + 2] == MAGIC2 and buf[q + 3] == MAGIC3:
                r2, e2 = try_frame(buf, q, t, F, nf, M)
                if r2 == 0:
                    found = q
                    end = e2
                    break
            q += 1
        if nprob < MAX_PROBLEMS:
            problems[nprob, 0] = pos
            problems[nprob, 1] = reason
            problems[nprob, 2] = (found - pos) if found >= 0 else (n - pos)
            problems[nprob, 3] = 1 if found < 0 else 0
            nprob += 1
        if found < 0:
            stats[3] = n - pos
            break
        stats[1] += 1
        stats[2] += found - pos
        nf += 1
        pos = end
    stats[0] = nf
    return F, stats, problems, nf, nprob


@njit(cache=True, nogil=True)
def decode_kind(  # pragma: no cover - compiled
        buf: Buf, p: Int, end: Int, K: Any, counts: Arr, lims: Arr, row: Int, base: Int) -> bool:
    """KindUsage (field numbers K) in buf[p:end]: its counts into counts[row, base:base+PER_KIND] in
    COUNT_FIELDS order, its doubles (as bits) into lims[row, base:...] in LIMIT_FIELDS order; False when
    malformed."""
    while p < end:
        tag, p = read_varint(buf, p, end)
        if p < 0:
            return False
        fn = tag >> 3
        wt = tag & 7
        c = -1
        if wt == 0:
            if fn == K.admitted_messages:
                c = 0
            elif fn == K.admitted_bytes:
                c = 1
            elif fn == K.throttled_messages:
                c = 2
            elif fn == K.throttled_bytes:
                c = 3
        elif wt == 1:
            if fn == K.limit_messages:
                c = 0
            elif fn == K.limit_bytes:
                c = 1
            elif fn == K.quota_messages:
                c = 2
            elif fn == K.quota_bytes:
                c = 3
        if c < 0:
            p = skip_field(buf, p, end, wt)
            if p < 0:
                return False
        elif wt == 0:
            v, p = read_varint(buf, p, end)
            if p < 0:
                return False
            counts[row, base + c] = v
        else:
            if p + 8 > end:
                return False
            lims[row, base + c] = read_u64le(buf, p)
            p += 8
    return True


@njit(cache=True, nogil=True)
def decode_group(buf: Buf, p: Int, end: Int, G: Any, slots: Arr, K: Any, gmeta: Arr, counts: Arr, lims: Arr,
                 row: Int) -> bool:  # pragma: no cover - compiled
    """GroupUsage (field numbers G; `slots`: field number -> kind index) in buf[p:end] into group row
    `row`; False when malformed. The row's limits start as unlimited (the bits of -1.0): a kind the
    report does not carry (written before that kind existed) is unlimited, as the daemons fold it; a
    kind it carries starts from protobuf's defaults (0.0) like the library's message."""
    seen = 0
    while p < end:
        tag, p = read_varint(buf, p, end)
        if p < 0:
            return False
        fn = tag >> 3
        wt = tag & 7
        slot = slots[fn] if fn < slots.size else -1
        if wt == 2 and (fn == G.group or slot >= 0):
            q, ln = read_length_delimited(buf, p, end)
            if q < 0:
                return False
            if fn == G.group:
                gmeta[row, G_NOFF] = q
                gmeta[row, G_NLEN] = ln
                gmeta[row, G_HASH] = fnv1a(buf, q, ln)
            else:
                if not (seen >> slot) & 1:
                    seen |= 1 << slot
                    for c in range(PER_KIND):
                        lims[row, PER_KIND * slot + c] = 0
                if not decode_kind(buf, q, q + ln, K, counts, lims, row, PER_KIND * slot):
                    return False
            p = q + ln
        else:
            p = skip_field(buf, p, end, wt)
            if p < 0:
                return False
    return True


@njit(cache=True, nogil=True)
def decode_reports(buf: Buf, pay_off: Arr, pay_len: Arr, gcap: Int, RF: Any, G: Any, slots: Arr, K: Any,
                   ncols: Int, skip: Arr) -> tuple[Arr, Arr, Arr, Arr, int]:  # pragma: no cover - compiled
    """Decode UsageReport payloads (field numbers RF; group and kind numbers G, slots, K).

    Returns (R, gmeta, counts, limit bits, ng); ng = -1 if gcap too small.
    `ncols` = PER_KIND * number of kinds: the width of counts and limits. A report with
    `skip[r]` set gives no group rows (its counts are in the log's ACCOUNTING frames)."""
    nr = pay_off.size
    R = np.zeros((nr, R_COLS), dtype=np.int64)
    gmeta = np.empty((gcap, G_META), dtype=np.int64)  # rows are cleared as they are started
    counts = np.empty((gcap, ncols), dtype=np.int64)
    lims = np.empty((gcap, ncols), dtype=np.int64)
    ng = 0
    empty_hash = fnv1a(buf, 0, 0)
    for r in range(nr):
        p = pay_off[r]
        end = p + pay_len[r]
        start_ng = ng
        ok = True
        restated = False
        R[r, R_DHASH] = empty_hash
        while p < end:
            tag, p = read_varint(buf, p, end)
            if p < 0:
                ok = False
                break
            fn = tag >> 3
            wt = tag & 7
            if wt == 0 and (fn == RF.sequence or fn == RF.publish_time_ms or fn == RF.tick_ms or fn == RF.leaving
                            or fn == RF.incarnation or fn == RF.restatement):
                v, p = read_varint(buf, p, end)
                if p < 0:
                    ok = False
                    break
                if fn == RF.sequence:
                    R[r, R_SEQ] = v
                elif fn == RF.publish_time_ms:
                    R[r, R_PUB_MS] = v
                elif fn == RF.tick_ms:
                    R[r, R_TICK_MS] = v & 0xFFFFFFFF
                elif fn == RF.leaving:
                    R[r, R_LEAVING] = 1 if v != 0 else 0
                elif fn == RF.restatement:
                    restated = v != 0
                else:
                    R[r, R_INC] = v
            elif wt == 2 and (fn == RF.daemon_id or fn == RF.groups):
                q, ln = read_length_delimited(buf, p, end)
                if q < 0:
                    ok = False
                    break
                if fn == RF.daemon_id:
                    R[r, R_DOFF] = q
                    R[r, R_DLEN] = ln
                    R[r, R_DHASH] = fnv1a(buf, q, ln)
                elif not skip[r]:  # a skipped report's groups are not even parsed
                    if ng >= gcap:
                        return R, gmeta, counts, lims, -1
                    gmeta[ng, G_REP] = r
                    gmeta[ng, G_HASH] = empty_hash
                    gmeta[ng, G_NOFF] = 0
                    gmeta[ng, G_NLEN] = 0
                    for c in range(ncols):
                        counts[ng, c] = 0
                        lims[ng, c] = UNLIMITED_BITS
                    if not decode_group(buf, q, q + ln, G, slots, K, gmeta, counts, lims, ng):
                        ok = False
                        break
                    ng += 1
                p = q + ln
            else:
                p = skip_field(buf, p, end, wt)
                if p < 0:
                    ok = False
                    break
        if ok and (restated or skip[r]):
            # A restatement for a new member repeats counts already logged: not new usage.
            ng = start_ng
            R[r, R_OK] = 1
        elif ok:
            R[r, R_OK] = 1
            R[r, R_NGROUPS] = ng - start_ng
        else:
            ng = start_ng  # a malformed report contributes no group rows
    return R, gmeta, counts, lims, ng


# -- the decoded segment ---------------------------------------------------------------------


@dataclass(slots=True)
class DecodedSegment:
    """Columns of one segment. Strings are keys (FNV-1a) plus a key -> name table."""

    name: str
    size: int
    frames: np.ndarray  # F table, int64 [F_COLS, nf]: one row per field, one column per frame
    # R table, int64 [n_published + n_accounting, R_COLS]: rows of the published frames, then of the
    # accounting frames, in the order of `published` and `accounting`
    reports: np.ndarray
    published: np.ndarray  # row numbers (into frames) of PUBLISHED frames
    accounting: np.ndarray  # row numbers of ACCOUNTING frames
    accounting_meta: np.ndarray  # int64 [n_accounting, A_COLS]: running totals and the final flag
    receipts: np.ndarray  # row numbers of RECEIPT frames
    group_meta: np.ndarray  # int64 [ng, G_META]
    counts: np.ndarray  # int64 [ng, PER_KIND * len(KINDS)]: per kind, COUNT_FIELDS in order
    limits: np.ndarray  # float64 [ng, PER_KIND * len(KINDS)]: per kind, LIMIT_FIELDS in order
    corrupt_regions: int = 0
    bytes_skipped: int = 0
    tail_bytes: int = 0
    frames_lost: int = 0  # log-index gaps inside the segment
    bad_payloads: int = 0  # PUBLISHED frames whose report did not parse
    problems: list[str] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)  # key -> daemon or group name



def _names(buf: np.ndarray, keys: np.ndarray, offs: np.ndarray, lens: np.ndarray, into: dict[int, str]) -> None:
    """Add key -> name for every distinct key (hash-based factorize: O(n), no sort)."""
    if keys.size == 0:
        return
    import pandas as pd

    codes, uniq = pd.factorize(keys)
    first = np.empty(uniq.size, np.int64)
    first[codes[::-1]] = np.arange(keys.size - 1, -1, -1)  # last write wins: the first occurrence
    for k, i in zip(uniq.tolist(), first.tolist()):
        if k not in into:
            into[k] = bytes(buf[offs[i]:offs[i] + lens[i]]).decode("utf-8", "replace")


def decode_segment(data: bytes | bytearray | memoryview | mmap.mmap | np.ndarray,
                   name: str = "<segment>") -> DecodedSegment:
    """Decode one segment's bytes into columns; never raises on damaged input."""
    buf = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    n = int(buf.size)
    counted, reached = count_frames(buf)
    cap = counted + (n - reached) // 48 + 16
    while True:
        F, stats, problems, nf, nprob = scan_frames(buf, CRC_TABLES, cap, META_FIELDS)
        if nf >= 0:
            break
        cap = min(2 * cap, n // 16 + 16)
    F = F[:, :nf]
    kinds = F[F_KIND]
    published = np.flatnonzero(kinds == KIND_PUBLISHED)
    receipts = np.flatnonzero(kinds == KIND_RECEIPT)
    accounting = np.flatnonzero(kinds == KIND_ACCOUNTING)
    with_counts = np.concatenate([published, accounting])
    pay_off = F[F_PAYOFF, with_counts]
    pay_len = F[F_PAYLEN, with_counts]
    skip = np.concatenate([F[F_ACCOUNTED, published] != 0, np.zeros(accounting.size, np.bool_)])
    gcap = int(pay_len.sum()) // 64 + 16
    while True:
        R, gmeta, counts, lims, ng = decode_reports(buf, pay_off, pay_len, gcap, REPORT_FIELDS, GROUP_FIELDS,
                                                    KIND_SLOTS, KIND_FIELDS, PER_KIND * len(KINDS), skip)
        if ng >= 0:
            break
        gcap = 2 * gcap
    gmeta, counts, lims = gmeta[:ng], counts[:ng], lims[:ng]
    idx = F[F_INDEX]
    gaps = np.diff(idx) if nf > 1 else np.zeros(0, np.int64)
    seg = DecodedSegment(
        name=name, size=n, frames=F, reports=R, published=published, receipts=receipts, accounting=accounting,
        accounting_meta=accounting_metadata(buf, F, accounting),
        group_meta=gmeta, counts=counts, limits=lims.view(np.float64),
        corrupt_regions=int(stats[1]), bytes_skipped=int(stats[2]), tail_bytes=int(stats[3]),
        frames_lost=int(np.clip(gaps - 1, 0, None).sum()),
        bad_payloads=int((R[:, R_OK] == 0).sum()) if R.size else 0,
    )
    for off, reason, length, tail in problems[:nprob].tolist():
        what = "tail" if tail else "corrupt region"
        seg.problems.append(f"{name}: {what} of {length} bytes at offset {off} ({REASONS.get(reason, reason)})")
    bad = np.flatnonzero(R[:, R_OK] == 0) if R.size else np.zeros(0, np.int64)
    for r in bad[:MAX_PROBLEMS].tolist():
        seg.problems.append(f"{name}: report payload does not parse at offset {int(F[F_OFF, with_counts[r]])}")
    _names(buf, F[F_DHASH], F[F_DOFF], F[F_DLEN], seg.names)
    _names(buf, F[F_PHASH, receipts], F[F_POFF, receipts], F[F_PLEN, receipts], seg.names)
    okr = R[R[:, R_OK] == 1] if R.size else R
    _names(buf, okr[:, R_DHASH], okr[:, R_DOFF], okr[:, R_DLEN], seg.names)
    _names(buf, gmeta[:, G_HASH], gmeta[:, G_NOFF], gmeta[:, G_NLEN], seg.names)
    return seg


def accounting_metadata(buf: np.ndarray, F: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The running totals and final flag of each ACCOUNTING frame (one a tick per daemon: few
    enough for the protobuf library)."""
    out = np.zeros((rows.size, A_COLS), np.int64)
    for i, r in enumerate(rows.tolist()):
        start = int(F[F_OFF, r]) + 8
        meta = LogEntryMetadata.FromString(bytes(buf[start:int(F[F_PAYOFF, r]) - 4]))
        out[i] = (meta.cumulative_admitted_messages, meta.cumulative_admitted_bytes,
                  meta.cumulative_throttled_messages, meta.cumulative_throttled_bytes, int(meta.final))
    return out


def name_key(name: str) -> int:
    """The key `decode_segment` gives a daemon or group name (64-bit FNV-1a as int64)."""
    h = 14695981039346656037
    for b in name.encode("utf-8"):
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h - (1 << 64) if h >= 1 << 63 else h


def decode_segment_python(data: bytes, name: str = "<segment>") -> tuple[int, int, int]:
    """Baseline: the plain decode with rgd.usage_log and the protobuf library.

    Returns (frames, group rows, receipts); touches every field the fast path
    extracts, so the benchmark compares like with like.
    """
    from rgd.usage_log.segment import ScanStats, iter_frames

    stats = ScanStats(name=name)
    kinds_of = attrgetter(*KINDS) if len(KINDS) > 1 else (lambda g: (getattr(g, KINDS[0]),))
    values_of = attrgetter(*COUNT_FIELDS, *LIMIT_FIELDS)
    groups = receipts = 0
    sink = 0.0
    for fr in iter_frames(data, stats):
        m = fr.metadata
        if m.kind == KIND_PUBLISHED and m.accounted:  # its counts are in the ACCOUNTING frames
            continue
        if m.kind == KIND_RECEIPT:
            receipts += 1
            sink += m.receive_time_us + m.publisher_sequence + m.publisher_incarnation + m.publish_time_ms
            _ = m.publisher_id
            continue
        try:
            rep = UsageReport.FromString(fr.payload)
        except Exception:
            continue
        if rep.restatement:  # repeats counts already logged (see the fast path)
            continue
        for g in rep.groups:
            groups += 1
            _ = g.group
            for k in kinds_of(g):
                sink += sum(values_of(k))
    return stats.frames, groups, receipts


__all__ = [
    "A_ADM_B",
    "A_ADM_M",
    "A_COLS",
    "A_FINAL",
    "A_THR_B",
    "A_THR_M",
    "COUNT_FIELDS",
    "CRC_TABLES",
    "F_ACCOUNTED",
    "F_COLS",
    "F_DHASH",
    "F_DLEN",
    "F_DOFF",
    "F_END",
    "F_INC",
    "F_INDEX",
    "F_KEPT",
    "F_KIND",
    "F_OFF",
    "F_PAYLEN",
    "F_PAYOFF",
    "F_PHASH",
    "F_PLEN",
    "F_POFF",
    "F_PUB_MS",
    "F_RECV_US",
    "F_SEQ",
    "F_WRITE_US",
    "GROUP_FIELDS",
    "G_HASH",
    "G_META",
    "G_NLEN",
    "G_NOFF",
    "G_REP",
    "HAVE_NUMBA",
    "KINDS",
    "KIND_ACCOUNTING",
    "KIND_FIELDS",
    "KIND_PUBLISHED",
    "KIND_RECEIPT",
    "KIND_SLOTS",
    "LIMIT_FIELDS",
    "MAGIC0",
    "MAGIC1",
    "MAGIC2",
    "MAGIC3",
    "MAX_META",
    "MAX_PAYLOAD",
    "MAX_PROBLEMS",
    "META_FIELDS",
    "PER_KIND",
    "REASONS",
    "REPORT_FIELDS",
    "R_COLS",
    "R_DHASH",
    "R_DLEN",
    "R_DOFF",
    "R_INC",
    "R_LEAVING",
    "R_NGROUPS",
    "R_OK",
    "R_PUB_MS",
    "R_SEQ",
    "R_TICK_MS",
    "UNLIMITED_BITS",
    "Arr",
    "Buf",
    "DecodedSegment",
    "GroupFields",
    "Int",
    "KindFields",
    "MetaFields",
    "ReportFields",
    "accounting_metadata",
    "count_frames",
    "crc32",
    "decode_group",
    "decode_kind",
    "decode_metadata",
    "decode_reports",
    "decode_segment",
    "decode_segment_python",
    "field_numbers",
    "fnv1a",
    "kind_fields",
    "kind_slots",
    "name_key",
    "njit",
    "read_length_delimited",
    "read_u32be",
    "read_u64le",
    "read_varint",
    "scan_frames",
    "skip_field",
    "try_frame"
]
