"""Tools for trying rgd on one machine, not part of a deployed daemon: `rgd up`'s showcase
(`showcase.py`), the synthetic broker load it drives through rgd.client
(`load_generator.py`), and an `rgd run` as a child process (`daemon_process.py`, also used
by the tests and benchmarks)."""
