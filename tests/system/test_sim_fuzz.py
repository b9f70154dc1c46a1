"""The scenario fuzzer: stays within its documented bounds, covers every kind of change, replays."""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from pathlib import Path

import pytest
import yaml

from sim.__main__ import main
from sim.fuzz import BOUNDS, draw_document, draw_scenario
from sim.scenario import load, parse

SAMPLE = range(300)


@functools.cache
def docs() -> list[dict]:
    return [draw_document(7, i) for i in SAMPLE]


def _all_ids(doc: dict) -> set[str]:
    ids = set(doc["daemons"])
    for ev in doc["events"]:
        ids.update(ev.get("join", []))
    return ids


def test_same_seed_and_index_same_scenario() -> None:
    assert draw_document(3, 5) == draw_document(3, 5)
    assert draw_document(3, 5) != draw_document(3, 6) != draw_document(4, 5)


def test_every_document_validates_and_stays_within_bounds() -> None:
    for doc in docs():
        sc = parse(doc)
        assert 2 <= len(_all_ids(doc)) <= 50
        groups = set(doc["groups"]) | {g for ev in doc["events"] for g in ev.get("groups", {})}
        assert 1 <= len(groups) <= 20
        assert 0 <= sc.loss <= 0.3 and 0 <= sc.delay <= 2 and 0 <= sc.duplicate <= 0.1 and 0 <= sc.jitter <= 0.2
        assert sc.phases in ("aligned", "spread", "random")
        pairs = sum(len(per) for per in doc["demand"].values())
        assert pairs <= BOUNDS["max_pairs"]


def _quota_factors(doc: dict) -> list[float]:
    current = {g: dict(v) for g, v in doc["groups"].items()}
    out = []
    for ev in doc["events"]:
        for g, body in ev.get("groups", {}).items():
            if body is not None and g in current:
                key = sorted(body)[0]
                out.append(body[key] / current[g][key])
            if body is None:
                current.pop(g, None)
            else:
                current[g] = dict(body)
    return out


def test_the_sample_covers_every_kind_of_change() -> None:
    seen: Counter[str] = Counter()
    for doc in docs():
        seen[f"phases {doc['phases']}"] += 1
        seen["loss"] += doc["transport"]["loss"] > 0
        seen["delay > 1"] += doc["transport"]["delay"] > 1
        seen["duplicates"] += doc["transport"]["duplicate"] > 0
        seen["jitter"] += doc["jitter"] > 0
        seen["per-daemon sizes"] += any(isinstance(v, dict) for v in doc["message_sizes"].values())
        for body in doc["groups"].values():
            for kind in ("publish", "dispatch"):
                m, b = f"{kind}RateInMsgs" in body, f"{kind}RateInBytes" in body
                seen[f"{kind} {'both' if m and b else 'messages' if m else 'bytes' if b else 'none'}"] += 1
        left: set[str] = set()
        for ev in doc["events"]:
            for what in ("join", "leave", "crash"):
                seen[what] += bool(ev.get(what))
            seen["same-id restart"] += bool(set(ev.get("join", [])) & left)
            left |= set(ev.get("leave", [])) | set(ev.get("crash", []))
            seen["demand change"] += bool(ev.get("demand"))
            seen["group delete"] += any(v is None for v in ev.get("groups", {}).values())
            seen["group create"] += any(g not in doc["groups"] for g, v in ev.get("groups", {}).items() if v)
            seen["size change"] += bool(ev.get("message_sizes"))
        consecutive = [ev["at"] for ev in doc["events"] if ev.get("demand")]
        seen["ramp"] += any(b - a == 1 for a, b in itertools.pairwise(consecutive))
        f = _quota_factors(doc)
        seen["quota raise"] += any(x > 1 for x in f)
        seen["quota cut"] += any(x < 1 for x in f)
        assert all(0.1 * 0.999 <= x <= 10 * 1.001 for x in f), f
    for what in ("phases aligned", "phases spread", "phases random", "loss", "delay > 1", "duplicates", "jitter",
                 "per-daemon sizes", "publish both", "publish messages", "publish bytes", "dispatch both",
                 "join", "leave", "crash", "same-id restart", "demand change", "group delete", "group create",
                 "ramp", "quota raise", "quota cut", "size change"):
        assert seen[what] > 0, (what, seen)


def test_size_changes_come_from_their_own_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    # Drawing size changes must leave the rest of every scenario as it was (the corpus floors
    # and the fuzz figures of earlier stops stay comparable): without them, the same documents
    # minus their size events.
    from sim import fuzz

    with_sizes = [draw_document(1, i) for i in range(40)]
    monkeypatch.setattr(fuzz, "_size_changes", lambda d, sizes, rng: None)
    without = [draw_document(1, i) for i in range(40)]
    changed = 0
    for a, b in zip(with_sizes, without):
        events = []
        for ev in a["events"]:
            rest = {k: v for k, v in ev.items() if k != "message_sizes"}
            changed += "message_sizes" in ev
            if len(rest) > 1:
                events.append(rest)
        assert {**a, "events": events, "description": ""} == {**b, "description": ""}  # it counts event ticks
    assert changed


def test_a_size_change_names_coupled_members_and_stays_within_bounds() -> None:
    for doc in docs():
        members = {g: set(per) for g, per in doc["demand"].items()}
        for ev in doc["events"]:
            for g, per in ev.get("demand", {}).items():
                members.setdefault(g, set()).update(per)
        for ev in doc["events"]:
            for g, per in ev.get("message_sizes", {}).items():
                assert set(per) <= members.get(g, set()), (g, per)
                assert all(1 <= v <= 4 * BOUNDS["message_bytes"][1] for v in per.values())


def test_either_dimension_binds_in_the_sample() -> None:
    from sim.engine import run
    from sim.metrics import evaluate

    bindings: Counter[str] = Counter()
    for i in range(16):
        try:
            windows = evaluate(run(draw_scenario(7, i), "rgd")).windows
        except KeyError:  # the group-deletion crash in rgd/cluster/node.py (tests/test_sim_corpus.py)
            continue
        for w in windows:
            bindings[w.binding] += 1
    assert bindings["messages"] and bindings["bytes"] and bindings["demand"], bindings


def test_cli_fuzz_prints_targets_and_writes_replayable_failures(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--first", "5", "--count", "4", "--seed", "1", "--strategy", "rgd", "--strategy", "static",
                 "--out", str(tmp_path), "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "| rgd |" in out and "| static |" in out
    for line in ("overshoot <= 10 % in every tick", "convergence <= 3 ticks", "convergence <= 5 ticks",
                 "utilization of the binding dimension >= 95%", "Jain >= 0.99", "no other strategy beats rgd"):
        assert line in out, line
    assert (tmp_path / "fuzz.md").read_text().startswith("## Fuzz: 4 scenarios x 2 strategies, seed 1")
    invariant = out[out.index("Invariant (the limits the live daemons granted themselves"):].splitlines()
    rows = {ln.split("|")[1].strip(): ln.split("|")[2].strip() for ln in invariant[4:6]}
    assert set(rows) == {"rgd", "static"} and all(v.endswith("/ 4") for v in rows.values()), invariant[:6]
    failing = {p.name: p for p in (tmp_path / "failing").glob("*.yaml")}
    # Case 6 of seed 1 fails rgd's utilization target (94.0 %); which other of cases 5-8 fail
    # is not the point here.
    assert "fuzz-1-0006.yaml" in failing, sorted(failing)
    text = failing["fuzz-1-0006.yaml"].read_text()
    assert text.startswith("# Fuzzed case 6 of seed 1") and "# rgd: utilization" in text
    assert load(str(failing["fuzz-1-0006.yaml"])) == draw_scenario(1, 6)
    assert yaml.safe_load(text)["name"] == "fuzz-1-0006"


def test_cli_fuzz_rejects_bad_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--count", "0"]) == 2
    assert "--count" in capsys.readouterr().err


def test_cli_fuzz_hindsight_adds_a_reference_row_left_out_of_the_comparison(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Case 5 of seed 1: the reference never exceeds the quota (rgd: 6.5 %), so it would beat rgd
    # on worst overshoot were it counted as a strategy; it is not one.
    assert main(["fuzz", "--first", "5", "--count", "1", "--seed", "1", "--strategy", "rgd", "--strategy", "static",
                 "--hindsight", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## Fuzz: 1 scenarios x 2 strategies and the hindsight reference, seed 1")
    assert "- hindsight (reference):" in out
    rows: dict[str, str] = {}
    for line in out.splitlines():
        if line.startswith("| "):
            rows.setdefault(line.split("|")[1].strip(), line)  # the first table's
    assert rows["hindsight"].split("|")[5].strip().endswith("/ 0.0")  # overshoot max
    assert not rows["rgd"].split("|")[5].strip().endswith("/ 0.0")
    assert "PASS no other strategy beats rgd on worst overshoot" in out
    assert "beaten by" not in out
    # The reference grants itself no limits: the replayed run's violations (static's, 3 in
    # case 5, the first at start-up: +100 %) are not its own.
    invariant = out[out.index("Invariant (the limits"):].splitlines()
    assert next(ln for ln in invariant if ln.startswith("| hindsight |")).split("|")[2:4] == [" 0 / 1 ", " 0 "]


def test_cli_fuzz_failing_file_names_the_reference_as_one(tmp_path: Path) -> None:
    # Case 6 of seed 1: rgd and the reference both miss the utilization target there; the
    # file says which line is the reference's.
    assert main(["fuzz", "--first", "6", "--count", "1", "--seed", "1", "--strategy", "rgd", "--hindsight",
                 "--out", str(tmp_path)]) == 0
    head = [ln for ln in (tmp_path / "failing" / "fuzz-1-0006.yaml").read_text().splitlines() if ln.startswith("# ")]
    assert head[1].startswith("# rgd: utilization")
    assert head[2].startswith("# hindsight (reference): utilization")
    assert len(head) == 3
