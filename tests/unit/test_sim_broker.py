"""The simulated brokers' asks (sim/broker.py): when they come and how many."""

from __future__ import annotations

from sim.broker import ArrivingDemand


def test_a_substeps_messages_arrive_evenly_over_it_in_batches() -> None:
    seen: list[tuple[int, float]] = []
    admitted = ArrivingDemand().step(160.0, 2.0, 2.1, 2, lambda n, at: seen.append((n, at)) or True)
    assert admitted == 16
    assert [n for n, _ in seen] == [2] * 8
    assert [round(at, 4) for _, at in seen] == [round(2.0 + i * 0.0125, 4) for i in range(8)]


def test_the_part_of_a_message_not_arrived_yet_is_carried() -> None:
    # 7 msg/s over ten 0.1 s sub-steps: 7 messages, never two in one sub-step.
    d = ArrivingDemand()
    counts = [d.step(7.0, k / 10, (k + 1) / 10, 1, lambda n, at: True) for k in range(10)]
    assert sum(counts) == 7 and max(counts) == 1


def test_denied_asks_are_not_admitted_and_not_asked_again() -> None:
    calls: list[float] = []

    def every_other(n: int, at: float) -> bool:
        calls.append(at)
        return len(calls) % 2 == 1

    assert ArrivingDemand().step(100.0, 0.0, 0.1, 1, every_other) == 5
    assert len(calls) == 10
