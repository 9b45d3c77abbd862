"""camflow_jax: CamFlow+ camera-motion estimation with hybrid motion bases, in JAX/Flax.

Importing the package has no side effects (no device queries, no downloads, no JAX): the
supported names below are imported on first use (a module-level ``__getattr__``, as dm_pix and
optax do), and submodules are imported explicitly as before: ``from camflow_jax import bases,
geometry``.

* :class:`Predictor`: the shipped (or a trained) model on image pairs
  (``Predictor.from_pretrained()``);
* :class:`RefineConfig`: the test-time refinement's settings;
* :class:`SyntheticScenes`: the synthetic parallax pairs (training and the held-out benchmark);
* :mod:`bases`: the motion bases (homography, stochastic, depth-translational);
* :func:`load_model`: a training workdir or an inference checkpoint, read back.
"""

import importlib

__version__ = "0.1.0"

#: Supported name -> (module, attribute; None: the module itself).
_PUBLIC = {
    "Predictor": ("camflow_jax.predictor", "Predictor"),
    "RefineConfig": ("camflow_jax.refine", "RefineConfig"),
    "SyntheticScenes": ("camflow_jax.data.synthetic.scenes", "SyntheticScenes"),
    "bases": ("camflow_jax.bases", None),
    "load_model": ("camflow_jax.models.checkpoint", "load_model"),
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'camflow_jax' has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    value = importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value  # the next look-up is an ordinary attribute
    return value


def __dir__():
    return sorted({*globals(), *_PUBLIC})
