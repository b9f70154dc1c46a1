"""The cluster logic, pure (time and I/O at the caller): one daemon's part in the cluster.

`node.py`'s `ClusterNode` is the whole of it, driven by the daemon's tick and by each
report that arrives: it folds peers' reports into the usage map (`usage_map.py`, kept by
`map_keeper.py`), builds this daemon's usage report (`report_builder.py`, left out per
group by `suppression.py`, encoded by `report_codec.py`), measures how late reports
arrive (`delivery_delay.py`) and has the quota calculator (rgd.quota) set the limiter's
limits. The simulator drives the same class on its own clock.
"""
