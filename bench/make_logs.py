"""Synthetic usage logs at scale: D daemons x G groups x T ticks, written as real segments.

Usage: python bench/make_logs.py OUT_DIR [--daemons 100] [--groups 100] [--ticks 3600]

Every daemon writes, per tick, its tick accounting (an ACCOUNTING frame with the
counts of all G groups, rgd.usage_log.accounting), then the report it publishes
(a PUBLISHED frame marked `accounted`, with PIP-82's suppression: a group whose
counts did not change since it was last sent is left out, but sent at least
every REFRESH_TICKS ticks), and one RECEIPT per report it hears (all D daemons',
its own included, minus a small random loss), so the logs hold D*G*T accounted
group rows and about D*D*T receipts. The report's totals must come from the
accounting: the published reports alone miss every suppressed tick. Segments are
byte-for-byte what `rgd.usage_log` writes (same frame layout, names, CRC); the
bench only writes them faster:

- a report is built once per daemon and tick from GroupUsage bytes cached by
  value (demand is piecewise constant and admitted converges to the fair share,
  so most ticks reuse cached bytes); protobuf concatenation makes the report
  the serialized header plus the group fields;
- receipts are encoded by a numba kernel (LogEntryMetadata fields in field
  order, then the frame and its CRC), 100 per call.

The workload: each group has a quota; every 600 ticks each daemon draws a new
demand per group; admitted approaches the max-min fair share (halving the gap
each tick), throttled = demand - admitted. `expected` in the returned dict
carries the exact totals the report must find.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rgd.fairness.decode import CRC_TABLES, crc32, njit
from rgd.fairness.measures import max_min_fair
from rgd.usage_log.frame import encode_frame
from rgd.usage_log.segment import closed_name
from rgd.wire.log_entry_pb2 import LogEntryMetadata
from rgd.wire.usage_report_pb2 import GroupUsage, UsageReport

T0_MS = 1_700_000_000_000
MSG_BYTES = 1000
REFRESH_TICKS = 10  # a suppressed group is sent again at least this often


@njit(cache=True, nogil=True)
def _varint(out, p, v):  # pragma: no cover - compiled
    while v >= 0x80:
        out[p] = (v & 0x7F) | 0x80
        v >>= 7
        p += 1
    out[p] = v
    return p + 1


@njit(cache=True, nogil=True)
def _bytes_field(out, p, tag, src, n):  # pragma: no cover - compiled
    out[p] = tag
    p = _varint(out, p + 1, n)
    for i in range(n):
        out[p + i] = src[i]
    return p + n


@njit(cache=True, nogil=True)
def encode_receipts(out, writer, writer_len, names, name_lens, pubs, seqs, incs, pub_ms, recv_us,
                    write_us, first_index, t):  # pragma: no cover - compiled
    """RECEIPT frames for publishers `pubs` into `out`; returns the bytes written."""
    p = 0
    for i in range(pubs.size):
        s = p
        out[s] = 0xAB
        out[s + 1] = 0x52
        out[s + 2] = 0x47
        out[s + 3] = 0x4C
        m = s + 8
        q = m
        out[q] = 0x08
        out[q + 1] = 2
        q += 2
        out[q] = 0x10
        q = _varint(out, q + 1, write_us[i])
        q = _bytes_field(out, q, 0x1A, writer, writer_len)
        if first_index + i:
            out[q] = 0x20
            q = _varint(out, q + 1, first_index + i)
        out[q] = 0x28
        q = _varint(out, q + 1, recv_us[i])
        k = pubs[i]
        q = _bytes_field(out, q, 0x32, names[k], name_lens[k])
        out[q] = 0x38
        q = _varint(out, q + 1, seqs[i])
        out[q] = 0x40
        q = _varint(out, q + 1, incs[i])
        out[q] = 0x48
        q = _varint(out, q + 1, pub_ms[i])
        mlen = q - m
        out[s + 4] = (mlen >> 24) & 0xFF
        out[s + 5] = (mlen >> 16) & 0xFF
        out[s + 6] = (mlen >> 8) & 0xFF
        out[s + 7] = mlen & 0xFF
        out[q] = 0
        out[q + 1] = 0
        out[q + 2] = 0
        out[q + 3] = 0
        q += 4
        c = crc32(out, s + 4, q, t)
        out[q] = (c >> 24) & 0xFF
        out[q + 1] = (c >> 16) & 0xFF
        out[q + 2] = (c >> 8) & 0xFF
        out[q + 3] = c & 0xFF
        p = q + 4
    return p


class SegmentSink:
    """Writes frames of one daemon into size-rolled segments named like rgd.usage_log does."""

    def __init__(self, directory: Path, daemon: str, segment_bytes: int) -> None:
        self.directory, self.daemon, self.segment_bytes = directory, daemon, segment_bytes
        self.index = 0
        self.segments = 0
        self._open()

    def _open(self) -> None:
        self.first = self.index
        self.tmp = self.directory / f".{self.daemon}-{self.first}.tmp"
        self.fh = open(self.tmp, "wb", buffering=8 << 20)  # noqa: SIM115 -- kept open across write()s, closed in close()
        self.size = 0

    def write(self, data: bytes | memoryview, frames: int) -> None:
        self.fh.write(data)
        self.size += len(data)
        self.index += frames

    def maybe_roll(self) -> None:
        if self.size >= self.segment_bytes:
            self.close()
            self._open()

    def close(self) -> None:
        self.fh.close()
        if self.index == self.first:
            self.tmp.unlink()
            return
        os.replace(self.tmp, self.directory / closed_name(self.daemon, self.first, self.index - 1))
        self.segments += 1


def _group_field(cache: dict, key: tuple) -> bytes:
    """The bytes of one `groups` field (tag 6, length, GroupUsage), cached by value."""
    b = cache.get(key)
    if b is None:
        name, adm, thr, lim, quota = key
        g = GroupUsage(group=name, topics=4)
        g.namespaces.append(f"{name}/ns")
        p = g.publish
        p.admitted_messages, p.admitted_bytes = adm, adm * MSG_BYTES
        p.throttled_messages, p.throttled_bytes = thr, thr * MSG_BYTES
        p.limit_messages, p.limit_bytes = lim, lim * MSG_BYTES
        p.quota_messages, p.quota_bytes = quota, quota * MSG_BYTES
        g.dispatch.limit_messages = g.dispatch.limit_bytes = -1.0
        g.dispatch.quota_messages = g.dispatch.quota_bytes = -1.0
        body = g.SerializeToString()
        out = bytearray(b"\x32")
        n = len(body)
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        b = bytes(out) + body
        cache[key] = b
    return b


def workload(daemons: int, groups: int, ticks: int, phase_ticks: int, seed: int):
    """Per phase: demand [D, G] (msgs/tick) and fair share; quotas [G]."""
    rng = np.random.default_rng(seed)
    quota = 1000.0 * (1 + np.arange(groups) % 4)
    levels = np.array([0.0, 0.005, 0.01, 0.02, 0.04])
    phases = []
    for _ in range((ticks + phase_ticks - 1) // phase_ticks):
        dem = np.rint(quota[None, :] * rng.choice(levels, size=(daemons, groups))).astype(np.int64)
        fair = np.stack([max_min_fair(dem[:, g].astype(float), quota[g]) for g in range(groups)], axis=1)
        phases.append((dem, fair))
    return quota, phases


def generate(out_dir: str | Path, daemons: int = 100, groups: int = 100, ticks: int = 3600,
             tick_ms: int = 1000, segment_bytes: int = 32 << 20, loss: float = 0.001,
             phase_ticks: int = 600, seed: int = 1, progress: bool = True) -> dict:
    """Write the logs; returns counts and the exact totals the report must reproduce."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    quota, phases = workload(daemons, groups, ticks, phase_ticks, seed)
    rng = np.random.default_rng(seed + 1)
    names = [f"node-{d:03d}" for d in range(daemons)]
    gnames = [f"tenant-{g:03d}" for g in range(groups)]
    width = max(len(n) for n in names)
    name_arr = np.zeros((daemons, width), np.uint8)
    name_lens = np.array([len(n) for n in names], np.int64)
    for d, n in enumerate(names):
        name_arr[d, :len(n)] = np.frombuffer(n.encode(), np.uint8)
    inc = T0_MS - 3_600_000
    offsets = (np.arange(daemons) * 7919) % tick_ms  # daemons tick out of phase
    cache: dict = {}
    buf = np.empty(daemons * (128 + width * 2), np.uint8)
    admitted_total = np.zeros(groups, np.int64)
    throttled_total = np.zeros(groups, np.int64)
    receipts = lost = nbytes = segments = 0
    lost_in_gaps = 0
    for d in range(daemons):
        sink = SegmentSink(out, names[d], segment_bytes)
        writer = np.frombuffer(names[d].encode(), np.uint8)
        prev_adm = np.zeros(groups, np.int64)
        sent = np.full((groups, 2), -1, np.int64)  # per group: the (admitted, throttled) last published
        sent_at = np.zeros(groups, np.int64)
        cumulative = np.zeros(4, np.int64)
        first_heard = np.zeros(daemons, np.int64)  # per publisher: first and last sequence d heard, and how many
        last_heard = np.zeros(daemons, np.int64)
        heard = np.zeros(daemons, np.int64)
        for t in range(ticks):
            ph, k = divmod(t, phase_ticks)
            dem, fair = phases[ph]
            if k == 0:
                start = prev_adm.astype(float)
            target = fair[d]
            adm = np.minimum(dem[d], np.rint(target + (start - target) * 0.5 ** (k + 1))).astype(np.int64)
            thr = dem[d] - adm
            lim = np.maximum(adm, np.rint(target)).astype(float)
            prev_adm = adm
            admitted_total += adm
            throttled_total += thr
            pub_ms = T0_MS + t * tick_ms + int(offsets[d])
            head = UsageReport(daemon_id=names[d], sequence=t + 1, publish_time_ms=pub_ms, tick_ms=tick_ms,
                               incarnation=inc).SerializeToString()
            fields = [_group_field(cache, (gnames[g], int(adm[g]), int(thr[g]), float(lim[g]), float(quota[g])))
                      for g in range(groups)]
            cumulative += (int(adm.sum()), int(adm.sum()) * MSG_BYTES, int(thr.sum()), int(thr.sum()) * MSG_BYTES)
            meta = LogEntryMetadata(kind=LogEntryMetadata.ACCOUNTING, write_time_us=(pub_ms + 1) * 1000,
                                    daemon_id=names[d], log_index=sink.index,
                                    cumulative_admitted_messages=int(cumulative[0]),
                                    cumulative_admitted_bytes=int(cumulative[1]),
                                    cumulative_throttled_messages=int(cumulative[2]),
                                    cumulative_throttled_bytes=int(cumulative[3]))
            sink.write(encode_frame(meta, head + b"".join(fields)), 1)
            moved = ((sent[:, 0] != adm) | (sent[:, 1] != thr) | (t - sent_at >= REFRESH_TICKS))
            sent[moved, 0], sent[moved, 1], sent_at[moved] = adm[moved], thr[moved], t
            report = head + b"".join(fields[g] for g in np.flatnonzero(moved).tolist())
            now_us = (pub_ms + 2) * 1000
            meta = LogEntryMetadata(kind=LogEntryMetadata.PUBLISHED, write_time_us=now_us, daemon_id=names[d],
                                    log_index=sink.index, accounted=True)
            sink.write(encode_frame(meta, report), 1)
            keep = rng.random(daemons) >= loss
            pubs = np.flatnonzero(keep).astype(np.int64)
            lost += daemons - pubs.size
            first_heard[pubs] = np.where(first_heard[pubs] == 0, t + 1, first_heard[pubs])
            last_heard[pubs] = t + 1
            heard[pubs] += 1
            p_ms = T0_MS + t * tick_ms + offsets[pubs]
            recv = (p_ms * 1000 + 1500 + (pubs * 37 + d * 11) % 3000).astype(np.int64)
            n = encode_receipts(buf, writer, writer.size, name_arr, name_lens, pubs,
                                np.full(pubs.size, t + 1, np.int64), np.full(pubs.size, inc, np.int64),
                                p_ms.astype(np.int64), recv, recv + 50, sink.index, CRC_TABLES)
            sink.write(memoryview(buf)[:n], int(pubs.size))
            receipts += int(pubs.size)
            sink.maybe_roll()
        sink.close()
        segments += sink.segments
        h = heard > 0
        lost_in_gaps += int((last_heard[h] - first_heard[h] + 1 - heard[h]).sum())
        if progress:
            done = d + 1
            el = time.time() - t_start
            print(f"\r[make_logs] daemon {done}/{daemons}  {el:6.1f} s  eta {el / done * (daemons - done):6.0f} s",
                  end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    nbytes = sum(p.stat().st_size for p in out.glob("*.seg"))
    return {
        "daemons": daemons, "groups": groups, "ticks": ticks, "tick_ms": tick_ms,
        "group_rows": daemons * groups * ticks, "receipts": receipts, "receipts_lost": lost,
        "receipts_lost_between_heard": lost_in_gaps,
        "segments": segments, "bytes": nbytes, "seconds": round(time.time() - t_start, 1),
        "expected": {"admitted_messages": {gnames[g]: int(admitted_total[g]) for g in range(groups)},
                     "throttled_messages": {gnames[g]: int(throttled_total[g]) for g in range(groups)}},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--daemons", type=int, default=100)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--ticks", type=int, default=3600)
    ap.add_argument("--segment-mib", type=int, default=32)
    ap.add_argument("--loss", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    info = generate(a.out_dir, a.daemons, a.groups, a.ticks, segment_bytes=a.segment_mib << 20,
                    loss=a.loss, seed=a.seed)
    info.pop("expected")
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
