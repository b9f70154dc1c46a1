"""Strategy `static`: quota / number of live members, whatever the demand.

The floor every other strategy must beat: it never overshoots while membership
is agreed, but wastes every share a member does not use.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from rgd.quota.inputs import INF, DimensionInput, QuotaParams, all_ids


def allocate(
    quota: float, entries: Mapping[str, DimensionInput], members: Collection[str], params: QuotaParams
) -> dict[str, float]:
    ids = all_ids(entries, members)
    if not ids:
        return {}
    share = INF if quota == INF else max(0.0, quota) / len(ids)
    return {i: share for i in ids}
