"""The rgd cluster simulator: `python -m sim` (see sim/README.md)."""
