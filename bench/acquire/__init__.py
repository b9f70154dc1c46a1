"""The pieces of bench/bench_acquire.py, one job per module.

cases (what is asked and what a case must answer), servers (starting,
measuring and stopping the servers under test), loadgen (wrk or the Python
fallback, one summary format), ratios (every comparison of two figures),
report (the printed tables and the machine description). bench_acquire.py
itself only parses the command line and runs the cases in order.

A package beside the script, not part of rgd: the benchmark's helpers are no
use to the daemon, and bench/bench_batch.py reuses them through
bench_acquire's names.
"""

__all__: list[str] = []
