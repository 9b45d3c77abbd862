"""Compile once per machine (docs/performance.md, "Compile once").

A fresh process used to spend almost all of a short run tracing and compiling the same
programs again. What it compiled is now kept in a per-user cache folder
(:func:`cache.cache_root`: ``$CAMFLOW_JAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/camflow_jax`` or
``~/.cache/camflow_jax``; ``CAMFLOW_JAX_NO_CACHE=1`` turns all of it off):

* :mod:`.cache`: JAX's persistent compilation cache in ``<root>/jax`` (:func:`cache.enable`,
  which never overrides the user's own ``JAX_COMPILATION_CACHE_DIR``), with atomic writes and
  at most one warning line when the folder cannot be written;
* :mod:`.store`: files keyed by what they were made from, checked when read, written atomically
  (``<root>/<kind>/``), for the two below;
* :mod:`.exported`: :class:`~.exported.ExportedJit`, a ``jax.jit`` whose traced programs are
  kept as serialized ``jax.export`` artifacts, so a fresh process skips tracing and lowering
  (the Predictor's forward and the refinement's jitted pieces);
* the static bases a model config describes (``models.basis_set.static_bases``) are kept too.

Everything here sits below the models in the layers (it imports only ``io`` and JAX); the
command lines, the Predictor and the trainer call :func:`cache.enable`.
"""
