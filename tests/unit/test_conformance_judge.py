"""The conformance judge (tests/support/conformance.py) on literal results, and the shape of
clients/conformance/cases.json: a judge that cannot fail, or a case whose expectation has a
misspelt key, would let a client pass without being checked."""

from __future__ import annotations

import copy

from tests.support.conformance import load_cases, mismatches

CASE = {
    "name": "c",
    "steps": [
        {"acquire": {"namespace": "t/a"}, "count": 3,
         "expect": {"allowed": [True, True, False], "source": "daemon", "remaining_messages": {"start": 9, "step": -1},
                    "retry_after_ms": [0, 0, {"min": 1, "max": 400}]}},
        {"sleep_ms": 10},
        {"usage": {"namespace": "t/a"}, "expect": {"recorded": 1, "ungrouped": 0}},
        {"quota": {"namespace": "t/a"}, "expect": {"group": "g", "publish": {"local": {"messages_per_second": 5.0}}}},
        {"quota": {"namespace": "t"}, "expect": {"error": "namespace"}},
    ],
    "requests": [3, 1],
    "client_requests": 1,
}


def _answer(allowed: bool, remaining: int | None, retry: int) -> dict:
    return {"allowed": allowed, "source": "daemon", "reason": None, "group": "g", "retry_after_ms": retry,
            "remaining_messages": remaining, "remaining_bytes": None}


RESULT = {
    "case": "c",
    "steps": [
        {"answers": [_answer(True, 9, 0), _answer(True, 8, 0), _answer(False, 7, 250)]},
        {},
        {"usage": {"recorded": 1, "ungrouped": 0}},
        {"quota": {"namespace": "t/a", "group": "g", "unlimited": False,
                   "publish": {"local": {"messages_per_second": 5.0, "bytes_per_second": None}}}},
        {"error": "namespace"},
    ],
    "client_requests": 1,
}


def test_a_conforming_result_passes():
    assert mismatches(CASE, RESULT, [3, 1]) == []


def _broken(path: list, value) -> dict:
    result = copy.deepcopy(RESULT)
    target = result
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return result


def test_every_deviation_is_reported():
    cases = [
        (["steps", 0, "answers", 2, "allowed"], True, "step 0.allowed"),
        (["steps", 0, "answers", 1, "allowed"], 1, "step 0.allowed"),  # 1 is not true
        (["steps", 0, "answers", 0, "source"], "fallback", "step 0.source"),
        (["steps", 0, "answers", 1, "remaining_messages"], 9, "step 0.remaining_messages"),
        (["steps", 0, "answers", 2, "retry_after_ms"], 401, "step 0.retry_after_ms"),
        (["steps", 0, "answers", 2, "retry_after_ms"], 0, "step 0.retry_after_ms"),
        (["steps", 0, "answers"], [_answer(True, 9, 0)], "expected 3 answers"),
        (["steps", 2, "usage", "recorded"], 0, "step 2.recorded"),
        (["steps", 3, "quota", "publish", "local", "messages_per_second"], None, "step 3.publish.local"),
        (["steps", 3], {"error": "unreachable"}, "expected a quota answer"),
        (["steps", 4], {"quota": {}}, "expected error 'namespace'"),
        (["client_requests"], 2, "the client sent 2 requests"),
        (["case"], "other", "the runner reported"),
        (["steps"], [], "the runner reported"),
    ]
    for path, value, message in cases:
        found = mismatches(CASE, _broken(path, value), [3, 1])
        assert len(found) == 1 and message in found[0], (path, value, found)
    assert mismatches(CASE, RESULT, [1, 1, 1, 1]) == [
        "c: the daemon parsed asks per request [1, 1, 1, 1], expected [3, 1]"]


STEP_KEYS = {"acquire", "count", "mode", "first_alone", "expect", "until", "within_ms", "interval_ms", "sleep_ms",
             "daemon", "usage", "quota"}
ANSWER_KEYS = {"allowed", "source", "reason", "group", "retry_after_ms", "remaining_messages", "remaining_bytes",
               "error"}
CLIENT_KEYS = {"window_ms", "max_batch", "timeout_ms", "connections", "max_inflight", "on_unreachable",
               "fallback_rate", "fallback_rates", "unreachable_backoff_ms", "max_hold_ms"}


def test_the_list_is_well_formed():
    doc = load_cases()
    names = [c["name"] for c in doc["cases"]]
    assert len(names) == len(set(names)) >= 20
    for case in doc["cases"]:
        assert set(case) <= {"name", "doc", "daemon", "setup", "client", "steps", "requests", "client_requests"}, case
        assert case.get("daemon", "up") in ("up", "down")
        assert set(case.get("client") or {}) <= CLIENT_KEYS, case["name"]
        assert set(case.get("setup") or {}) <= {"groups", "tenants", "namespaces"}, case["name"]
        for step in case["steps"]:
            assert set(step) <= STEP_KEYS, (case["name"], step)
            kinds = {"acquire", "sleep_ms", "daemon", "usage", "quota"} & set(step)
            assert len(kinds) == 1, (case["name"], step)
            if "acquire" in step and "expect" in step:
                assert set(step["expect"]) <= ANSWER_KEYS, (case["name"], step["expect"])
            if "daemon" in step:
                assert step["daemon"] in ("stop", "start") and case.get("daemon", "up") == "up"
        checks = sum(len(s.get("expect") or {}) for s in case["steps"]) + ("requests" in case)
        assert checks > 0, f"{case['name']} checks nothing"


def test_a_case_that_counts_the_requests_of_concurrent_asks_gives_them_a_window_a_loaded_machine_keeps():
    """Concurrent asks share a request only if they all come within one window. The Java runner
    makes them one after another from one thread, and on a loaded machine (JIT, GC, two cores)
    that can take longer than the 0.5 ms default, so a case that counts requests after concurrent
    asks sets a long window or sends its first ask alone."""
    for case in load_cases()["cases"]:
        concurrent = [s for s in case["steps"] if s.get("mode") == "concurrent"]
        if not concurrent or not ({"requests", "client_requests"} & set(case)):
            continue
        window = (case.get("client") or {}).get("window_ms")
        ok = (window is not None and window >= 100) or all(s.get("first_alone") for s in concurrent)
        assert ok, f"{case['name']}: counts requests of concurrent asks in a window of {window} ms"
