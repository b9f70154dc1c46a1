"""The usage map holds the entries of groups it does not fold as they came (unparsed) and
parses one when its group is first folded: the same figures as if every entry had been
parsed on arrival, whatever reports came in between (rgd/cluster/usage_map.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rgd.cluster.report_codec import (
    REJECT_IMPLAUSIBLE,
    Rejected,
    Unfolded,
    decode_scoped,
    group_key,
    serialize_report,
)
from rgd.cluster.usage_map import UsageMap
from rgd.quota.model import KindRates, PeerUsage
from rgd.wire.usage_report_pb2 import UsageReport

NOW_MS = 1_700_000_000_000
SUSPECT = PeerUsage(KindRates(1e6, 0.0))


def report(seq: int, base: int, groups: dict[str, int], sender: str = "b") -> UsageReport:
    r = UsageReport(daemon_id=sender, sequence=seq, base=base, incarnation=7, tick_ms=1000, lease_ms=3000,
                    publish_time_ms=NOW_MS)
    for name, admitted in groups.items():
        g = r.groups.add(group=name)
        g.publish.admitted_messages = admitted
        g.publish.limit_messages = -1
    return r


def receive(m: UsageMap, r: UsageReport, now: float = 0.0) -> None:
    """As the node does: decode with the map's scope (the folded groups), then fold."""
    parsed, unfolded = decode_scoped(serialize_report(r), NOW_MS, "a", 1, m.scope())
    assert m.fold(parsed, now, our_tag=0, unfolded=unfolded).accepted


def admitted(m: UsageMap, group: str) -> dict[str, float]:
    return {d: e.usage.publish.admitted_messages for d, e in m.groups.get(group, {}).items()}


def oracle(reports: list[UsageReport]) -> dict[str, int]:
    """A member's state, literally: a base-0 report replaces it, any other names on top."""
    state: dict[str, int] = {}
    for r in reports:
        if r.base == 0:
            state = {}
        state.update({g.group: g.publish.admitted_messages for g in r.groups})
    return state


def test_an_unfolded_group_is_held_unparsed_and_parsed_when_folded() -> None:
    m = UsageMap()
    m.fold_group("g")
    receive(m, report(1, 0, {"g": 10, "x": 20, "y": 30}))
    assert sorted(m.groups) == ["g"]
    assert sum(len(h.keys) for h in m.members["b"].unparsed) == 2
    assert m.fold_group("x")
    assert admitted(m, "x") == {"b": 20.0}
    assert not m.fold_group("x")  # already folded: nothing to do


def test_later_reports_supersede_held_entries_by_key_and_a_whole_state_drops_them() -> None:
    m = UsageMap()
    m.fold_group("g")
    receive(m, report(1, 0, {"g": 1, "x": 20, "y": 30}))
    receive(m, report(2, 1, {"x": 21}))  # x again, held again: the older x is no longer the latest
    m.fold_group("x")
    assert admitted(m, "x") == {"b": 21.0}
    receive(m, report(3, 0, {"g": 2}))  # whole state: y is idle now
    m.fold_group("y")
    assert admitted(m, "y") == {}


def test_a_group_folded_between_decoding_and_folding_is_parsed_at_the_fold() -> None:
    """Daemons vet reports as they arrive and fold them later: a group folded meanwhile was
    left unparsed by the decoding, and the fold parses it."""
    m = UsageMap()
    receive(m, report(1, 0, {"x": 5}))
    parsed, unfolded = decode_scoped(serialize_report(report(2, 1, {"x": 6})), NOW_MS, "a", 1, m.scope())
    assert unfolded is not None and len(unfolded) == 1
    m.fold_group("x")  # parses the held 5
    result = m.fold(parsed, 0.0, our_tag=0, unfolded=unfolded)
    assert admitted(m, "x") == {"b": 6.0} and "x" in result.changed


def test_an_entry_that_fails_vetting_when_parsed_late_counts_as_suspect() -> None:
    def vet(r: UsageReport) -> None:
        if r.groups[0].publish.admitted_messages > 100:
            raise Rejected(REJECT_IMPLAUSIBLE, "too many")

    m = UsageMap(vet=vet, suspect=lambda _group: SUSPECT)
    receive(m, report(1, 0, {"x": 5000, "y": 5}))
    m.fold_group("x")
    m.fold_group("y")
    assert m.groups["x"]["b"].usage == SUSPECT and admitted(m, "y") == {"b": 5.0}
    assert m.late_rejected == 1


def test_an_entry_under_another_groups_key_is_not_taken_for_it() -> None:
    """Keys are 64-bit hashes: an entry whose key is a folded group's but whose name is not
    stays held for its own group."""
    m = UsageMap()
    receive(m, report(1, 0, {}))
    wire = report(2, 1, {"x": 9})
    raw = [bytes(wire.groups[0].SerializeToString())]
    del wire.groups[:]
    m.fold(wire, 0.0, 0, Unfolded(np.array([group_key("g")], dtype=np.uint64), np.arange(1), raw))
    assert not m.fold_group("g") and admitted(m, "g") == {}


@pytest.mark.parametrize("seed", range(8))
def test_parsing_late_gives_the_figures_parsing_everything_on_arrival_gives(seed: int) -> None:
    """Random reports (whole states, deltas on top, groups folded at random moments) against
    a literal replay of the member's state."""
    rng = np.random.default_rng(seed)
    names = [f"g{i}" for i in range(30)]
    m = UsageMap()
    sent: list[UsageReport] = []
    for seq in range(1, 40):
        base = 0 if seq == 1 or rng.random() < 0.1 else seq - 1
        chosen = rng.choice(names, size=int(rng.integers(0, 20)), replace=False)
        r = report(seq, base, {str(n): int(rng.integers(1, 1000)) for n in chosen})
        sent.append(r)
        receive(m, r)
        for n in rng.choice(names, size=2, replace=False):
            if rng.random() < 0.2:
                m.fold_group(str(n))
    for n in names:
        m.fold_group(n)
    assert {n: admitted(m, n)["b"] for n in names if admitted(m, n)} == oracle(sent)


def test_held_reports_are_compacted_as_their_entries_are_superseded() -> None:
    m = UsageMap()
    receive(m, report(1, 0, {f"g{i}": i + 1 for i in range(100)}))
    for seq in range(2, 6):
        receive(m, report(seq, seq - 1, {f"g{i}": seq for i in range(20 * (seq - 2), 20 * (seq - 1))}))
    held = m.members["b"].unparsed
    assert sum(int(h.alive.sum()) for h in held) == 100
    assert sum(len(h.keys) for h in held) < 200  # the mostly superseded first report was copied out
