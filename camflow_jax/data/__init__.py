"""Data: the dataset registry for training and evaluation (:mod:`.datasets`), the training
sources (:mod:`.sources`), the grain input pipeline (:mod:`.pipeline`), the benchmark readers
(:mod:`.benchmarks`), image and depth reading (:mod:`.images`, :mod:`.depth`) and the synthetic
parallax scenes (:mod:`.synthetic`). Everything here that runs in input-pipeline workers is
numpy/OpenCV, never JAX."""
