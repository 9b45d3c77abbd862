"""The measurements the docs report, outside the installed package (setup.cfg installs
``camflow_jax*`` only). They call the library's public functions; the library never imports them.

* :mod:`.timing`: the one timing core every mode records the machine, the load and its timings
  with;
* :mod:`.benchmarking`: speed, FLOPs and memory of inference, the train step and the refinement;
* :mod:`.accel`: accelerator readiness without one (``jax.export`` for cuda/tpu, rooflines);
* :mod:`.accelerator_check`: the accelerator check's steps (``python tools/accelerator_check.py``);
* :mod:`.architecture`: the package's shape (import graph, sizes, a config's walk);
* :mod:`.real`: the real-image studies (Aloe stereo, vtest.avi);
* :mod:`.ablation`: the basis-count ablation;
* :mod:`.figures`: figures for the docs;
* :mod:`.precision`: the network's precision policies compared;
* :mod:`.stabilization`, :mod:`.stabilization_time` and :mod:`.metric_clips`: the stabilizer's
  estimator comparison, its wall time against vid.stab, and the clips that validate its metrics.

Importing this package imports nothing else.
"""
