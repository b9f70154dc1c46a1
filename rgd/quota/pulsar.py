"""Strategy `pulsar`: Apache Pulsar's PIP-82 calculator, reproduced as a baseline.

Facts from reading apache/pulsar `ResourceQuotaCalculatorImpl.computeLocalQuota`
(pulsar-broker/.../broker/resourcegroup/) and its caller
`ResourceGroupService.calculateQuotaForAllResourceGroups`:
- inputs are longs: the configured limit, this broker's last reported usage and the
  sum of the usage every broker last reported (`getGlobalUsageStats`); usage is
  what was *admitted* in the last period, not demand;
- a negative configured limit means "not set": the result is -1, i.e. unlimited;
- a total usage of 0 returns the configured limit itself: every broker gets the full
  quota when nobody reported usage (a new group, an idle cluster);
- otherwise residual = conf - total and fraction = mine / total, in Java `float`
  (32-bit) arithmetic; the new quota is max(mine + residual * fraction, 1), cast to
  long (truncation). Algebraically conf * mine / total, so shares freeze at the
  ratio of last period's usage: 800/300 demand on a 1000 quota settles at 727/272;
- a broker with no usage while others have some gets max(0, 1) = 1.
Report suppression (5 % tolerance, at least every 5 rounds) and the long staleness
of a dead broker's usage belong to the transport, not here; the simulator applies
them when it runs this strategy.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Collection, Mapping

from rgd.quota.inputs import INF, DimensionInput, QuotaParams, all_ids

_F32 = struct.Struct("<f")


def f32(x: float) -> float:
    """Round to the nearest IEEE-754 single, as a Java `float` holds it."""
    (single,) = _F32.unpack(_F32.pack(x))
    return float(single)


def java_long_of_float(x: float) -> int:
    """Java's (long) cast of a float: truncation toward zero, NaN -> 0."""
    if math.isnan(x):
        return 0
    return int(x)


def compute_local_quota(conf: int, mine: int, total: int) -> int:
    """The per-broker formula, on longs, with Pulsar's special cases."""
    if conf < 0:
        return -1
    if mine < 0 or total < 0:
        raise ValueError(f"usage must be >= 0 (mine={mine}, total={total})")
    if total == 0:
        return conf
    residual = f32(float(conf - total))
    fraction = f32(f32(float(mine)) / f32(float(total)))
    quota = f32(f32(float(mine)) + f32(residual * fraction))
    return java_long_of_float(max(quota, 1.0))


def allocate(
    quota: float, entries: Mapping[str, DimensionInput], members: Collection[str], params: QuotaParams
) -> dict[str, float]:
    ids = all_ids(entries, members)
    if quota == INF:
        return {i: INF for i in ids}
    conf = int(quota)  # Pulsar's limits are longs
    usage = {i: int(max(0.0, entries[i].admitted)) if i in entries else 0 for i in ids}
    total = sum(usage.values())
    out: dict[str, float] = {}
    for i in ids:
        q = compute_local_quota(conf, usage[i], total)
        out[i] = INF if q < 0 else float(q)
    return out
