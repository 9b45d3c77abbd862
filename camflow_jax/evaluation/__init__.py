"""Evaluation as a library (docs/evaluation.md); the command line ``python -m camflow_jax.evaluate``
only parses arguments and prints.

Modules (imported on use; importing the package loads nothing):

* :mod:`.metrics`: EPE, PME, PSNR, SSIM and per-category tables;
* :mod:`.protocols`: metrics per dataset, per-sample scoring, published zero-flow rows;
* :mod:`.methods`: table rows from the estimator registry (:mod:`camflow_jax.estimators.registry`)
  and the evaluation-only oracles;
* :mod:`.benchmark`: :func:`.benchmark.evaluate`, one benchmark run;
* :mod:`.reports`: tables (text, markdown, CSV) and JSON files.

The datasets are in :mod:`camflow_jax.data.datasets`; the real-image studies and the ablation are
experiments (:mod:`tools.bench`).
"""
