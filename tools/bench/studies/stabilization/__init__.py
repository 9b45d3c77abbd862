"""Studies behind docs/stabilization*.md (see :mod:`tools.bench.studies`)."""
