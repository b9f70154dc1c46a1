"""Finding the segments, and the grid they need, before Spark has anything to do.

Bucketing and chunking happen inside the decode tasks, so the tick length
and the chunk origin must be known on the driver first: a cheap look at the
head of each daemon's first segment gives both while the JVM is still
starting.
"""

from __future__ import annotations

from collections import Counter
from typing import IO

from rgd.config.storage import filesystem, scheme
from rgd.usage_log.segment import parse_name

__all__ = ["list_segments", "open_uri", "sample_grid"]


def list_segments(path_or_uri: str) -> list[tuple[str, int]]:
    """(uri, size) of every segment under a directory/URI (or the one file given), largest first."""
    fs, root = filesystem(path_or_uri)
    if not fs.exists(root):
        raise FileNotFoundError(f"{path_or_uri}: no such file or directory")
    found = {root: fs.info(root)} if fs.isfile(root) else fs.find(root, detail=True)
    local = not scheme(path_or_uri)
    out = []
    for path, info in found.items():
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if info.get("type", "file") == "directory" or parse_name(name) is None:
            continue
        out.append((path if local else fs.unstrip_protocol(path), int(info.get("size") or 0)))
    out.sort(key=lambda x: (-x[1], x[0]))
    return out


def sample_grid(segments: list[tuple[str, int]], limit: int = 32) -> tuple[int | None, int | None]:
    """(most common tick_ms, earliest tick bucket) from the head of each daemon's first segments.

    Bucketing and chunking happen inside the decode tasks, so both must be
    known before decoding; the earliest bucket only places the chunk origin
    (data before it is handled, just in an extra chunk).
    """
    from rgd.fairness.decode import R_NGROUPS, R_OK, R_PUB_MS, R_TICK_MS, decode_segment

    firsts: dict[str, tuple[int, str]] = {}
    for uri, _ in segments:
        p = parse_name(uri.rsplit("/", 1)[-1])
        if p is not None and (p.daemon not in firsts or p.first < firsts[p.daemon][0]):
            firsts[p.daemon] = (p.first, uri)
    seen: Counter[int] = Counter()
    earliest: int | None = None
    for _, uri in sorted(firsts.values())[:limit]:
        try:
            with open_uri(uri) as fh:
                head = fh.read(256 << 10)
        except Exception:
            continue
        r = decode_segment(head, uri).reports
        if not r.size:
            continue
        r = r[r[:, R_OK] == 1]
        # The tick is what reports WITH counts say: early reports and restatements carry a
        # fraction of a tick (their window) and, between ticks, can outnumber tick reports.
        counted = r[r[:, R_NGROUPS] > 0]
        seen.update(int(t) for t in (counted if counted.shape[0] else r)[:, R_TICK_MS].tolist() if t > 0)
        if r.shape[0]:
            earliest = int(r[:, R_PUB_MS].min()) if earliest is None else min(earliest, int(r[:, R_PUB_MS].min()))
    return (seen.most_common(1)[0][0] if seen else None), earliest


def open_uri(uri: str) -> IO[bytes]:
    """A binary read handle on a local path, file:// URI or any fsspec URI."""
    if not scheme(uri):
        return open(uri[len("file://"):] if uri.startswith("file://") else uri, "rb")
    fs, path = filesystem(uri)
    handle: IO[bytes] = fs.open(path, "rb")
    return handle
