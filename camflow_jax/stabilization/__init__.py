"""Video stabilization with swappable camera-motion estimators (SteadyFlow-style; docs/design.md, "Stabilization").

Modules: ``estimators`` (motion estimators behind one interface), ``profiles`` (motion
profiles and their smoothing), ``render`` (inverse warping, crop/zoom), ``pipeline`` (the
two-pass streaming pipeline), ``motion_file`` (exported and edited camera paths), ``fingerprint`` (the video a
motion file was measured on), ``metrics``
(cropping, distortion, stability), ``clips`` (synthetic shaky clips with ground truth),
``plots`` (figures and the KLT point tracker), ``runner`` (the file-level driver of the CLI).
Video and frame-folder streams are :mod:`camflow_jax.io.video`; the estimator comparison on
generated clips is :mod:`tools.bench.stabilization`. The CLI is ``python -m
camflow_jax.stabilize``.

Nothing is imported eagerly: ``from camflow_jax.stabilization import pipeline``.
"""
