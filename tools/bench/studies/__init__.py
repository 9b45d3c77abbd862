"""One-off studies behind single numbers of the docs (which refinement start wins, the
plausibility thresholds, what fills a failed stabilizer pair). Each runs as a module from the
repository root, e.g. ``python -m tools.bench.studies.refinement.starts 30 OUT.json``; the
module's docstring gives its usage and the page that reports it."""
