"""The client conformance list (clients/conformance/cases.json) against a live daemon.

One harness for every client: it starts the daemon, does each case's setup through the
admin API, hands the case to a client's *runner* (in-process for rgd.client, a JVM
process speaking JSON lines for dev.rgd.client.RgdClient), answers the runner's requests
to stop and start the daemon, and judges what the runner reports against the case's
literal expectations and against what the daemon itself parsed (asks per request).
The judge shares no code with either client.

Runner protocol (one JSON object per line): the harness writes `{"case": CASE, "url": URL}`;
the runner may write `{"control": "stop"|"start"}` and waits for `{"ok": true}`; it ends a
case with `{"result": {"case": NAME, "steps": [...], "client_requests": N}}`. Step results:
`{"answers": [...]}` for acquire (an answer is `{"allowed", "source", "reason", "group",
"retry_after_ms", "remaining_messages", "remaining_bytes"}` or `{"error": ARGUMENT}`),
`{"usage": {...}}` / `{"quota": {...}}` or `{"error": ...}`, `{}` for the rest.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from rgd.transport.embedded_broker import free_port
from tests.support.live import wait_for, write_config

REPO = Path(__file__).resolve().parents[2]
CASES_FILE = REPO / "clients" / "conformance" / "cases.json"
NOT_SOON_MS = 2**31 - 1  # the daemon's retry_after_ms for a zero rate; clients report unbounded waits so

Control = Callable[[str], Awaitable[None]]
Runner = Callable[[dict[str, Any], str, Control], Awaitable[dict[str, Any]]]

__all__ = ["CASES_FILE", "NOT_SOON_MS", "Control", "Harness", "Runner", "java_runner", "load_cases", "mismatches",
           "run_python_case"]


def load_cases() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(CASES_FILE.read_text())
    return doc


# -- the harness: daemon, setup, control, counting -----------------------------------------------

class Harness:
    """One daemon (from conftest's `make_daemon`) on a fixed port, so a case can stop it and
    start another on the same address. `seen` is the monkeypatched parser's log of asks per
    request (tests/integration/test_client.py counts the same way)."""

    def __init__(self, make_daemon: Callable[..., Awaitable[Any]], tmp_path: Path, seen: list[int],
                 settings: dict[str, Any]) -> None:
        self.make_daemon = make_daemon
        self.seen = seen
        self.settings = settings
        self.config = write_config(tmp_path / "conformance-groups.yaml", {})
        self.port = free_port()
        self.daemon: Any = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.starts += 1
        self.daemon = await self.make_daemon(f"conf{self.starts}", config=self.config,
                                             listen=f"127.0.0.1:{self.port}", **self.settings)

    async def stop(self) -> None:
        await self.daemon.stop()

    async def control(self, what: str) -> None:
        if what == "stop":
            await self.stop()
        elif what == "start":
            await self.start()
        else:
            raise AssertionError(f"runner asked for an unknown control {what!r}")

    async def setup(self, case: dict[str, Any]) -> None:
        """Groups and attachments through the admin API, then wait until the daemon resolves them."""
        setup = case.get("setup") or {}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            for name, body in (setup.get("groups") or {}).items():
                async with http.put(f"{self.url}/admin/v2/resourcegroups/{name}", json=body) as r:
                    assert r.status in (200, 204), f"{case['name']}: PUT group {name}: {r.status} {await r.text()}"
            attach = [(f"/admin/v2/tenants/{t}/resourcegroup/{g}", f"{t}/probe", g)
                      for t, g in (setup.get("tenants") or {}).items()]
            attach += [(f"/admin/v2/namespaces/{ns}/resourcegroup/{g}", ns, g)
                       for ns, g in (setup.get("namespaces") or {}).items()]
            for path, _, _ in attach:
                async with http.put(self.url + path) as r:
                    assert r.status in (200, 204), f"{case['name']}: PUT {path}: {r.status} {await r.text()}"
            for _, ns, group in attach:
                groups: dict[str, Any] = {}

                async def resolved(ns: str = ns, group: str = group, groups: dict[str, Any] = groups) -> bool:
                    async with http.get(f"{self.url}/v1/quota", params={"namespace": ns}) as r:
                        groups[ns] = (await r.json()).get("group")
                    return groups[ns] == group

                deadline = time.monotonic() + 10
                while not await resolved():
                    assert time.monotonic() < deadline, f"{case['name']}: {ns} never resolved to {group}: {groups}"
                    await asyncio.sleep(0.05)

    async def run(self, case: dict[str, Any], runner: Runner) -> tuple[dict[str, Any], list[int]]:
        """Set the case up, run it, and return the runner's result and the daemon's asks per request."""
        await self.setup(case)
        before = len(self.seen)
        url = self.url if case.get("daemon", "up") == "up" else f"http://127.0.0.1:{free_port()}"
        result = await asyncio.wait_for(runner(case, url, self.control), 120)
        if not self.daemon.started:  # the case stopped it and failed before starting it again
            await self.start()
        return result, self.seen[before:]


# -- the judge -----------------------------------------------------------------------------------

def _same(value: Any, spec: Any) -> bool:
    """`spec` is a literal (booleans and numbers never equal each other) or {"min", "max"}."""
    if isinstance(spec, dict) and set(spec) == {"min", "max"}:
        return type(value) is int and spec["min"] <= value <= spec["max"]
    if isinstance(spec, bool) or isinstance(value, bool):
        return type(value) is type(spec) and value == spec
    if isinstance(spec, int | float) and isinstance(value, int | float):
        return value == spec
    return bool(type(value) is type(spec) and value == spec)


def _subset(value: Any, spec: Any, where: str, out: list[str]) -> None:
    if isinstance(spec, dict) and set(spec) != {"min", "max"}:
        if not isinstance(value, dict):
            out.append(f"{where}: expected an object, got {value!r}")
            return
        for key, sub in spec.items():
            _subset(value.get(key), sub, f"{where}.{key}", out)
    elif not _same(value, spec):
        out.append(f"{where}: expected {spec!r}, got {value!r}")


def _answers_mismatch(answers: list[dict[str, Any]], expect: dict[str, Any], where: str) -> list[str]:
    out: list[str] = []
    for key, spec in expect.items():
        values = [a.get(key) for a in answers]
        if isinstance(spec, list):
            if len(spec) != len(values):
                out.append(f"{where}.{key}: expected {len(spec)} answers, got {len(values)}: {values!r}")
                continue
            specs = spec
        elif isinstance(spec, dict) and set(spec) == {"start", "step"}:
            specs = [spec["start"] + i * spec["step"] for i in range(len(values))]
        else:
            specs = [spec] * len(values)
        bad = [i for i, (v, s) in enumerate(zip(values, specs, strict=True)) if not _same(v, s)]
        if bad:
            i = bad[0]
            out.append(f"{where}.{key}: {len(bad)} of {len(values)} answers differ; first at [{i}]: expected "
                       f"{specs[i]!r}, got {values[i]!r}")
    return out


def mismatches(case: dict[str, Any], result: dict[str, Any], requests: list[int]) -> list[str]:
    """What differs between a runner's result and the case's expectations (empty: it conforms)."""
    name = case["name"]
    steps = result.get("steps")
    if result.get("case") != name or not isinstance(steps, list) or len(steps) != len(case["steps"]):
        return [f"{name}: the runner reported {json.dumps(result)[:500]}"]
    out: list[str] = []
    for i, (step, got) in enumerate(zip(case["steps"], steps, strict=True)):
        where = f"{name} step {i}"
        expect = step.get("expect")
        if expect is None:
            continue
        if "acquire" in step:
            answers = got.get("answers")
            asked = 1 if "until" in step else len(_asks(step))
            if not isinstance(answers, list) or len(answers) != asked:
                out.append(f"{where}: expected {asked} answers, got {got!r}"[:500])
                continue
            out += _answers_mismatch(answers, expect, where)
        elif "error" in expect:
            if got.get("error") != expect["error"]:
                out.append(f"{where}: expected error {expect['error']!r}, got {got!r}")
        else:
            key = "usage" if "usage" in step else "quota"
            if key not in got:
                out.append(f"{where}: expected a {key} answer, got {got!r}")
            else:
                _subset(got[key], expect, where, out)
    if "requests" in case and requests != case["requests"]:
        out.append(f"{name}: the daemon parsed asks per request {requests}, expected {case['requests']}")
    if "client_requests" in case and result.get("client_requests") != case["client_requests"]:
        out.append(f"{name}: the client sent {result.get('client_requests')} requests, expected "
                   f"{case['client_requests']}")
    return out


# -- the Python runner: rgd.client -----------------------------------------------------------------

def _asks(step: dict[str, Any]) -> list[dict[str, Any]]:
    asks = step["acquire"]
    asks = asks if isinstance(asks, list) else [asks]
    return [a for _ in range(step.get("count", 1)) for a in asks]


def _rate(pair: list[float | None]) -> tuple[float, float]:
    return (math.inf if pair[0] is None else pair[0], math.inf if pair[1] is None else pair[1])


def _python_client(url: str, options: dict[str, Any]) -> Any:
    from rgd.client import Client

    kw: dict[str, Any] = {}
    for key, name in (("window_ms", "window"), ("timeout_ms", "timeout"), ("unreachable_backoff_ms",
                                                                           "unreachable_backoff"),
                      ("max_hold_ms", "max_hold")):
        if key in options:
            kw[name] = options[key] / 1000
    for key in ("max_batch", "max_inflight", "connections", "on_unreachable"):
        if key in options:
            kw[key] = options[key]
    if "fallback_rate" in options:
        kw["fallback_rate"] = _rate(options["fallback_rate"])
    if "fallback_rates" in options:
        kw["fallback_rates"] = {(r["namespace"], r["kind"]): _rate(r["rate"]) for r in options["fallback_rates"]}
    return Client(url, **kw)


def _ms(seconds: float) -> int:
    if seconds == math.inf:
        return NOT_SOON_MS
    return min(NOT_SOON_MS, math.ceil(round(seconds * 1000, 6))) if seconds > 0 else 0


def _argument(exc: Exception) -> str:
    return str(exc).split(":", 1)[0]


async def run_python_case(case: dict[str, Any], url: str, control: Control) -> dict[str, Any]:
    from rgd.client import RgdRequestError, RgdUnreachableError

    client = _python_client(url, case.get("client") or {})

    async def ask(a: dict[str, Any]) -> dict[str, Any]:
        try:
            r = await client.acquire(a["namespace"], a.get("kind", "publish"), a.get("messages", 1),
                                     a.get("bytes", 0), a.get("topic"))
        except ValueError as exc:
            return {"error": _argument(exc)}
        return {"allowed": r.allowed, "source": r.source, "reason": r.reason, "group": r.group,
                "retry_after_ms": _ms(r.retry_after_s), "remaining_messages": r.remaining_messages,
                "remaining_bytes": r.remaining_bytes}

    async def call(step: dict[str, Any]) -> dict[str, Any]:
        try:
            if "usage" in step:
                u = step["usage"]
                got = await client.usage(u["namespace"], u.get("kind", "dispatch"), u.get("messages", 1),
                                         u.get("bytes", 0), u.get("topic"))
                return {"usage": {"recorded": got.recorded, "ungrouped": got.ungrouped}}
            q = await client.quota(step["quota"]["namespace"], step["quota"].get("topic"))
        except ValueError as exc:
            return {"error": _argument(exc)}
        except RgdUnreachableError:
            return {"error": "unreachable"}
        except RgdRequestError:
            return {"error": "request"}
        import msgspec

        doc = {k: v for k, v in msgspec.to_builtins(q).items() if v is not None or k == "group"}
        return {"quota": doc}

    steps: list[dict[str, Any]] = []
    try:
        for step in case["steps"]:
            if "sleep_ms" in step:
                await asyncio.sleep(step["sleep_ms"] / 1000)  # the case's timeline: time must pass
                steps.append({})
            elif "daemon" in step:
                await control(step["daemon"])
                steps.append({})
            elif "usage" in step or "quota" in step:
                steps.append(await call(step))
            elif "until" in step:
                deadline = time.monotonic() + step["within_ms"] / 1000
                while True:
                    answer = await ask(_asks(step)[0])
                    if all(answer.get(k) == v for k, v in step["until"].items()) or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(step["interval_ms"] / 1000)
                steps.append({"answers": [answer]})
            elif step.get("mode") == "concurrent":
                asks = _asks(step)
                tasks = []
                if step.get("first_alone"):
                    sent = client.stats.requests
                    tasks.append(asyncio.ensure_future(ask(asks[0])))
                    await wait_for(lambda sent=sent: client.stats.requests > sent, 5, 0)
                    asks = asks[1:]
                tasks += [asyncio.ensure_future(ask(a)) for a in asks]
                steps.append({"answers": list(await asyncio.gather(*tasks))})
            else:
                steps.append({"answers": [await ask(a) for a in _asks(step)]})
    finally:
        await client.close()
    return {"case": case["name"], "steps": steps, "client_requests": client.stats.requests}


# -- the Java runner: dev.rgd.client.conformance.ConformanceRunner in a JVM -------------------------

def java_runner(proc: asyncio.subprocess.Process) -> Runner:
    """A Runner that hands each case to a running ConformanceRunner process (see the protocol above)."""
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    async def run(case: dict[str, Any], url: str, control: Control) -> dict[str, Any]:
        stdin.write((json.dumps({"case": case, "url": url}) + "\n").encode())
        await stdin.drain()
        while True:
            line = await stdout.readline()
            if not line:
                raise AssertionError(f"{case['name']}: the Java runner exited ({await proc.wait()})")
            msg = json.loads(line)
            if "control" in msg:
                await control(msg["control"])
                stdin.write(b'{"ok": true}\n')
                await stdin.drain()
            elif "result" in msg:
                result: dict[str, Any] = msg["result"]
                return result
            else:
                raise AssertionError(f"{case['name']}: the Java runner said {line[:300]!r}")

    return run
