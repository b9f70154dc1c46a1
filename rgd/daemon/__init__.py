"""The daemon: the wiring of every layer below, and the processes it runs in.

- wiring.py: `Daemon`, the tick, react and receive loops joining the cluster node, the
  Pulsar session, the usage log, the config sources and the HTTP API;
- lifecycle.py: the event loop, logging and the bounded graceful stop of an rgd process;
- serving_process.py, cluster_process.py, limiter_link.py, process_link.py:
  `--cluster-process` / `--cluster-thread`, brokers answered by one process (or thread)
  while a second does the cluster work;
- gc_pacing.py, malloc_tuning.py: the process's memory behaviour at large configs.
"""
