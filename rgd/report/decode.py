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

Field numbers and types come from the messages' descriptors (rgd.wire), never
from literals: `field_spec` turns "this field goes to that column" into a
table the kernels look each field number up in, so a renamed or retyped field
fails loudly at import and a new one is a line here. The traffic kinds are
every KindUsage field of GroupUsage, in declaration order (KINDS): a new kind
in the schema is decoded, totalled and analysed with no other change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np
from google.protobuf.descriptor import FieldDescriptor

from rgd.wire.log_entry_pb2 import LogEntryMetadata
from rgd.wire.usage_report_pb2 import GroupUsage, KindUsage, UsageReport

try:  # compiled when available; the same functions run as Python without numba
    from numba import njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only where numba is absent
    HAVE_NUMBA = False

    def njit(*args, **kwargs):  # type: ignore[no-redef]
        if args and callable(args[0]):
            return args[0]
        return lambda f: f


MAGIC0, MAGIC1, MAGIC2, MAGIC3 = 0xAB, 0x52, 0x47, 0x4C  # b"\xabRGL", see rgd.usage_log.frame
MAX_META = 64 * 1024
MAX_PAYLOAD = 64 * 1024 * 1024

# Reasons a frame was rejected (codes written by the kernel, names for messages).
REASONS = {1: "bad magic", 2: "metadata length out of bounds", 3: "truncated frame",
           4: "payload length out of bounds", 5: "CRC mismatch", 6: "metadata does not parse"}

# What a kernel does with a field (column 0 of a spec row); columns 1-3 say where the value goes.
A_SKIP, A_VARINT, A_UINT32, A_BOOL, A_STRING, A_DOUBLE, A_MESSAGE = range(7)
_ACTION_OF_TYPE = {
    FieldDescriptor.TYPE_INT64: A_VARINT, FieldDescriptor.TYPE_UINT64: A_VARINT, FieldDescriptor.TYPE_INT32: A_VARINT,
    FieldDescriptor.TYPE_ENUM: A_VARINT, FieldDescriptor.TYPE_UINT32: A_UINT32, FieldDescriptor.TYPE_BOOL: A_BOOL,
    FieldDescriptor.TYPE_STRING: A_STRING, FieldDescriptor.TYPE_BYTES: A_STRING,
    FieldDescriptor.TYPE_DOUBLE: A_DOUBLE, FieldDescriptor.TYPE_MESSAGE: A_MESSAGE,
}


def field_spec(descriptor, columns: dict[str, tuple[int, ...]]) -> np.ndarray:
    """int64 [max field number + 1, 4]: per field number (action, up to 3 target columns).

    A string fills (hash, offset, length); a scalar one column; a message
    names its slot (which kind). Fields not in `columns` are skipped, like
    unknown ones. A field missing from the schema (KeyError) or of a type no
    kernel reads (KeyError on its type) fails at import, not in a task.
    """
    spec = np.zeros((max(f.number for f in descriptor.fields) + 1, 4), dtype=np.int64)
    for name, cols in columns.items():
        f = descriptor.fields_by_name[name]
        spec[f.number, 0] = _ACTION_OF_TYPE[f.type]
        spec[f.number, 1:1 + len(cols)] = cols
    return spec


# Fields (rows) of the frame table F[field, frame].
F_OFF, F_END, F_KIND, F_WRITE_US, F_INDEX, F_DHASH, F_DOFF, F_DLEN, F_RECV_US, F_PHASH, F_POFF, F_PLEN, \
    F_SEQ, F_INC, F_PUB_MS, F_KEPT, F_PAYOFF, F_PAYLEN = range(18)
F_COLS = 18
META_SPEC = field_spec(LogEntryMetadata.DESCRIPTOR, {
    "kind": (F_KIND,), "write_time_us": (F_WRITE_US,), "daemon_id": (F_DHASH, F_DOFF, F_DLEN),
    "log_index": (F_INDEX,), "receive_time_us": (F_RECV_US,), "publisher_id": (F_PHASH, F_POFF, F_PLEN),
    "publisher_sequence": (F_SEQ,), "publisher_incarnation": (F_INC,), "publish_time_ms": (F_PUB_MS,),
    "payload_kept": (F_KEPT,)})
# Columns of the report table R (one row per PUBLISHED frame).
R_OK, R_DHASH, R_DOFF, R_DLEN, R_SEQ, R_PUB_MS, R_TICK_MS, R_LEAVING, R_INC, R_NGROUPS, R_RESTATED = range(11)
R_COLS = 11
REPORT_SPEC = field_spec(UsageReport.DESCRIPTOR, {
    "daemon_id": (R_DHASH, R_DOFF, R_DLEN), "sequence": (R_SEQ,), "publish_time_ms": (R_PUB_MS,),
    "tick_ms": (R_TICK_MS,), "leaving": (R_LEAVING,), "incarnation": (R_INC,), "restatement": (R_RESTATED,),
    "groups": (0,)})
# Group rows: G_META columns; counts [ng, PER_KIND * len(KINDS)] and limits likewise, as in DecodedSegment.
G_REP, G_HASH, G_NOFF, G_NLEN = range(4)
G_META = 4


def kind_fields(group_descriptor, kind_descriptor) -> tuple[str, ...]:
    """The traffic kinds: every field of the group message whose type is the kind message, in order."""
    return tuple(f.name for f in group_descriptor.fields
                 if f.message_type is not None and f.message_type.full_name == kind_descriptor.full_name)


KINDS: tuple[str, ...] = kind_fields(GroupUsage.DESCRIPTOR, KindUsage.DESCRIPTOR)  # publish, dispatch, ...
COUNT_FIELDS = ("admitted_messages", "admitted_bytes", "throttled_messages", "throttled_bytes")  # varints
LIMIT_FIELDS = ("limit_messages", "limit_bytes", "quota_messages", "quota_bytes")  # doubles (-1: unlimited)
PER_KIND = len(COUNT_FIELDS)
GROUP_SPEC = field_spec(GroupUsage.DESCRIPTOR,
                        {"group": (G_HASH, G_NOFF, G_NLEN), **{k: (i,) for i, k in enumerate(KINDS)}})
KIND_SPEC = field_spec(KindUsage.DESCRIPTOR, {**{n: (j,) for j, n in enumerate(COUNT_FIELDS)},
                                               **{n: (j,) for j, n in enumerate(LIMIT_FIELDS)}})
KIND_PUBLISHED, KIND_RECEIPT = LogEntryMetadata.PUBLISHED, LogEntryMetadata.RECEIPT
MAX_PROBLEMS = 50


def _crc_tables() -> np.ndarray:
    """Slicing-by-8 tables for the reflected CRC-32 polynomial 0xEDB88320 (zlib's)."""
    t = np.zeros((8, 256), dtype=np.int64)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[0, i] = c
    for k in range(1, 8):
        for i in range(256):
            t[k, i] = (t[k - 1, i] >> 8) ^ t[0, t[k - 1, i] & 0xFF]
    return t


CRC_TABLES = _crc_tables()


@njit(cache=True, nogil=True)
def crc32(buf, start, end, t):  # pragma: no cover - compiled
    """zlib.crc32(buf[start:end]) with int64 arithmetic (no unsigned promotion surprises)."""
    crc = 0xFFFFFFFF
    p = start
    while p + 8 <= end:
        one = (np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8) | (np.int64(buf[p + 2]) << 16)
               | (np.int64(buf[p + 3]) << 24)) ^ crc
        two = (np.int64(buf[p + 4]) | (np.int64(buf[p + 5]) << 8) | (np.int64(buf[p + 6]) << 16)
               | (np.int64(buf[p + 7]) << 24))
        crc = (t[7, one & 0xFF] ^ t[6, (one >> 8) & 0xFF] ^ t[5, (one >> 16) & 0xFF] ^ t[4, (one >> 24) & 0xFF]
               ^ t[3, two & 0xFF] ^ t[2, (two >> 8) & 0xFF] ^ t[1, (two >> 16) & 0xFF] ^ t[0, (two >> 24) & 0xFF])
        p += 8
    while p < end:
        crc = t[0, (crc ^ np.int64(buf[p])) & 0xFF] ^ (crc >> 8)
        p += 1
    return crc ^ 0xFFFFFFFF


@njit(cache=True, nogil=True)
def fnv1a(buf, start, length):  # pragma: no cover - compiled
    """64-bit FNV-1a of buf[start:start+length], as int64 (the key of a daemon or group name)."""
    h = np.uint64(14695981039346656037)
    prime = np.uint64(1099511628211)
    for i in range(start, start + length):
        h = (h ^ np.uint64(buf[i])) * prime
    return np.int64(h)


@njit(cache=True, nogil=True)
def read_varint(buf, p, end):  # pragma: no cover - compiled
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
def read_u32be(buf, p):  # pragma: no cover - compiled
    return (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) | np.int64(buf[p + 3])


@njit(cache=True, nogil=True)
def read_u64le(buf, p):  # pragma: no cover - compiled
    v = np.int64(0)
    for k in range(8):
        v |= np.int64(buf[p + k]) << (8 * k)
    return v


@njit(cache=True, nogil=True)
def read_length_delimited(buf, p, end):  # pragma: no cover - compiled
    """(start, length) of the length-delimited value at `p`; start -1 when malformed
    or running past `end`: the one bounds check every wire-type-2 field goes through."""
    ln, q = read_varint(buf, p, end)
    if q < 0 or ln < 0 or q + ln > end:
        return -1, 0
    return q, ln


@njit(cache=True, nogil=True)
def skip_field(buf, p, end, wt):  # pragma: no cover - compiled
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
def read_field(buf, p, end, wt, spec, fn, row):  # pragma: no cover - compiled
    """One field's value at `p` into `row` as `spec[fn]` says (a skip for unlisted fields, messages
    and wire types that do not match the schema's); returns the next offset, -1 when malformed."""
    act = spec[fn, 0] if fn < spec.shape[0] else A_SKIP
    if wt == 0 and (act == A_VARINT or act == A_UINT32 or act == A_BOOL):
        v, p = read_varint(buf, p, end)
        if p < 0:
            return -1
        if act == A_VARINT:
            row[spec[fn, 1]] = v
        elif act == A_UINT32:
            row[spec[fn, 1]] = v & 0xFFFFFFFF
        else:
            row[spec[fn, 1]] = 1 if v != 0 else 0
        return p
    if wt == 2 and act == A_STRING:
        q, ln = read_length_delimited(buf, p, end)
        if q < 0:
            return -1
        row[spec[fn, 1]] = fnv1a(buf, q, ln)
        row[spec[fn, 2]] = q
        row[spec[fn, 3]] = ln
        return q + ln
    if wt == 1 and act == A_DOUBLE:
        if p + 8 > end:
            return -1
        row[spec[fn, 1]] = read_u64le(buf, p)
        return p + 8
    return skip_field(buf, p, end, wt)


@njit(cache=True, nogil=True)
def decode_metadata(buf, p, end, F, i, spec):  # pragma: no cover - compiled
    """LogEntryMetadata in buf[p:end] into frame column F[:, i]; False when malformed."""
    for c in range(F_KIND, F_PAYOFF):
        F[c, i] = 0
    row = F[:, i]
    while p < end:
        tag, p = read_varint(buf, p, end)
        if p < 0:
            return False
        p = read_field(buf, p, end, tag & 7, spec, tag >> 3, row)
        if p < 0:
            return False
    return True


@njit(cache=True, nogil=True)
def try_frame(buf, pos, t, F, i, spec):  # pragma: no cover - compiled
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
    if not decode_metadata(buf, pos + 8, pos + 8 + mlen, F, i, spec):
        return 6, 0
    F[F_OFF, i] = pos
    F[F_END, i] = end
    F[F_PAYOFF, i] = p + 4
    F[F_PAYLEN, i] = plen
    return 0, end


@njit(cache=True, nogil=True)
def count_frames(buf):  # pragma: no cover - compiled
    """Frames along the chain of well-formed headers from offset 0 (no CRC), and where it stopped.

    Only sizes the frame table exactly; scan_frames does the real checking."""
    n = buf.size
    pos = 0
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
def scan_frames(buf, t, cap, spec):  # pragma: no cover - compiled
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
    pos = 0
    while pos < n:
        if nf >= cap:
            return F, stats, problems, -1, nprob
        reason, end = try_frame(buf, pos, t, F, nf, spec)
        if reason == 0:
            nf += 1
            pos = end
            continue
        # resync: the next magic at which a whole frame checks out
        q = pos + 1
        found = -1
        while q + 4 <= n:
            if buf[q] == MAGIC0 and buf[q + 1] == MAGIC1 and buf[q + 2] == MAGIC2 and buf[q + 3] == MAGIC3:
                r2, e2 = try_frame(buf, q, t, F, nf, spec)
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
def decode_kind(buf, p, end, spec, counts, lims, row, base):  # pragma: no cover - compiled
    """KindUsage in buf[p:end]: its counts into counts[row, base:base+PER_KIND], its doubles (as bits)
    into lims[row, base:base+PER_KIND]; False when malformed."""
    while p < end:
        tag, p = read_varint(buf, p, end)
        if p < 0:
            return False
        fn = tag >> 3
        wt = tag & 7
        act = spec[fn, 0] if fn < spec.shape[0] else A_SKIP
        if wt == 0 and act == A_VARINT:
            v, p = read_varint(buf, p, end)
            if p < 0:
                return False
            counts[row, base + spec[fn, 1]] = v
        elif wt == 1 and act == A_DOUBLE:
            if p + 8 > end:
                return False
            lims[row, base + spec[fn, 1]] = read_u64le(buf, p)
            p += 8
        else:
            p = skip_field(buf, p, end, wt)
            if p < 0:
                return False
    return True


@njit(cache=True, nogil=True)
def decode_group(buf, p, end, gspec, kspec, gmeta, counts, lims, row):  # pragma: no cover - compiled
    """GroupUsage in buf[p:end] into group row `row` (its name into gmeta, each kind into its
    PER_KIND columns); False when malformed."""
    grow = gmeta[row]
    while p < end:
        tag, p = read_varint(buf, p, end)
        if p < 0:
            return False
        fn = tag >> 3
        wt = tag & 7
        if wt == 2 and fn < gspec.shape[0] and gspec[fn, 0] == A_MESSAGE:
            q, ln = read_length_delimited(buf, p, end)
            if q < 0 or not decode_kind(buf, q, q + ln, kspec, counts, lims, row, PER_KIND * gspec[fn, 1]):
                return False
            p = q + ln
        else:
            p = read_field(buf, p, end, wt, gspec, fn, grow)
            if p < 0:
                return False
    return True


@njit(cache=True, nogil=True)
def decode_reports(buf, pay_off, pay_len, gcap, rspec, gspec, kspec, ncols):  # pragma: no cover - compiled
    """Decode UsageReport payloads. Returns (R, gmeta, counts, limit bits, ng); ng = -1 if gcap too small.

    `ncols` = PER_KIND * number of kinds: the width of counts and limits."""
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
        row = R[r]
        row[R_DHASH] = empty_hash
        while p < end:
            tag, p = read_varint(buf, p, end)
            if p < 0:
                ok = False
                break
            fn = tag >> 3
            wt = tag & 7
            if wt == 2 and fn < rspec.shape[0] and rspec[fn, 0] == A_MESSAGE:  # one more group
                q, ln = read_length_delimited(buf, p, end)
                if q < 0:
                    ok = False
                    break
                if ng >= gcap:
                    return R, gmeta, counts, lims, -1
                gmeta[ng, G_REP] = r
                gmeta[ng, G_HASH] = empty_hash
                gmeta[ng, G_NOFF] = 0
                gmeta[ng, G_NLEN] = 0
                for c in range(ncols):
                    counts[ng, c] = 0
                    lims[ng, c] = 0
                if not decode_group(buf, q, q + ln, gspec, kspec, gmeta, counts, lims, ng):
                    ok = False
                    break
                ng += 1
                p = q + ln
            else:
                p = read_field(buf, p, end, wt, rspec, fn, row)
                if p < 0:
                    ok = False
                    break
        if ok and row[R_RESTATED] != 0:
            # A restatement for a new member repeats counts already logged: not new usage.
            ng = start_ng
            row[R_OK] = 1
        elif ok:
            row[R_OK] = 1
            row[R_NGROUPS] = ng - start_ng
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
    reports: np.ndarray  # R table, int64 [n_published, R_COLS], aligned with published frame rows
    published: np.ndarray  # row numbers (into frames) of PUBLISHED frames
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


def decode_segment(data: bytes | bytearray | memoryview | np.ndarray, name: str = "<segment>") -> DecodedSegment:
    """Decode one segment's bytes into columns; never raises on damaged input."""
    buf = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    n = int(buf.size)
    counted, reached = count_frames(buf)
    cap = counted + (n - reached) // 48 + 16
    while True:
        F, stats, problems, nf, nprob = scan_frames(buf, CRC_TABLES, cap, META_SPEC)
        if nf >= 0:
            break
        cap = min(2 * cap, n // 16 + 16)
    F = F[:, :nf]
    kinds = F[F_KIND]
    published = np.flatnonzero(kinds == KIND_PUBLISHED)
    receipts = np.flatnonzero(kinds == KIND_RECEIPT)
    pay_off = F[F_PAYOFF, published]
    pay_len = F[F_PAYLEN, published]
    gcap = int(pay_len.sum()) // 64 + 16
    while True:
        R, gmeta, counts, lims, ng = decode_reports(buf, pay_off, pay_len, gcap, REPORT_SPEC, GROUP_SPEC, KIND_SPEC,
                                                    PER_KIND * len(KINDS))
        if ng >= 0:
            break
        gcap = 2 * gcap
    gmeta, counts, lims = gmeta[:ng], counts[:ng], lims[:ng]
    idx = F[F_INDEX]
    gaps = np.diff(idx) if nf > 1 else np.zeros(0, np.int64)
    seg = DecodedSegment(
        name=name, size=n, frames=F, reports=R, published=published, receipts=receipts,
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
        seg.problems.append(f"{name}: report payload does not parse at offset {int(F[F_OFF, published[r]])}")
    _names(buf, F[F_DHASH], F[F_DOFF], F[F_DLEN], seg.names)
    _names(buf, F[F_PHASH, receipts], F[F_POFF, receipts], F[F_PLEN, receipts], seg.names)
    okr = R[R[:, R_OK] == 1] if R.size else R
    _names(buf, okr[:, R_DHASH], okr[:, R_DOFF], okr[:, R_DLEN], seg.names)
    _names(buf, gmeta[:, G_HASH], gmeta[:, G_NOFF], gmeta[:, G_NLEN], seg.names)
    return seg


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
