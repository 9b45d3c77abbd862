"""Studies behind docs/network.md (see :mod:`tools.bench.studies`)."""
