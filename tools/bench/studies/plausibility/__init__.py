"""Studies behind the plausibility checks and the exposure compensation (docs/estimation.md,
"Plausibility checks"; see :mod:`tools.bench.studies`). The exposure, blur and zoom studies share
a scratch folder (``--work``) that :mod:`.render_benchmark` fills first."""
