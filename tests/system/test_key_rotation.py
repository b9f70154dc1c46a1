"""Rotating the report-signing key with live daemons, as the README's three steps do it.

Three signed `rgd run` processes on the session's broker; each step (1. add the new
key second, 2. move it first, 3. drop the old one) restarts the daemons one at a
time with the step's keys file, as `kubectl rollout restart` does. Mid-rollout,
daemons on adjacent steps must hear each other: no report is rejected anywhere, on
any daemon, at any point, and every daemon keeps the two others in its map. A
restart with a key nobody else has (a botched rotation) is the negative control:
its reports are rejected as bad signatures.
"""

from __future__ import annotations

from tests.support.cluster_harness import Cluster, wait_until

OLD = "k1:old-secret-0123456789abcdef"
NEW = "k2:new-secret-0123456789abcdef"
IDS = ("d1", "d2", "d3")


def _rejected(c: Cluster, daemon_id: str) -> float:
    return c.metric(daemon_id, "rgd_reports_rejected_total")


def _members(c: Cluster, daemon_id: str) -> set[str]:
    _, doc = c.daemons[daemon_id].get_json("/readyz")
    return set(doc["members"])


def _restart(c: Cluster, daemon_id: str, keys_file) -> None:
    c.daemons[daemon_id].stop()
    c.extra = ["--report-hmac-keys-file", str(keys_file)]
    c.start(daemon_id)


def _all_hear_each_other(c: Cluster) -> bool:
    return all(_members(c, d) == set(IDS) for d in IDS)


def test_rotation_in_three_rolling_steps_rejects_no_report(broker, tmp_path):
    files = {}
    for name, text in {"install": OLD, "step1": f"{OLD}\n{NEW}", "step2": f"{NEW}\n{OLD}", "step3": NEW,
                       "stray": "k9:somebody-elses-secret-0123"}.items():
        files[name] = tmp_path / name
        files[name].write_text(text + "\n")
    c = Cluster(broker.url, tmp_path, quota=300, tick=0.5)
    try:
        c.extra = ["--report-hmac-keys-file", str(files["install"])]
        for d in IDS:
            c.start(d, wait=False)
        for d in IDS:
            c.daemons[d].wait_ready()
        wait_until(lambda: _all_hear_each_other(c), 10)
        for step in ("step1", "step2", "step3"):
            for d in IDS:
                _restart(c, d, files[step])
                # The restarted daemon and the others (some still on the previous step)
                # hear each other, and nobody has rejected anything.
                wait_until(lambda: _all_hear_each_other(c), 10)
                c.daemons[d].get_json("/readyz")
                counts = {x: _rejected(c, x) for x in IDS}
                assert counts == {x: 0.0 for x in IDS}, f"{step}, after restarting {d}: {counts}"
                assert all(c.metric(x, "rgd_reports_received_total") > 0 for x in IDS)
        # Negative control: a daemon restarted with a key nobody has is rejected by the others.
        _restart(c, "d3", files["stray"])
        wait_until(lambda: c.metric("d1", "rgd_reports_rejected_total", reason="bad_signature") >= 2, 10)
        assert c.metric("d3", "rgd_reports_rejected_total", reason="bad_signature") >= 2
    finally:
        c.stop_all()
