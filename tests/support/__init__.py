"""Code the tests share, importable from every tier as `tests.support.<module>`.

- fake_clock: a clock the test moves by hand, for the pure core (tests/unit);
- live: writing a groups file, a daemon's URL and polling with a deadline (`wait_for`);
- cluster_harness: a cluster of real `rgd run` processes on the session's broker;
- spark_standalone: a Spark standalone cluster for the report's tests;
- lexmaxmin_lp: an LP that computes lexicographic max-min allocations, an oracle
  independent of rgd.quota;
- pulsar_metrics: the groups file and /metrics scrape of the --pulsar-metrics tests;
- netns: a network namespace joined by veth pairs, cut and healed on demand (partitions;
  needs root and iproute2).

The fixtures (the session's broker, `make_daemon`, ...) are in tests/conftest.py, which
pytest loads for every tier.
"""
