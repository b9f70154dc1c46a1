"""rgd: cluster-wide rate limits ("resource groups", Pulsar PIP-82) enforced by one daemon per node."""

__version__ = "0.1.0"
