"""Building, signing, decoding and vetting usage reports from the topic.

Everything that arrives on the topic is hostile until proven otherwise: a
report is applied to the usage map only after it fits in size, names a bounded
number of groups (counted before any entry is parsed: parsing 100k entries
alone holds the event loop for ~0.2 s), has a valid HMAC tag when keys are
configured, parses, carries sane values and timestamps, does not claim our own
daemon id, and claims rates a daemon could have admitted under the group's
quota (`check_plausible`). Each rejection has a reason (metric label).

A peer's report names every group the peer serves (5 000 at PIP-82's scale), of which a
daemon folds a few percent. So senders index their entries (`group_keys`: a 64-bit hash
of each entry's name, in entry order; `index_report`), and a receiver given a
`FoldScope` reads the report through a decode-only view that leaves every entry as raw
bytes, picks the entries whose key it folds, and parses only those (`decode_report`
drops the rest; `decode_scoped` returns them unparsed, for the usage map to hold).

The HMAC covers the whole report, so a signed report is bound to its sender
(daemon_id), its incarnation, its sequence and its publish time; what stops a
replay of a genuine report is the receiver's memory of each sender's last
(incarnation, sequence), kept past departure for the whole acceptance window
(rgd/cluster/map_keeper.py), and the clock check that ends that window.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from rgd.config.groups import KINDS, ResourceGroup
from rgd.wire.usage_report_pb2 import KindUsage, UsageReport, UsageReportEntries

# Pulsar's default maxMessageSize (5 MB): a larger message cannot have come through a
# default broker, and our own reports stay under 4 MiB (rgd.cluster.report_builder.bound_report).
MAX_REPORT_BYTES = 5 * 1024 * 1024
MAX_MEMBERS = 1024  # a report acknowledges at most this many members (rgd.cluster.usage_map keeps at most so many)
MAX_COUNT = 1 << 53  # per tick; beyond exact float range is nonsense
MAX_SKEW_MS = 5 * 60 * 1000  # publish time vs our clock
# A genuine report can be replayed while its publish time is within MAX_SKEW_MS of our
# clock, and its sender's clock may itself be MAX_SKEW_MS ahead: this long after a sender
# departs, none of its reports can pass the clock check any more.
REPLAY_WINDOW_MS = 2 * MAX_SKEW_MS
# Groups per report: a peer reports only groups it has buckets for, all in the shared
# config; twice our configured groups leaves room for a config change that reaches it
# first, and the floor for small configs.
MIN_GROUPS_CAP = 1024
# Plausible rates (check_plausible): a daemon admits at most its local limit (<= the
# group's quota) over the tick plus what its bucket and debt allow (burst + max_debt
# seconds of the limit); admitted counts beyond PLAUSIBLE_MARGIN times that are rejected.
# Demand (throttled) has no such ceiling (a flood is demand), but beyond
# PLAUSIBLE_DEMAND_FACTOR times the quota it means nothing more to a max-min split and
# only drowns the others' figures in float sums.
PLAUSIBLE_MARGIN = 2.0
# Per report, on top: small quotas and short windows count whole messages (and one message
# may be large).
PLAUSIBLE_FLOOR = {"messages": 100, "bytes": 1 << 20}
PLAUSIBLE_DEMAND_FACTOR = 1e6
MAX_TICK_MS = 3_600_000
HMAC_PROPERTY = "rgd-hmac"
KEY_ID_PROPERTY = "rgd-key-id"

REJECT_MALFORMED = "malformed"
REJECT_OVERSIZED = "oversized"
REJECT_INVALID = "invalid_value"
REJECT_CLOCK = "clock_skew"
REJECT_SIGNATURE = "bad_signature"
REJECT_SPOOFED = "spoofed_self"
REJECT_TOO_MANY_GROUPS = "too_many_groups"
REJECT_IMPLAUSIBLE = "implausible"


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
    def load(cls, path: str) -> HmacKeys:
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


def _check_kind(k: KindUsage, where: str) -> None:
    # The common case (every value sane) in one expression: this runs for every folded entry
    # (tens of thousands a second at PIP-82's scale), the loops below only to name what is wrong.
    # NaN fails every comparison, so it takes the slow path too.
    lm, lb, qm, qb = k.limit_messages, k.limit_bytes, k.quota_messages, k.quota_bytes
    if (max(k.admitted_messages, k.admitted_bytes, k.throttled_messages, k.throttled_bytes,
            k.shadow_throttled_messages, k.shadow_throttled_bytes) <= MAX_COUNT
            and (0.0 <= lm <= 1e18 or lm == -1.0) and (0.0 <= lb <= 1e18 or lb == -1.0)
            and (0.0 <= qm <= 1e18 or qm == -1.0) and (0.0 <= qb <= 1e18 or qb == -1.0)):
        return
    for name in ("admitted_messages", "admitted_bytes", "throttled_messages", "throttled_bytes",
                 "shadow_throttled_messages", "shadow_throttled_bytes"):
        if getattr(k, name) > MAX_COUNT:
            raise Rejected(REJECT_INVALID, f"{where}.{name} = {getattr(k, name)} is absurd")
    for name in ("limit_messages", "limit_bytes", "quota_messages", "quota_bytes"):
        v = getattr(k, name)
        if not math.isfinite(v) or (v < 0 and v != -1.0) or v > 1e18:
            raise Rejected(REJECT_INVALID, f"{where}.{name} = {v!r} (must be -1 or 0..1e18)")


_GROUPS_TAG = (6 << 3) | 2  # UsageReport.groups: field 6, length-delimited
_GROUPS_TAG_BYTE = bytes([_GROUPS_TAG])


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]  # IndexError past the end: a truncated message
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def count_groups(data: bytes, stop_above: int) -> int:
    """How many group entries a serialized UsageReport holds, counted from the wire
    without parsing them, stopping once the count exceeds `stop_above` (so the cost is
    bounded by the cap, not by the message). A message that is not well-formed is left
    to the parser to reject: the count so far is returned."""
    pos, end, count = 0, len(data), 0
    try:
        while pos < end:
            tag, pos = _varint(data, pos)
            wire = tag & 7
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == 2:
                length, pos = _varint(data, pos)
                pos += length
                if tag == _GROUPS_TAG:
                    count += 1
                    if count > stop_above:
                        return count
            else:
                return count
    except (IndexError, ValueError):
        pass
    return count


# The raw view is parsed without a walk first while the message holds the entry tag byte at
# most this many times the cap (see raw_view_affordable).
RAW_VIEW_TAG_FACTOR = 16


def raw_view_affordable(tag_bytes: int, max_groups: int) -> bool:
    """Whether the raw-entries view may parse a message holding `tag_bytes` bytes equal to
    _GROUPS_TAG without counting its entries first. A top-level entry is at least that byte
    and a length, so the view holds at most `tag_bytes` entries, and upb parses a raw entry
    in ~45 ns (measured: 2.6 M empty entries, 5 MB, in 0.11 s; 80 000 in 3.6 ms). Up to
    RAW_VIEW_TAG_FACTOR x the cap (160 000 entries at 5 000 groups) the parse of a hostile
    flood costs at most ~7 ms, no more than count_groups' Python walk up to the same cap
    (~12 ms for 10 000 empty entries), and the entry count comes from the view. Genuine
    reports hold the byte about four times per entry (inside names and figures: '2' is
    0x32), so at 5 000 groups their count is above the cap (19 589 for a 951 KB first
    report) and the walk (~5 ms each, ~0.5 s when 99 peers send their full reports at once)
    was most of receiving them."""
    return tag_bytes <= RAW_VIEW_TAG_FACTOR * max_groups


@lru_cache(maxsize=1 << 17)
def group_key_bytes(name: str) -> bytes:
    """A group name's index key as it goes on the wire: BLAKE2b with an 8-byte digest of
    the UTF-8 name (little-endian when read as a uint64): a standard, unkeyed hash, so any
    sender computes the same key; cached, since the same names come every tick."""
    return hashlib.blake2b(name.encode(), digest_size=8).digest()


def group_key(name: str) -> int:
    """A group name's index key as a number (see group_key_bytes)."""
    return int.from_bytes(group_key_bytes(name), "little")


def index_report(report: UsageReport) -> UsageReport:
    """Fill `group_keys`, the index of the report's entries (in place, after its entries
    are final). 8 bytes an entry: 40 KB more for a 5 000-group first report, for which a
    receiver parses a few percent of the entries instead of all of them."""
    report.group_keys = b"".join(group_key_bytes(g.group) for g in report.groups)
    return report


def serialize_report(report: UsageReport) -> bytes:
    """A report as it goes on the topic: indexed, then serialized."""
    return index_report(report).SerializeToString()


def keys_among(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Which of `keys` are in `sorted_keys` (ascending), as a mask: `np.isin`, by a binary
    search of each key (isin sorts both sides again at every call; a receiver asks this of
    every report it folds, thousands of keys against thousands)."""
    if not len(sorted_keys):
        return np.zeros(len(keys), dtype=bool)
    pos = np.searchsorted(sorted_keys, keys)
    np.minimum(pos, len(sorted_keys) - 1, out=pos)
    among: np.ndarray = sorted_keys[pos] == keys
    return among


class FoldScope:
    """Which of a report's entries a daemon folds: those whose group is in `names`, always,
    and up to `room` groups outside it, the first in key order (group_key: a choice that is
    the same in every report, so the same few groups are kept tick after tick, whoever
    sends them).

    `room` is one budget for every report this scope picks from, not one per report: the
    groups it grants are remembered (`granted`, by key) and picked again from later reports
    before any other, and a report gets new ones only while the budget lasts. A daemon
    vets reports as they arrive and folds them later; with a budget per report, the first
    round of 99 peers' full reports at PIP-82's scale, vetted before any was folded, each
    brought its own 500 groups, and the map held 4 000 groups nobody asked this daemon
    about (42 000 entries instead of ~26 000, ~15 % more CPU and ~15 MB more RSS for the
    rest of the run). `carried`: keys a previous scope granted that are not in `names`
    yet (picked, not folded yet): they stay granted and count against `room`."""

    __slots__ = ("granted", "keys", "names", "room")

    def __init__(self, names: Iterable[str], room: int = 0, carried: Iterable[int] = ()) -> None:
        self.names = frozenset(names)
        self.room = max(0, room)
        self.keys = np.sort(np.fromiter((group_key(n) for n in self.names), dtype=np.uint64,
                                        count=len(self.names)))
        self.granted: set[int] = set()
        if self.room:
            held = np.fromiter(carried, dtype=np.uint64)
            self.granted = set(held[~np.isin(held, self.keys)].tolist())

    def _grant(self, candidates: list[int]) -> set[int]:
        """Of the keys outside `names` (ascending), those this report may fold: every one
        granted before, then new ones, smallest first, while the budget lasts."""
        chosen = {k for k in candidates if k in self.granted}
        budget = self.room - len(self.granted)
        for k in candidates:
            if budget <= 0:
                break
            if k not in self.granted:
                self.granted.add(k)
                chosen.add(k)
                budget -= 1
        return chosen

    def keep(self, names: set[str]) -> set[str]:
        """The same choice by name (reports without a usable index)."""
        chosen = names & self.names
        if self.room:
            by_key: dict[int, list[str]] = {}
            for n in names - chosen:
                by_key.setdefault(group_key(n), []).append(n)
            for k in self._grant(sorted(by_key)):
                chosen.update(by_key[k])
        return chosen

    def select(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """By an index (uint64 keys in entry order): the positions whose key is one of
        `names`' (ascending), and the positions of the others this scope grants (ascending)."""
        wanted = keys_among(keys, self.keys)
        extra = np.empty(0, dtype=np.intp)
        if self.room:
            rest = np.flatnonzero(~wanted)
            if len(rest):
                rest_keys = keys[rest]
                budget = max(0, self.room - len(self.granted))
                # The candidates: the keys granted before, and the budget's smallest others.
                candidates = np.unique(rest_keys)[:budget] if budget else np.empty(0, dtype=np.uint64)
                if self.granted:
                    granted = np.fromiter(self.granted, dtype=np.uint64, count=len(self.granted))
                    candidates = np.union1d(candidates, rest_keys[np.isin(rest_keys, granted)])
                chosen = self._grant(candidates.tolist())
                if chosen:
                    picked = np.fromiter(chosen, dtype=np.uint64, count=len(chosen))
                    extra = rest[np.isin(rest_keys, picked)]
        return np.flatnonzero(wanted), extra


def _frame(entry: bytes) -> bytes:
    """One raw entry as field 6 of a UsageReport (tag, length, bytes)."""
    n = len(entry)
    head = bytearray([_GROUPS_TAG])
    while n >= 0x80:
        head.append((n & 0x7F) | 0x80)
        n >>= 7
    head.append(n)
    return bytes(head) + entry


def _check_header(report: UsageReport | UsageReportEntries, now_ms: int, self_id: str, self_incarnation: int) -> None:
    if not report.daemon_id or len(report.daemon_id) > 253:
        raise Rejected(REJECT_MALFORMED, "daemon_id missing or longer than 253 characters")
    if report.sequence == 0 or report.incarnation == 0:
        raise Rejected(REJECT_MALFORMED, "sequence and incarnation must be set (>= 1)")
    if not 0 < report.tick_ms <= MAX_TICK_MS:
        raise Rejected(REJECT_INVALID, f"tick_ms = {report.tick_ms} (1..{MAX_TICK_MS})")
    if abs(report.publish_time_ms - now_ms) > MAX_SKEW_MS:
        raise Rejected(REJECT_CLOCK, f"publish_time_ms {report.publish_time_ms} is "
                                     f"{report.publish_time_ms - now_ms} ms from our clock")
    if report.daemon_id == self_id and report.incarnation != self_incarnation:
        raise Rejected(REJECT_SPOOFED, f"claims our id {self_id!r} with incarnation {report.incarnation}")
    if len(report.ack_members) > MAX_MEMBERS:
        raise Rejected(REJECT_MALFORMED, f"acknowledges {len(report.ack_members)} members (at most {MAX_MEMBERS})")
    if len(report.ack_members) != len(report.ack_sequences):
        raise Rejected(REJECT_MALFORMED, f"ack_members ({len(report.ack_members)}) and ack_sequences "
                                         f"({len(report.ack_sequences)}) differ in length")
    if report.base > report.sequence:
        raise Rejected(REJECT_MALFORMED, f"base {report.base} is after the sequence {report.sequence}")


@dataclass(frozen=True, slots=True)
class Unfolded:
    """A report's entries its scope left as raw bytes: `entries[positions[i]]` is the entry
    whose index key is `keys[i]` (entry order). Nothing in them is parsed or vetted; whoever
    parses one later checks its name against its key and vets its values then
    (rgd.cluster.usage_map holds them until a group they name is folded)."""

    keys: np.ndarray  # uint64
    positions: np.ndarray  # intp, ascending
    entries: Sequence[bytes]

    def __len__(self) -> int:
        return len(self.keys)


def _pick_indexed(view: UsageReportEntries, scope: FoldScope) -> tuple[UsageReport, Unfolded] | None:
    """The entries `scope` folds, parsed and vetted, through the report's index, and the rest
    unparsed; None when the index cannot be used (missing, of the wrong length, or naming an
    entry by another name's key) or names nothing to skip: the caller then parses every entry,
    as for a report without an index."""
    raw = view.groups
    index = view.group_keys
    if not raw or len(index) != 8 * len(raw):
        return None
    keys = np.frombuffer(index, dtype="<u8")
    wanted, extra = scope.select(keys)
    if len(wanted) + len(extra) == len(raw):
        return None  # every entry: nothing to skip
    picked = np.union1d(wanted, extra).tolist() if len(extra) else wanted.tolist()
    try:
        report = UsageReport.FromString(b"".join(_frame(raw[i]) for i in picked))
    except DecodeError as exc:
        raise Rejected(REJECT_MALFORMED, f"not a UsageReport: {exc}") from None
    groups = report.groups
    extras = set(extra.tolist())
    seen: set[str] = set()
    drop: list[int] = []
    for j, (i, g) in enumerate(zip(picked, groups)):
        name = g.group
        if index[8 * i:8 * i + 8] != group_key_bytes(name):
            return None  # the index does not describe the entries: trust none of it
        if not name or name in seen:
            raise Rejected(REJECT_MALFORMED, f"groups[{i}].group empty or repeated")
        seen.add(name)
        if i not in extras and name not in scope.names:
            drop.append(j)  # another name with the same 64-bit key: not ours, left unfolded
            continue
        for kind in KINDS:
            _check_kind(getattr(g, kind), f"groups[{i}].{kind}")
    rest = np.ones(len(raw), dtype=bool)
    rest[picked] = False
    rest[[picked[j] for j in drop]] = True
    for j in reversed(drop):
        del groups[j]
    positions = np.flatnonzero(rest)
    return _with_header(report, view), Unfolded(keys[positions], positions, raw)


def parse_entry(entry: bytes, tick_ms: int) -> UsageReport:
    """One raw entry (`Unfolded`), parsed and vetted value by value, as a report of that
    entry alone over `tick_ms` (what check_plausible reads); raise Rejected."""
    try:
        report = UsageReport.FromString(_frame(entry))
    except DecodeError as exc:
        raise Rejected(REJECT_MALFORMED, f"not a group entry: {exc}") from None
    report.tick_ms = tick_ms
    g = report.groups[0]
    if not g.group:
        raise Rejected(REJECT_MALFORMED, "groups[0].group empty")
    for kind in KINDS:
        _check_kind(getattr(g, kind), f"groups[{g.group}].{kind}")
    return report


def _with_header(report: UsageReport, view: UsageReportEntries) -> UsageReport:
    report.daemon_id = view.daemon_id
    report.sequence = view.sequence
    report.publish_time_ms = view.publish_time_ms
    report.tick_ms = view.tick_ms
    report.leaving = view.leaving
    report.incarnation = view.incarnation
    report.restatement = view.restatement
    report.members = view.members
    report.complete = view.complete
    report.heard.extend(view.heard)
    report.base = view.base
    report.ack_members.extend(view.ack_members)
    report.ack_sequences.extend(view.ack_sequences)
    report.lease_ms = view.lease_ms
    report.ack_wanted = view.ack_wanted
    return report


def groups_cap(configured_groups: int) -> int:
    """At most this many group entries per report (see MIN_GROUPS_CAP)."""
    return max(MIN_GROUPS_CAP, 2 * configured_groups)


def decode_report(
    data: bytes,
    now_ms: int,
    self_id: str,
    self_incarnation: int,
    properties: Mapping[str, str] | None = None,
    keys: HmacKeys | None = None,
    max_groups: int | None = None,
    keep: Callable[[set[str]], set[str]] | None = None,
    scope: FoldScope | None = None,
) -> UsageReport:
    """Parse and vet one message from the topic; raise Rejected with a reason.

    `keep` (the report's group names -> those whose entries this daemon folds): only those
    entries come back, vetted value by value; the header, the signature and every group name
    (none empty or repeated) are still checked for the whole report.

    `scope` (instead of `keep`): the same choice made through the report's index
    (`group_keys`) when it has a usable one: the report is read through a view that leaves each
    entry as raw bytes, the entries whose key `scope` folds are parsed, and each must hash to
    its key, else every entry is parsed and vetted as with `keep`. The entries skipped are
    dropped here (`decode_scoped` returns them). A sender lying in its index only withholds
    an entry, which it could do by not sending it; the HMAC binds the index like the rest. Our
    own report comes back with its header alone. The raw view is parsed only when its cost is
    bounded (see `_raw_view`), so a flood of tiny entries never costs a parse of all of them."""
    if scope is not None:
        keep = scope.keep
    return _decode(data, now_ms, self_id, self_incarnation, properties, keys, max_groups, keep, scope)[0]


def decode_scoped(data: bytes, now_ms: int, self_id: str, self_incarnation: int, scope: FoldScope,
                  properties: Mapping[str, str] | None = None, keys: HmacKeys | None = None,
                  max_groups: int | None = None) -> tuple[UsageReport, Unfolded | None]:
    """As `decode_report` with `scope`, but nothing is dropped: the entries the scope skips
    come back unparsed (`Unfolded`), and a report whose index cannot be used comes back whole,
    every entry parsed and vetted. A receiver that holds each peer's whole state (the usage
    map) parses what it folds now and keeps the rest for when it needs it."""
    return _decode(data, now_ms, self_id, self_incarnation, properties, keys, max_groups, None, scope)


def _decode(data: bytes, now_ms: int, self_id: str, self_incarnation: int, properties: Mapping[str, str] | None,
            keys: HmacKeys | None, max_groups: int | None, keep: Callable[[set[str]], set[str]] | None,
            scope: FoldScope | None) -> tuple[UsageReport, Unfolded | None]:
    """decode_report's and decode_scoped's one body: `keep` applies where the index does not."""
    if len(data) > MAX_REPORT_BYTES:
        raise Rejected(REJECT_OVERSIZED, f"{len(data)} bytes > {MAX_REPORT_BYTES}")
    view = _raw_view(data, max_groups) if scope is not None else None
    if view is None and (max_groups is not None and data.count(_GROUPS_TAG_BYTE) > max_groups
                         and count_groups(data, max_groups) > max_groups):
        raise Rejected(REJECT_TOO_MANY_GROUPS, f"more than {max_groups} group entries")
    if keys is not None and not keys.verify(data, properties or {}):
        raise Rejected(REJECT_SIGNATURE, "missing or invalid HMAC tag")
    if view is not None:
        assert scope is not None
        _check_header(view, now_ms, self_id, self_incarnation)
        if view.daemon_id == self_id:
            # Our own report back from the topic (the header check passed: our incarnation).
            # Only its header is read (the echo); its entries are ours and nothing folds them.
            return _with_header(UsageReport(), view), None
        picked = _pick_indexed(view, scope)
        if picked is not None:
            return picked
    report = UsageReport()
    try:
        report.ParseFromString(data)
    except DecodeError as exc:
        raise Rejected(REJECT_MALFORMED, f"not a UsageReport: {exc}") from None
    _check_header(report, now_ms, self_id, self_incarnation)
    return _vetted_entries(report, keep), None


def _raw_view(data: bytes, max_groups: int | None) -> UsageReportEntries:
    """The report with its entries left as raw bytes, its entry count checked against the cap.
    Every top-level entry starts with the byte _GROUPS_TAG, so a message holding that byte at
    most `max_groups` times (counted in C, ~1 ms for 5 MB) cannot be over the cap. Beyond that
    the view's parse is still cheap as long as the byte is rare enough (raw_view_affordable);
    only a message dense in it is walked up to the cap first."""
    tags = data.count(_GROUPS_TAG_BYTE) if max_groups is not None else 0
    if (max_groups is not None and tags > max_groups and not raw_view_affordable(tags, max_groups)
            and count_groups(data, max_groups) > max_groups):
        raise Rejected(REJECT_TOO_MANY_GROUPS, f"more than {max_groups} group entries")
    view = UsageReportEntries()
    try:
        view.ParseFromString(data)
    except DecodeError as exc:
        raise Rejected(REJECT_MALFORMED, f"not a UsageReport: {exc}") from None
    if max_groups is not None and len(view.groups) > max_groups:
        raise Rejected(REJECT_TOO_MANY_GROUPS, f"more than {max_groups} group entries")
    return view


def _check_names(names: list[str]) -> None:
    """No group name empty or repeated."""
    if len(set(names)) == len(names) and "" not in names:
        return
    seen: set[str] = set()
    for i, name in enumerate(names):
        if not name or name in seen:
            raise Rejected(REJECT_MALFORMED, f"groups[{i}].group empty or repeated")
        seen.add(name)


def _vetted_entries(report: UsageReport, keep: Callable[[set[str]], set[str]] | None) -> UsageReport:
    """The report with the entries `keep` chooses (all without it), each vetted value by value;
    every name is checked whatever is kept."""
    groups = report.groups
    names = [g.group for g in groups]
    _check_names(names)
    if keep is None:
        kept = list(enumerate(groups))
    else:
        wanted = keep(set(names))
        kept = [(i, groups[i]) for i, name in enumerate(names) if name in wanted]
    for i, g in kept:
        for kind in KINDS:
            _check_kind(getattr(g, kind), f"groups[{i}].{kind}")
    if len(kept) == len(names):
        return report
    folded = UsageReport()
    folded.CopyFrom(report)
    del folded.groups[:]
    folded.groups.extend(g for _, g in kept)
    return folded


def check_plausible(report: UsageReport, groups: Mapping[str, ResourceGroup], slack_seconds: float) -> None:
    """Raise Rejected(implausible) if a report claims counts no daemon could have had
    under the group's quota (our config) over the report's tick: admitted beyond
    PLAUSIBLE_MARGIN x quota x (tick + slack_seconds) (slack: the bucket's burst plus the
    debt cap, in seconds of the limit), or demand beyond PLAUSIBLE_DEMAND_FACTOR x the
    quota. Groups we do not know and unlimited kinds are bounded by _check_kind only
    (no calculator reads them)."""
    tick_s = report.tick_ms / 1000.0
    span = tick_s + slack_seconds
    floor_m, floor_b = PLAUSIBLE_FLOOR["messages"], PLAUSIBLE_FLOOR["bytes"]
    for i, g in enumerate(report.groups):
        group = groups.get(g.group)
        if group is None:
            continue
        for kind in KINDS:
            if not g.HasField(kind):
                continue
            k = getattr(g, kind)
            qm, qb = group.rates(kind)
            # The common case first, in one test (no unit exceeds its bound); the loop
            # below names the first that does.
            if ((qm < 0 or not math.isfinite(qm)
                 or (k.admitted_messages <= PLAUSIBLE_MARGIN * qm * span + floor_m
                     and k.throttled_messages / tick_s <= PLAUSIBLE_DEMAND_FACTOR * max(qm, 1.0)))
                    and (qb < 0 or not math.isfinite(qb)
                         or (k.admitted_bytes <= PLAUSIBLE_MARGIN * qb * span + floor_b
                             and k.throttled_bytes / tick_s <= PLAUSIBLE_DEMAND_FACTOR * max(qb, 1.0)))):
                continue
            for unit, quota in zip(("messages", "bytes"), (qm, qb)):
                if quota < 0 or not math.isfinite(quota):
                    continue
                admitted = getattr(k, f"admitted_{unit}")
                most = PLAUSIBLE_MARGIN * quota * span + PLAUSIBLE_FLOOR[unit]
                if admitted > most:
                    raise Rejected(REJECT_IMPLAUSIBLE, f"groups[{i}].{kind}.admitted_{unit} = {admitted} over "
                                   f"{tick_s:g} s; at most {most:.0f} under a quota of {quota:g}/s")
                demand = getattr(k, f"throttled_{unit}") / tick_s
                most = PLAUSIBLE_DEMAND_FACTOR * max(quota, 1.0)
                if demand > most:
                    raise Rejected(REJECT_IMPLAUSIBLE, f"groups[{i}].{kind}.throttled_{unit} is {demand:.3g}/s; "
                                   f"at most {most:.3g}/s under a quota of {quota:g}/s")


__all__ = [
    "HMAC_PROPERTY",
    "KEY_ID_PROPERTY",
    "MAX_COUNT",
    "MAX_REPORT_BYTES",
    "MAX_SKEW_MS",
    "MAX_TICK_MS",
    "MIN_GROUPS_CAP",
    "PLAUSIBLE_DEMAND_FACTOR",
    "PLAUSIBLE_FLOOR",
    "PLAUSIBLE_MARGIN",
    "RAW_VIEW_TAG_FACTOR",
    "REJECT_CLOCK",
    "REJECT_IMPLAUSIBLE",
    "REJECT_INVALID",
    "REJECT_MALFORMED",
    "REJECT_OVERSIZED",
    "REJECT_SIGNATURE",
    "REJECT_SPOOFED",
    "REJECT_TOO_MANY_GROUPS",
    "REPLAY_WINDOW_MS",
    "FoldScope",
    "HmacKeys",
    "Rejected",
    "Unfolded",
    "check_plausible",
    "count_groups",
    "decode_report",
    "decode_scoped",
    "group_key",
    "group_key_bytes",
    "groups_cap",
    "index_report",
    "keys_among",
    "parse_entry",
    "raw_view_affordable",
    "serialize_report",
]
