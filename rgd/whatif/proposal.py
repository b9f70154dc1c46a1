"""`--set GROUP.FIELD=VALUE`: the proposed quotas, checked against the groups the logs hold (pure).

FIELD is one of Pulsar's ResourceGroup rate fields (rgd.config.groups.RATE_FIELDS, e.g.
publishRateInMsgs); VALUE a number, -1 for unlimited, in the range the config file takes.
A group name may itself contain dots (Pulsar allows them), so the field is what follows the
last one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rgd.config.groups import RATE_FIELDS, InvalidGroup, check_rate

__all__ = ["Change", "ProposalError", "check_groups", "parse_changes"]


class ProposalError(ValueError):
    """A --set that cannot be applied; the message names the part that is wrong."""


@dataclass(frozen=True, slots=True)
class Change:
    group: str
    field: str  # one of RATE_FIELDS
    value: float  # -1 = unlimited

    def __str__(self) -> str:
        shown = "unlimited" if self.value < 0 else f"{self.value:g}"
        return f"{self.group}.{self.field}={shown}"


def parse_changes(specs: Sequence[str]) -> list[Change]:
    """Parse and check every --set (its form, field and value); the last --set of a field wins.
    Cheap, so a typo is named before any log is read; `check_groups` then checks the groups."""
    out: dict[tuple[str, str], Change] = {}
    for spec in specs:
        target, sep, raw = spec.partition("=")
        group, dot, field_name = target.strip().rpartition(".")
        if not sep or not dot or not group or not field_name:
            raise ProposalError(f"--set {spec!r}: expected GROUP.FIELD=VALUE, e.g. tenant-a.publishRateInMsgs=500")
        if field_name not in RATE_FIELDS:
            raise ProposalError(f"--set {spec!r}: unknown field {field_name!r} "
                                f"(expected one of {', '.join(RATE_FIELDS)})")
        try:
            value = float(raw.strip())
        except ValueError:
            raise ProposalError(f"--set {spec!r}: value {raw.strip()!r} is not a number (-1 = unlimited)") from None
        try:
            value = check_rate(f"--set {spec!r}: {field_name}", value)
        except InvalidGroup as exc:
            raise ProposalError(str(exc)) from None
        out[(group, field_name)] = Change(group, field_name, value)
    return list(out.values())


def check_groups(changes: Sequence[Change], groups: Iterable[str]) -> None:
    """Every change names a group the logs hold traffic of (a quota of a group without traffic
    changes nothing a replay can show)."""
    known = sorted(set(groups))
    for c in changes:
        if c.group not in known:
            listed = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
            raise ProposalError(f"--set {c.group}.{c.field}: unknown group {c.group!r}: the logs have no traffic "
                                f"of it (groups in the logs: {listed or 'none'})")
