"""Studies behind docs/plausibility*.md (see :mod:`tools.bench.studies`)."""
