"""Simulator plumbing: schema validation, transport, determinism, CLI, scale mode, log hook."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from sim.__main__ import main
from sim.engine import run
from sim.metrics import converged
from sim.scenario import ScenarioError, builtin_names, load, parse
from sim.transport import Transport, TransportSpec

MINIMAL = {"ticks": 5, "daemons": ["a", "b"], "groups": {"g": {"publishRateInMsgs": 100}},
           "demand": {"g": {"a": 80, "b": 40}}}


def _err(doc: dict) -> str:
    with pytest.raises(ScenarioError) as exc:
        parse(doc)
    return str(exc.value)


# -- scenario schema ---------------------------------------------------------------------------


def test_every_builtin_parses() -> None:
    for name in builtin_names():
        sc = load(name)
        assert sc.name == name and sc.ticks > 0 and sc.description


def test_validation_names_the_bad_key() -> None:
    assert _err({**MINIMAL, "tikcs": 3}).startswith("tikcs: unknown key")
    assert _err({k: v for k, v in MINIMAL.items() if k != "ticks"}).startswith("ticks: missing")
    assert _err({**MINIMAL, "ticks": 0}).startswith("ticks: expected an integer")
    assert _err({**MINIMAL, "demand": {"g": {"a": -5}}}).startswith("demand.g.a: expected a number")
    assert _err({**MINIMAL, "demand": {"g": {"a": {"publsh": 5}}}}).startswith("demand.g.a.publsh: unknown key")
    assert "groups.g.publishRateInMsg" in _err({**MINIMAL, "groups": {"g": {"publishRateInMsg": 5}}})
    assert _err({**MINIMAL, "events": [{"at": 9, "join": ["c"]}]}).startswith(
        "events[0].at: expected an integer in 0..4")
    assert _err({**MINIMAL, "events": [{"at": 1, "crash": "a", "boom": 1}]}).startswith("events[0].boom: unknown key")
    assert _err({**MINIMAL, "transport": {"loss": 2}}).startswith("transport.loss: expected a number")
    assert _err({**MINIMAL, "phases": "sometimes"}).startswith("phases:")
    assert _err({**MINIMAL, "daemons": ["a", "a"]}).startswith("daemons: a daemon id is listed twice")


def test_load_reports_the_file_and_unknown_names(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**MINIMAL, "seed": "x"}))
    with pytest.raises(ScenarioError, match=r"^bad.yaml: seed: expected an integer"):
        load(str(bad))
    with pytest.raises(ScenarioError, match="no such file or built-in scenario"):
        load("no-such-scenario")


def test_events_that_make_no_sense_fail_at_run_time() -> None:
    sc = parse({**MINIMAL, "events": [{"at": 1, "leave": ["zz"]}]})
    with pytest.raises(ScenarioError, match="'zz' is not running"):
        run(sc, "rgd")


# -- transport -----------------------------------------------------------------------------


def test_transport_loss_delay_duplicates_are_seeded() -> None:
    def deliveries(seed: int) -> list[tuple[str, bytes]]:
        t = Transport(TransportSpec(loss=0.3, delay=2, duplicate=0.2), seed)
        for i in range(200):
            t.publish("a", bytes([i % 256]), 0.0, ["a", "b", "c"])
        assert t.due(1.9) == []
        return t.due(2.0)

    first = deliveries(7)
    assert first == deliveries(7)
    peers = [r for r, _ in first if r != "a"]
    echoes = [d for r, d in first if r == "a"]
    assert 0.5 * 400 < len(peers) < 1.0 * 400  # about 70 % delivered, plus duplicates
    # The sender's own copy (a daemon's subscription gets its reports back): lost like any
    # other, never duplicated, and drawn apart, so what peers receive does not depend on it.
    assert 0.5 * 200 < len(echoes) < 0.9 * 200 and len(set(echoes)) == len(echoes)
    t = Transport(TransportSpec(loss=0.3, delay=2, duplicate=0.2), 7)
    for i in range(200):
        t.publish("a", bytes([i % 256]), 0.0, ["b", "c"])
    assert [x for x in t.due(2.0)] == [(r, d) for r, d in first if r != "a"]


def test_a_delivery_s_fate_depends_on_its_own_identity_only() -> None:
    # With one random stream, a report more or less anywhere re-dealt every later loss in
    # the run, and A/B comparisons of two versions moved lossy scenarios both ways.
    def fates(extra: bool) -> dict[str, list[str]]:
        t = Transport(TransportSpec(loss=0.3, duplicate=0.2), 7)
        for i in range(100):
            now = i * 0.1
            t.publish("a", b"a%d" % i, now, ["a", "b", "c"])
            if extra and i % 3 == 0:
                t.publish("b", b"extra", now, ["a", "b", "c"])  # b reports more often
            t.publish("a", b"a%d again" % i, now, ["a", "b", "c"])  # a's second report of the instant
        got: dict[str, list[str]] = {}
        for r, d in t.due(100.0):
            if d != b"extra":
                got.setdefault(r, []).append(d.decode())
        return got

    assert fates(False) == fates(True)
    # a's two reports of one instant are drawn apart: in some instants b got one of them only
    got = set(fates(False)["b"])
    assert any((f"a{i}" in got) != (f"a{i} again" in got) for i in range(100))
    lost = {r: 200 - len(set(d)) for r, d in fates(False).items()}
    assert all(40 <= n <= 80 for n in lost.values()), lost  # about 30 % of 200


# -- engine ---------------------------------------------------------------------------------


def test_traffic_is_driven_through_the_limiter() -> None:
    r = run(parse({**MINIMAL, "ticks": 12}), "static")
    last = r.dims["g/publish"][-1]
    assert last is not None
    assert last.offered == {"a": 80.0, "b": 40.0}
    assert last.admitted["a"] == pytest.approx(50, abs=2)  # static: 100 / 2
    assert last.admitted["b"] == pytest.approx(40, abs=1)
    assert not converged(last)  # max-min fair is 60/40


def test_bytes_only_quota_is_measured_in_bytes() -> None:
    doc = {**MINIMAL, "ticks": 10, "message_bytes": 100, "groups": {"g": {"publishRateInBytes": 10_000}}}
    r = run(parse(doc), "rgd")
    t = r.dims["g/publish"][-1]
    assert t is not None and t.quota == 10_000 and t.offered["a"] == 8_000
    assert sum(t.admitted.values()) == pytest.approx(10_000, rel=0.05)


# -- command line ----------------------------------------------------------------------------


def test_cli_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "s.yaml"
    bad.write_text(yaml.safe_dump({**MINIMAL, "groups": {"g": {"publishRateInMsgs": "lots"}}}))
    assert main([str(bad)]) == 2
    assert "publishRateInMsgs" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["skew", "--strategy", "nope"])


# -- scale mode -----------------------------------------------------------------------------


# -- coupled limits (messages and bytes both limited) -----------------------------------------------

COUPLED = {
    "ticks": 12, "daemons": ["a", "b", "c"],
    "groups": {"g": {"publishRateInMsgs": 1000, "publishRateInBytes": 1_000_000}},
    "message_sizes": {"g": {"a": 4000, "b": 4000, "c": 500}},
    "demand": {"g": {"a": 400, "b": 100, "c": 600}},
}


def test_message_sizes_validate_and_default() -> None:
    from sim.engine import MessageSizes

    sizes = MessageSizes(parse(COUPLED))
    assert sizes.of("g", "a") == 4000 and sizes.of("g", "zz") == 1000 and sizes.of("h", "a") == 1000
    assert MessageSizes(parse({**MINIMAL, "message_sizes": {"g": 20}})).of("g", "b") == 20
    assert _err({**MINIMAL, "message_sizes": {"g": 0}}).startswith("message_sizes.g: expected an integer in 1..")
    assert _err({**MINIMAL, "message_sizes": {"g": {"a": "big"}}}).startswith("message_sizes.g.a: expected an integer")
    assert _err({**MINIMAL, "message_sizes": [1]}).startswith("message_sizes: expected a mapping")


def test_an_event_changes_message_sizes_from_its_tick() -> None:
    doc = {**COUPLED, "ticks": 6, "events": [{"at": 3, "message_sizes": {"g": {"c": 2000}}},
                                             {"at": 4, "message_sizes": {"g": 250}}]}
    sc = parse(doc)
    assert sc.events[0].message_sizes == {"g": {"c": 2000}}
    r = run(sc, "rgd")
    sizes = [t.message_bytes for t in r.dims["g/publish"]]  # type: ignore[union-attr]
    assert sizes[2] == {"a": 4000, "b": 4000, "c": 500}
    assert sizes[3] == {"a": 4000, "b": 4000, "c": 2000}  # one daemon's size: the others keep theirs
    assert sizes[5] == {"a": 250, "b": 250, "c": 250}  # a number: the group's size for everyone
    assert [c.label for c in r.changes][-2:] == ["sizes g", "sizes g"]
    bad = {**MINIMAL, "events": [{"at": 1, "message_sizes": {"g": {"a": 0}}}]}
    assert _err(bad).startswith("events[0].message_sizes.g.a: expected an integer in 1..")


def test_overshoot_counts_the_bytes_dimension() -> None:
    from sim.engine import DimensionTick
    from sim.metrics import usage_and_quota

    t = DimensionTick(100, {"a": 80}, {"a": 80}, bytes_quota=40_000, message_bytes={"a": 1000})
    assert usage_and_quota(t) == [(80, 100), (80_000, 40_000)]  # 100 % over in bytes


def test_one_message_off_a_fractional_ideal_is_converged_two_are_not() -> None:
    from sim.engine import DimensionTick

    # Ideal 3.8 messages a second for b (max-min of 20 over 3.8 and 30 offered): a tick admits
    # whole messages, so 3 is as close as a limiter gets in some ticks; 2 is a miss. The slack
    # of 0.5 % of the quota (0.1 message) alone would call both misses.
    def tick(b_admitted: float) -> DimensionTick:
        return DimensionTick(20, {"a": 30.0, "b": 3.8}, {"a": 16.0, "b": b_admitted}, per_message={"a": 1.0, "b": 1.0})

    assert converged(tick(3.0)) and converged(tick(4.0))
    assert not converged(tick(2.0))
    # In bytes (a bytes quota alone), one message is its size.
    in_bytes = DimensionTick(20_000, {"a": 30_000.0, "b": 3_800.0}, {"a": 16_000.0, "b": 3_000.0},
                             per_message={"a": 1000.0, "b": 1000.0})
    assert converged(in_bytes)
    assert not converged(DimensionTick(20_000, {"a": 30_000.0, "b": 3_800.0}, {"a": 16_000.0, "b": 2_000.0},
                                       per_message={"a": 1000.0, "b": 1000.0}))


def test_the_cluster_s_usage_is_judged_to_within_one_message_too() -> None:
    from sim.engine import DimensionTick

    # Fuzz case 129 of seed 1 (no loss, no delay): a bytes quota of 13 070 B/s, and d01's
    # messages of 2 017 B are 15 % of it. Its ideal is 4.7 messages a second; it admits 4 in
    # some ticks and 5 in others, each within one message of its share, but with 4 the
    # cluster read 13 % under its ideal and the change never converged. One message of the
    # largest sender is the cluster's granule as it is each daemon's.
    per_message = {"d01": 2017.0, "d02": 171.0, "d03": 260.0}
    offered = {"d01": 21_000.0, "d02": 1197.0, "d03": 2340.0}

    def tick(d01_messages: int) -> DimensionTick:
        return DimensionTick(13_070, offered, {"d01": 2017.0 * d01_messages, "d02": 1197.0, "d03": 2340.0},
                             per_message=per_message)

    assert converged(tick(4)) and converged(tick(5))
    assert not converged(tick(3))  # two messages off: a miss
    # One message of a small sender does not cover a big shortfall.
    small = {"d01": 200.0, "d02": 171.0, "d03": 260.0}
    assert not converged(DimensionTick(13_070, offered, {"d01": 8068.0, "d02": 1197.0, "d03": 2340.0},
                                       per_message=small))


def test_the_judge_takes_the_messages_that_arrived_as_what_was_offered() -> None:
    from sim.engine import Change, DimensionTick
    from sim.metrics import _moved, judge

    # Fuzz case 235 of seed 1: ten daemons offered 4.4 msg/s each under a 73.3 msg/s quota. In
    # every fifth tick five messages arrive at each, in phase, and each admits all five: on
    # its ideal. Judged on the rate, the cluster's 50 read as 14 % over the ideal's 44 and the
    # change never converged.
    ids = [f"d{i}" for i in range(10)]
    fifth = DimensionTick(73.3, dict.fromkeys(ids, 4.4), dict.fromkeys(ids, 5.0), per_message=dict.fromkeys(ids, 1.0),
                          arrived=dict.fromkeys(ids, 5.0))
    assert converged(fifth)
    assert not converged(DimensionTick(73.3, fifth.offered, fifth.admitted, per_message=fifth.per_message))
    # A daemon that admitted fewer than arrived is judged on what arrived: 3 of 5 is a miss.
    assert not converged(DimensionTick(73.3, fifth.offered, {**fifth.admitted, "d0": 3.0},
                                       per_message=fifth.per_message, arrived=fifth.arrived))
    # Whether a change moved the ideal is judged on the rates: 4 arriving one tick and 5 the
    # next is no move.
    before = DimensionTick(73.3, fifth.offered, dict.fromkeys(ids, 4.0), per_message=fifth.per_message,
                           arrived=dict.fromkeys(ids, 4.0))
    assert judge(before).shares != judge(fifth).shares
    assert not _moved([before, fifth], Change(1, 2, "demand"), fifth)
    # The engine records arrivals: a demand-bound daemon offered 4.4 msg/s sees 4 or 5 a tick.
    r = run(parse({"ticks": 10, "daemons": ["a", "b"], "groups": {"g": {"publishRateInMsgs": 100}},
                   "demand": {"g": {"a": 4.4, "b": 40}}}), "rgd")
    arrived = [t.arrived["a"] for t in r.dims["g/publish"] if t is not None]
    assert set(arrived[1:]) == {4.0, 5.0} and sum(arrived) == pytest.approx(44, abs=1)


def test_jain_counts_one_message_off_as_none() -> None:
    from sim.engine import DimensionTick
    from sim.metrics import jain

    # Ideals 0.4 and 19.6 (max-min of 20 over 0.4 and 30 offered): admitting 1 or 0 messages
    # of the small one is as fair as a tick of whole messages gets; 3 is not.
    def tick(small: float) -> DimensionTick:
        return DimensionTick(20, {"a": 30.0, "b": 0.4}, {"a": 19.6, "b": small}, per_message={"a": 1.0, "b": 1.0})

    assert jain(tick(1.0)) == pytest.approx(1.0) and jain(tick(0.0)) == pytest.approx(1.0)
    assert jain(tick(3.0)) < 0.7


def test_an_ask_is_one_producer_batch() -> None:
    """Pulsar's producer closes a batch at 1 ms, 1000 messages or 128 KB; the simulator may
    coarsen asks up to 1 % of the daemon's limit, never past a sixteenth of a sub-step.
    Expected sizes worked out by hand from those rules."""
    from sim.engine import ask_size

    # Fuzz case 427 of seed 1: 30 120 msg/s offered on a 1 790 msg/s limit, 0.2 s sub-steps:
    # 1 ms of demand is 30 messages (1 % of the limit is 17.9; a sixteenth, 376).
    assert ask_size(30_120, 0.2, 67, 1_790) == 30
    # 500 msg/s under a 1 000 msg/s limit: 1 % of the limit (10) beats 1 ms (0.5); a
    # sixteenth of the sub-step (6.25) is smaller still.
    assert ask_size(500, 0.2, 100, 1_000) == 6
    assert ask_size(500, 0.05, 100, 1_000) == 1  # never below one message
    assert ask_size(2_000_000, 0.2, 10, math.inf) == 1_000  # at most 1 000 messages
    assert ask_size(2_000_000, 0.2, 30_000, math.inf) == 4  # at most 128 KB: 4 x 30 kB
    assert ask_size(2_000_000, 0.2, 200_000, math.inf) == 1  # a message over 128 KB goes alone
    # No limit yet (the first asks of a group): a sixteenth of the sub-step, within the caps.
    assert ask_size(800, 0.2, 100, math.inf) == 10


def test_a_daemon_offered_far_more_than_its_limit_asks_in_small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asks of a sixteenth of a sub-step were 12.5 ms of demand: at 17x the limit each ask was
    larger than the 0.1 s bucket and a 1-second window held 4 or 5 of them (fuzz case 427 of
    seed 1, 11.5 % over with the long-run rate held). In batches of 1 ms no tick goes over."""
    from rgd.limiting.limiter import Limiter

    asked: list[int] = []
    acquire = Limiter.acquire

    def recording(self, group, kind, messages, nbytes, *args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(messages)
        return acquire(self, group, kind, messages, nbytes, *args, **kwargs)

    monkeypatch.setattr(Limiter, "acquire", recording)
    doc = {"ticks": 8, "substeps": 5, "daemons": ["a"], "groups": {"g": {"publishRateInMsgs": 1_800}},
           "message_sizes": {"g": 67}, "demand": {"g": {"a": 30_000}}}
    result = run(parse(doc), "rgd")
    # The group's first asks come before the limiter holds a limit for it (a sixteenth of a
    # sub-step); every later one is 1 ms of 30 000 msg/s.
    assert len(asked) > 1000 and max(asked[20:]) <= 30
    series = result.dims["g/publish"]
    assert series[3].offered["a"] == pytest.approx(30_000)  # the whole demand still arrives
    for t in series[2:]:
        assert t is not None and t.admitted["a"] <= 1_800 * 1.05
