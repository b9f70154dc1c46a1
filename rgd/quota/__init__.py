"""Quota calculation: split each resource group's cluster-wide quota among daemons.

`calculator.compute_limits` is the entry point (pure); one module per strategy:
`max_min_fair` (rgd, the default), `pulsar`, `doorman` (proportional, fair), `static`.
"""

from rgd.quota.calculator import (
    STRATEGIES,
    UNSET,
    QuotaParams,
    allocate_group,
    as_peers_see_me,
    compute_limits,
)
from rgd.quota.inputs import DimensionInput

__all__ = [
    "STRATEGIES", "UNSET", "DimensionInput", "QuotaParams", "allocate_group", "as_peers_see_me",
    "compute_limits",
]
