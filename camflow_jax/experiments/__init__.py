"""Experiments: measurements the docs report, kept out of the library they measure. They call the
library's public functions; the library never imports them. Run through ``tools/``
(``tools/benchmark.py``, ``tools/eval_real.py``, ``tools/basis_ablation.py``, ...).

* :mod:`.benchmarking`: speed, FLOPs and memory of inference, the train step and the refinement;
* :mod:`.accel`: accelerator readiness without one (``jax.export`` for cuda/tpu, rooflines);
* :mod:`.real`: the real-image studies (Aloe stereo, vtest.avi);
* :mod:`.ablation`: the basis-count ablation;
* :mod:`.figures`: figures for the docs;
* :mod:`.stabilization` and :mod:`.metric_clips`: the stabilizer's estimator comparison and the
  clips that validate its metrics.
"""
