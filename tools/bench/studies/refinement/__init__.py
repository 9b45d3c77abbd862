"""Studies behind docs/refinement*.md (see :mod:`tools.bench.studies`)."""
