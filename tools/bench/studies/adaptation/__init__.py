"""Studies behind docs/adaptation.md (see :mod:`tools.bench.studies`)."""
