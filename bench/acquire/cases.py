"""What the benchmark asks and what each case must answer.

The same bodies go to every server, so a difference in req/s is the
server's; a Result carries the figures of one measured window, and what the
sanity check (servers.sanity_check) saw before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BATCH_TARGET",
    "BENCH_RATE_BYTES",
    "BENCH_RATE_MSGS",
    "BENCH_TENANT",
    "SINGLE_TARGET",
    "TIGHT_RATE_MSGS",
    "TIGHT_TENANT",
    "Case",
    "Result",
    "all_cases",
    "ask",
    "body",
    "make_result",
]

BENCH_TENANT = "bench"  # a group with limits high enough that every ask is allowed
TIGHT_TENANT = "tight"  # a group of 100 msg/s: the deny cases
BENCH_RATE_MSGS = 1_000_000_000
BENCH_RATE_BYTES = 1_000_000_000_000
TIGHT_RATE_MSGS = 100
SINGLE_TARGET = 0.80  # rgd single / trivial single, req/s
BATCH_TARGET = 100_000  # rgd batch decisions/s on one core


# -- bodies ------------------------------------------------------------------------------

def ask(i: int, tenant: str) -> dict[str, Any]:
    """The i-th ask of a body: 10 namespaces, 7 topics each, 1..10 messages of 1 KiB."""
    ns = f"{tenant}/ns{i % 10}"
    msgs = 1 + i % 10
    return {"namespace": ns, "kind": "publish", "messages": msgs, "bytes": msgs * 1024,
            "topic": f"persistent://{ns}/t{i % 7}"}


def body(batch: int, tenant: str) -> bytes:
    doc: Any = {"requests": [ask(i, tenant) for i in range(batch)]} if batch else ask(0, tenant)
    return json.dumps(doc, separators=(",", ":")).encode()


# -- cases -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    server: str  # trivial | rgd | limits
    batch: int  # 0 = a single ask
    tenant: str

    @property
    def deny(self) -> bool:
        return self.tenant == TIGHT_TENANT


def all_cases(batch: int) -> list[Case]:
    """In the order they run: the cases a ratio compares run back to back, so a
    change in the machine's other load skews a ratio as little as it can."""
    return [
        Case("trivial-single", "trivial", 0, BENCH_TENANT),
        Case("rgd-single", "rgd", 0, BENCH_TENANT),
        Case("limits-single", "limits", 0, BENCH_TENANT),
        Case(f"trivial-batch{batch}", "trivial", batch, BENCH_TENANT),
        Case(f"rgd-batch{batch}", "rgd", batch, BENCH_TENANT),
        Case(f"limits-batch{batch}", "limits", batch, BENCH_TENANT),
        Case("rgd-single-deny", "rgd", 0, TIGHT_TENANT),
        Case("limits-single-deny", "limits", 0, TIGHT_TENANT),
    ]


@dataclass
class Result:
    case: str
    server: str
    loop: str
    batch: int
    requests: int
    seconds: float
    req_per_s: float
    decisions_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    non_2xx: int
    socket_errors: int
    generator: str
    round: int = 1
    server_cpu_s: float = 0.0  # CPU time of the server's processes during the measured run
    server_cpu_pct: float = 0.0  # ... as a share of one core: ~100 when the server is the bottleneck
    cpu_us_per_request: float = 0.0
    decisions_per_cpu_s: float = 0.0  # decisions per second of server CPU: robust to other load
    check: str = ""  # what the sanity check saw


def make_result(case: Case, loop: str, summary: dict[str, Any], generator: str, check: str,
                cpu_s: float) -> Result:
    seconds = summary["duration_us"] / 1e6
    n = summary["requests"]
    rps = n / seconds if seconds > 0 else 0.0
    return Result(
        server_cpu_s=round(cpu_s, 3), server_cpu_pct=round(100 * cpu_s / seconds, 1) if seconds else 0.0,
        cpu_us_per_request=round(cpu_s / n * 1e6, 1) if n else 0.0,
        decisions_per_cpu_s=round(n * max(1, case.batch) / cpu_s, 1) if cpu_s else 0.0,
        case=case.name, server=case.server, loop=loop, batch=case.batch, requests=summary["requests"],
        seconds=round(seconds, 3), req_per_s=round(rps, 1), decisions_per_s=round(rps * max(1, case.batch), 1),
        p50_ms=summary["p50_us"] / 1000, p90_ms=summary["p90_us"] / 1000, p99_ms=summary["p99_us"] / 1000,
        max_ms=summary["max_us"] / 1000, non_2xx=summary["errors_status"],
        socket_errors=sum(summary[k] for k in ("errors_connect", "errors_read", "errors_write", "errors_timeout")),
        generator=generator, check=check,
    )
