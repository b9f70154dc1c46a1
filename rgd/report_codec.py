"""Building, signing, decoding and vetting usage reports from the topic.

Everything that arrives on the topic is hostile until proven otherwise: a
report is applied to the usage map only after it parses, fits in size, carries
sane values and timestamps, has a valid HMAC tag when keys are configured, and
does not claim our own daemon id. Each rejection has a reason (metric label).
"""

from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from google.protobuf.message import DecodeError

from rgd.groups import KINDS
from rgd.wire.usage_report_pb2 import UsageReport

MAX_REPORT_BYTES = 8 * 1024 * 1024
MAX_COUNT = 1 << 53  # per tick; beyond exact float range is nonsense
MAX_SKEW_MS = 5 * 60 * 1000  # publish time vs our clock
MAX_TICK_MS = 3_600_000
HMAC_PROPERTY = "rgd-hmac"
KEY_ID_PROPERTY = "rgd-key-id"

REJECT_MALFORMED = "malformed"
REJECT_OVERSIZED = "oversized"
REJECT_INVALID = "invalid_value"
REJECT_CLOCK = "clock_skew"
REJECT_SIGNATURE = "bad_signature"
REJECT_SPOOFED = "spoofed_self"


class Rejected(ValueError):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class HmacKeys:
    """Shared report-signing keys: the first signs, all verify (rotation: add the new
    key second everywhere, then move it first, then drop the old one)."""

    keys: tuple[tuple[str, bytes], ...]

    @classmethod
    def load(cls, path: str) -> "HmacKeys":
        entries: list[tuple[str, bytes]] = []
        for n, line in enumerate(Path(path).read_text().splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key_id, sep, secret = line.partition(":")
            if not sep or not key_id or len(secret) < 16:
                raise ValueError(f"{path}:{n}: expected 'key_id:secret' with a secret of 16+ characters")
            entries.append((key_id, secret.encode()))
        if not entries:
            raise ValueError(f"{path}: no keys")
        return cls(tuple(entries))

    def sign(self, payload: bytes) -> dict[str, str]:
        key_id, secret = self.keys[0]
        return {KEY_ID_PROPERTY: key_id, HMAC_PROPERTY: hmac.new(secret, payload, hashlib.sha256).hexdigest()}

    def verify(self, payload: bytes, properties: Mapping[str, str]) -> bool:
        tag = properties.get(HMAC_PROPERTY, "")
        key_id = properties.get(KEY_ID_PROPERTY, "")
        for kid, secret in self.keys:
            if kid == key_id:
                want = hmac.new(secret, payload, hashlib.sha256).hexdigest()
                return hmac.compare_digest(want, tag)
        return False


def _check_kind(k, where: str) -> None:
    for name in ("admitted_messages", "admitted_bytes", "throttled_messages", "throttled_bytes"):
        if getattr(k, name) > MAX_COUNT:
            raise Rejected(REJECT_INVALID, f"{where}.{name} = {getattr(k, name)} is absurd")
    for name in ("limit_messages", "limit_bytes", "quota_messages", "quota_bytes"):
        v = getattr(k, name)
        if not math.isfinite(v) or (v < 0 and v != -1.0) or v > 1e18:
            raise Rejected(REJECT_INVALID, f"{where}.{name} = {v!r} (must be -1 or 0..1e18)")


def decode_report(
    data: bytes,
    now_ms: int,
    self_id: str,
    self_incarnation: int,
    properties: Mapping[str, str] | None = None,
    keys: HmacKeys | None = None,
) -> UsageReport:
    """Parse and vet one message from the topic; raise Rejected with a reason."""
    if len(data) > MAX_REPORT_BYTES:
        raise Rejected(REJECT_OVERSIZED, f"{len(data)} bytes > {MAX_REPORT_BYTES}")
    if keys is not None and not keys.verify(data, properties or {}):
        raise Rejected(REJECT_SIGNATURE, "missing or invalid HMAC tag")
    report = UsageReport()
    try:
        report.ParseFromString(data)
    except DecodeError as exc:
        raise Rejected(REJECT_MALFORMED, f"not a UsageReport: {exc}") from None
    if not report.daemon_id or len(report.daemon_id) > 253:
        raise Rejected(REJECT_MALFORMED, "daemon_id missing or longer than 253 characters")
    if report.sequence == 0 or report.incarnation == 0:
        raise Rejected(REJECT_MALFORMED, "sequence and incarnation must be set (>= 1)")
    if not 0 < report.tick_ms <= MAX_TICK_MS:
        raise Rejected(REJECT_INVALID, f"tick_ms = {report.tick_ms} (1..{MAX_TICK_MS})")
    if abs(report.publish_time_ms - now_ms) > MAX_SKEW_MS:
        raise Rejected(REJECT_CLOCK, f"publish_time_ms {report.publish_time_ms} is {report.publish_time_ms - now_ms} ms from our clock")
    if report.daemon_id == self_id and report.incarnation != self_incarnation:
        raise Rejected(REJECT_SPOOFED, f"claims our id {self_id!r} with incarnation {report.incarnation}")
    seen: set[str] = set()
    for i, g in enumerate(report.groups):
        if not g.group or g.group in seen:
            raise Rejected(REJECT_MALFORMED, f"groups[{i}].group empty or repeated")
        seen.add(g.group)
        for kind in KINDS:
            _check_kind(getattr(g, kind), f"groups[{i}].{kind}")
    return report
