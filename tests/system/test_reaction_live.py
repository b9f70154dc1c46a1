"""How fast real daemons meet a change, on the session's pulsar-lite broker (real processes,
real HTTP): the first second of a new group, and `rgd up`'s rotating load. The measuring
code is scripts/reaction_probe.py's (its own water-filling for the fair shares); figures
are printed (`pytest -s`)."""

from __future__ import annotations

import asyncio
import threading

import pytest
import yaml

from tests.support.cluster_harness import LAYOUTS, Cluster, wait_until
from tests.support.scripts import load_script

pytestmark = pytest.mark.timing

probe = load_script("reaction_probe")


class DelayWatch:
    """Polls every daemon's rgd_round_trip_seconds (a report out -> a peer's acknowledgement
    back) in a thread while the load runs and keeps the largest value seen."""

    def __init__(self, c: Cluster, interval: float = 0.5) -> None:
        self.worst = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(c, interval), daemon=True)
        self._thread.start()

    def _run(self, c: Cluster, interval: float) -> None:
        while not self._done.wait(interval):
            for name in list(c.daemons):
                try:
                    self.worst = max(self.worst, c.metric(name, "rgd_round_trip_seconds"))
                except OSError:
                    pass  # a slow /metrics answer: the next poll reads it

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=10)


def test_fair_shares_of_the_probe_match_hand_computed_splits() -> None:
    assert probe.fair_shares(300, [216, 108, 36]) == pytest.approx([156, 108, 36])
    assert probe.fair_shares(300, [288, 36, 36]) == pytest.approx([228, 36, 36])
    assert probe.fair_shares(300, [50, 60, 70]) == [50, 60, 70]


@pytest.fixture
def cluster(broker, tmp_path, request):
    """One daemon's cluster; one process unless a test asks for another layout (indirect
    parametrization with `LAYOUTS`' flags)."""
    c = Cluster(broker.url, tmp_path, quota=100, extra=list(getattr(request, "param", [])))
    yield c
    c.stop_all()


def settle(c: Cluster, ticks: int = 2) -> None:
    """Every daemon lists every other as a member (its /readyz) and has run `ticks` more ticks:
    with 2, it has listened to the topic for at least a whole tick since (polled, not slept)."""
    everyone = set(c.daemons)
    wait_until(lambda: all(set(d.get_json("/readyz")[1].get("members", ())) == everyone
                           for d in c.daemons.values()), 15)
    c.wait_ticks(ticks)


def start_three(c: Cluster) -> None:
    """d1..d3 started together (not one after another) and settled: each has heard the others."""
    for name in ("d1", "d2", "d3"):
        c.start(name, wait=False)
    for name in ("d1", "d2", "d3"):
        c.daemons[name].wait_ready()
    settle(c, 3)  # each has heard the others, then at least two whole ticks


@pytest.mark.parametrize("cluster", LAYOUTS.values(), ids=LAYOUTS.keys(), indirect=True)
def test_a_lone_daemon_admits_the_new_groups_quota_in_its_first_second(cluster):
    d = cluster.start("d1")
    settle(cluster)
    counts = probe.Counts()
    asyncio.run(probe.run_load([(d.url, ("d1", "gold"), "acme/x", lambda _t: 200.0)], 1.5, counts))
    first = probe.first_second(counts, [("d1", "gold")])
    print(f"\nlone daemon, new 100 msg/s group offered 200 msg/s: {first} msgs in the first second")
    assert 90 <= first <= 106  # the whole quota at once, plus the new bucket's 0.05 s


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_a_new_group_with_even_demand_is_mostly_used_in_its_first_second(broker, tmp_path, layout):
    c = Cluster(broker.url, tmp_path, quota=300, extra=list(layout))
    try:
        start_three(c)
        counts = probe.Counts()
        streams = [(d.url, (n, "gold"), f"acme/{n}", lambda _t: 120.0) for n, d in c.daemons.items()]
        asyncio.run(probe.run_load(streams, 1.5, counts))
        used = probe.first_second(counts, [(n, "gold") for n in c.daemons]) / 300
        print(f"\n3 daemons, new 300 msg/s group, 120 msg/s on each: {100 * used:.1f} % used in the first second")
        # Once the 2 % floor (about 10 % used), then 75-88 %: when the first report arrived,
        # every daemon whose own report peers had not folded yet fell to the floor for about a
        # react interval plus the delivery delay. Now each reports the rise at its next react
        # and takes its share once every peer acknowledged that report, a round trip later
        # (docs/design/protocol.md).
        assert 0.90 <= used <= 1.06
    finally:
        c.stop_all()


def test_rgd_ups_rotating_load_follows_each_shift_without_exceeding_the_quota(broker, tmp_path):
    c = Cluster(broker.url, tmp_path, quota=300)
    doc = yaml.safe_load(c.config.read_text())
    doc["resourcegroups"] = {g: {"publishRateInMsgs": probe.ROTATING_QUOTA} for g in probe.GROUPS}
    doc["tenants"] = {g: g for g in probe.GROUPS}
    c.config.write_text(yaml.safe_dump(doc))
    seconds = 25.0
    try:
        start_three(c)
        names = list(c.daemons)
        counts = probe.Counts()
        streams = []
        for gi, group in enumerate(probe.GROUPS):
            for di, (name, d) in enumerate(c.daemons.items()):
                def rate(t: float, di: int = di, gi: int = gi) -> float:
                    weights = probe.demand_weights(len(names), int(t // probe.PHASE_SECONDS), gi)
                    return 1.2 * probe.ROTATING_QUOTA * weights[di]
                streams.append((d.url, (name, group), f"{group}/x", rate))
        delays = DelayWatch(c)
        try:
            asyncio.run(probe.run_load(streams, seconds, counts))
        finally:
            delays.stop()
        rot = probe.rotating_figures(counts, names, seconds)
        for s in rot["shifts"]:
            print(f"\nshift at {s['at_s']:.0f}s {s['group']}: fair {s['fair']} admitted/s over [+0.5, +1) "
                  f"{s['admitted_rate_0.5_to_1s']} within 10 %: {s['within_10pct_at_0.5_to_1s']}; "
                  f"settled after {s['settled_after_s']} s")
        print(f"worst 1-second window: {rot['worst_window_over_quota_pct']:+.1f} % against the quota "
              f"(asks sent and answered inside it; by send time alone "
              f"{rot['worst_sent_window_over_quota_pct']:+.1f} %)")
        # The bound: no 1-second window over 105 % of the quota. Counted by send time
        # alone, a window on a loaded 2-core CI machine once read +5.3 % (a stalled daemon
        # answered a backlog at once); asks surely decided inside the window do not have that
        # latency in them.
        assert rot["worst_window_over_quota_pct"] <= 5.0
        # A daemon grants itself an increase once every peer has acknowledged the report
        # announcing it (docs/design/protocol.md, P2), so a shift settles a round trip after
        # the report (rgd_round_trip_seconds): on a loaded CI machine a delivery once took
        # seconds, and a shift then settled 3.35 s late. So the 2-second window judged starts
        # a second after the shift plus the largest round trip any daemon measured during
        # the run (at most 2 s: beyond that, fail).
        delay = min(2.0, delays.worst)
        print(f"largest round trip measured: {delays.worst:.2f} s")
        for s in rot["shifts"]:
            keys = [(n, s["group"]) for n in names]
            start = s["at_s"] + 1.0 + delay
            later = [counts.admitted_in(k, start, start + 2.0) / 2.0 for k in keys]
            assert all(abs(r - f) <= 0.10 * f for r, f in zip(later, s["fair"])), (s, later, delays.worst)
    finally:
        c.stop_all()
