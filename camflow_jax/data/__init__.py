"""Data: the dataset registry for training and evaluation (:mod:`.datasets`), the training
sources (:mod:`.sources`), the grain input pipeline (:mod:`.pipeline`), the benchmark readers
(:mod:`.benchmarks`), depth reading (:mod:`.depth`; images are read by
:mod:`camflow_jax.io.images`) and the synthetic
parallax scenes (:mod:`.synthetic`). Everything here that runs in input-pipeline workers is
numpy/OpenCV, never JAX."""
