"""Evaluation as a library (docs/evaluation.md, docs/real_images.md); the command lines
``python -m camflow_jax.evaluate``, ``tools/eval_real.py`` and ``tools/basis_ablation.py`` only parse
arguments and print.

Modules (imported on use; importing the package loads nothing):

* :mod:`.datasets`: the dataset registry and loaders (benchmarks, synthetic held-out set,
  the opencv-doc real images);
* :mod:`.protocols`: metrics per dataset, per-sample scoring, published zero-flow rows;
* :mod:`.methods`: table rows from the estimator registry (:mod:`camflow_jax.estimators.registry`) and
  the evaluation-only oracles;
* :mod:`.benchmark`: :func:`.benchmark.evaluate`, one benchmark run;
* :mod:`.reports`: tables (text, markdown, CSV) and JSON files;
* :mod:`.real`: the real-image experiments (Aloe stereo, vtest.avi video);
* :mod:`.ablation`: the basis-count ablation (train the variants, evaluate them side by side).
"""
