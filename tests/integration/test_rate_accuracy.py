"""A lone daemon holds its configured rate: 100 msg/s (and 10 kB/s) within 5 % over
5 s of sustained acquire load, offered at twice the limit."""

from __future__ import annotations

import pytest

from rgd.devtools.load_generator import Stream, constant, run_streams
from tests.support.live import base_url, wait_for, write_config

WARMUP_S = 2  # the first ticks learn the demand and drain the burst; measure after them
MEASURE_S = 5


async def measure(d, namespace: str, offered: float, bytes_per_message: int) -> tuple[float, float]:
    stream = Stream(base_url(d), namespace, constant(offered), bytes_per_message=bytes_per_message)
    [stats] = await run_streams([stream], WARMUP_S + MEASURE_S + 0.5)
    msgs = stats.admitted_between(WARMUP_S, WARMUP_S + MEASURE_S)
    return msgs / MEASURE_S, msgs * bytes_per_message / MEASURE_S


@pytest.mark.parametrize(
    "group, bytes_per_message, field, target",
    [
        ({"publishRateInMsgs": 100}, 10, 0, 100.0),
        ({"publishRateInBytes": 10_000}, 100, 1, 10_000.0),
    ],
)
async def test_single_daemon_holds_its_rate(make_daemon, tmp_path, group, bytes_per_message, field, target):
    config = write_config(tmp_path / "g.yaml", {"gold": group}, namespaces={"acme/orders": "gold"})
    d = await make_daemon(config=config)
    await wait_for(lambda: d.readiness()[0], 15)
    rates = await measure(d, "acme/orders", 2 * 100, bytes_per_message)
    assert rates[field] == pytest.approx(target, rel=0.05), rates
