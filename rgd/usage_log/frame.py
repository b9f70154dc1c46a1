"""One usage-log frame: PIP-70 style entry metadata in front of untouched payload bytes.

Byte layout (all integers big-endian, like Pulsar's own framing)::

    offset  size  field
    0       4     magic            b"\\xabRGL"  (0xAB 0x52 0x47 0x4C)
    4       4     meta_len         u32, length of the metadata, <= MAX_META
    8       M     metadata         LogEntryMetadata protobuf (proto/rgd/v1/log_entry.proto)
    8+M     4     payload_len      u32, <= MAX_PAYLOAD
    12+M    P     payload          the report bytes exactly as published (never re-encoded)
    12+M+P  4     crc              u32, zlib.crc32 (CRC-32/ISO-HDLC) of bytes [4, 12+M+P):
                                   meta_len, metadata, payload_len and payload

Frame length = 16 + M + P. Why this shape: the order magic / metadata length /
metadata / payload length / payload is DESIGN.md section 6; the CRC goes last
so a frame is written in one pass and a torn write (the usual crash damage) is
simply a frame whose CRC or tail is missing. The magic's first byte has the
high bit set, so it is not the start of printable text; a reader that loses
its place scans for the next magic and trusts a frame only when its lengths
are in bounds and its CRC matches (64 bits of evidence), which is how it
resynchronises after corruption in the middle of a segment.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass

from rgd.wire.log_entry_pb2 import LogEntryMetadata

MAGIC = b"\xabRGL"
HEADER = 8  # magic + meta_len
OVERHEAD = 16  # magic, two lengths, crc
MAX_META = 64 * 1024
MAX_PAYLOAD = 64 * 1024 * 1024

_U32 = struct.Struct(">I")
_HEAD = struct.Struct(">4sI")

PUBLISHED = LogEntryMetadata.PUBLISHED
RECEIPT = LogEntryMetadata.RECEIPT
ACCOUNTING = LogEntryMetadata.ACCOUNTING


class FrameError(ValueError):
    """A frame that cannot be trusted; `incomplete` means the bytes simply ran out."""

    def __init__(self, message: str, offset: int, incomplete: bool = False) -> None:
        super().__init__(f"{message} at offset {offset}")
        self.offset = offset
        self.incomplete = incomplete


@dataclass(frozen=True, slots=True)
class Frame:
    """A decoded, CRC-checked frame; `end` is the offset just past it."""

    offset: int
    end: int
    metadata: LogEntryMetadata
    payload: bytes


def encode_frame(metadata: LogEntryMetadata | bytes, payload: bytes = b"") -> bytes:
    """Frame `payload` behind `metadata`; the payload bytes are copied as they are."""
    meta = metadata if isinstance(metadata, (bytes, bytearray)) else metadata.SerializeToString()
    if len(meta) > MAX_META:
        raise ValueError(f"metadata of {len(meta)} bytes exceeds {MAX_META}")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    body = b"".join((_U32.pack(len(meta)), meta, _U32.pack(len(payload)), payload))
    return b"".join((MAGIC, body, _U32.pack(zlib.crc32(body))))


def decode_frame(buf: bytes | memoryview | mmap.mmap, offset: int = 0) -> Frame:
    """Decode the frame that starts at `offset`, or raise FrameError saying why not.

    Checks, in order: magic, metadata length bound, the bytes being there,
    payload length bound, CRC, then that the metadata parses. `incomplete` is
    set only when a well-started frame runs past the end of `buf` (a torn tail).
    """
    mv = memoryview(buf)
    n = len(mv)
    if n - offset < HEADER:
        raise FrameError("truncated frame header", offset, incomplete=True)
    magic, meta_len = _HEAD.unpack_from(mv, offset)
    if magic != MAGIC:
        raise FrameError("bad magic", offset)
    if meta_len > MAX_META:
        raise FrameError(f"metadata length {meta_len} out of bounds", offset)
    p = offset + HEADER + meta_len
    if p + 4 > n:
        raise FrameError("truncated metadata", offset, incomplete=True)
    (payload_len,) = _U32.unpack_from(mv, p)
    if payload_len > MAX_PAYLOAD:
        raise FrameError(f"payload length {payload_len} out of bounds", offset)
    end = p + 4 + payload_len + 4
    if end > n:
        raise FrameError("truncated payload", offset, incomplete=True)
    (crc,) = _U32.unpack_from(mv, end - 4)
    if zlib.crc32(mv[offset + 4:end - 4]) != crc:
        raise FrameError("CRC mismatch", offset)
    meta = LogEntryMetadata()
    try:
        # protobuf parses from any buffer (no copy); types-protobuf declares only bytes
        meta.ParseFromString(mv[offset + HEADER:offset + HEADER + meta_len])  # type: ignore[arg-type]
    except Exception as exc:  # protobuf raises DecodeError; CRC passed, so the writer wrote junk
        raise FrameError(f"metadata does not parse ({exc})", offset) from exc
    return Frame(offset, end, meta, bytes(mv[p + 4:end - 4]))


def next_magic(buf: bytes, start: int) -> int:
    """Offset of the next magic at or after `start`, or -1 (`buf`: bytes or mmap)."""
    return buf.find(MAGIC, start)
