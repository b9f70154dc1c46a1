"""The usage log (DESIGN.md section 6): every published report and every receipt, framed.

- frame.py: one frame, `[magic][meta len][LogEntryMetadata][payload len][payload][crc]`;
- segment.py: segment names, the buffered writer, the damage-tolerant reader;
- archive.py: copying closed segments to a directory or fsspec URI, and the lag figures;
- log.py: `UsageLog`, the facade the daemon calls once per report and once per tick;
- accounting.py: the tick accounting frames (every admitted message once).

Nothing is resumed from the log: a restart, same id or not, is a newcomer that
listens before it admits (docs/design/protocol.md, M6).
"""

from rgd.usage_log.archive import LagFigures
from rgd.usage_log.frame import MAGIC, Frame, FrameError, decode_frame, encode_frame
from rgd.usage_log.log import LogLockedError, UsageLog
from rgd.usage_log.segment import ScanStats, iter_frames, parse_name, read_segment, scan_bytes

__all__ = [
    "MAGIC", "Frame", "FrameError", "LagFigures", "LogLockedError", "ScanStats", "UsageLog",
    "decode_frame", "encode_frame", "iter_frames", "parse_name", "read_segment", "scan_bytes",
]
