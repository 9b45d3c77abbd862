"""Geometry: the pure functions everything else is built on.

* :mod:`.device`: JAX pixel grids, homographies, bilinear warping, flow composition, resizing and
  intrinsics updates (jit/vmap-friendly). Its public functions are re-exported here, so
  ``from camflow_jax import geometry; geometry.warp(...)`` works; :mod:`.device` (and JAX) is
  imported on the first such use, so host code that imports :mod:`.host` or :mod:`.classical`
  (the stabilizer, the input pipelines) does not import JAX.
* :mod:`.host`: the same warp, homography flow and flow resizing in numpy/OpenCV for host code
  (input pipelines, the stabilizer, the command lines).
* :mod:`.checks`: checks of intrinsics, depth maps, flows and homographies (numpy).
* :mod:`.classical`: the OpenCV estimators (SIFT/ORB with RANSAC/MAGSAC, DIS, ECC).
* :mod:`.background`: the background's motion where a foreground object moves against it
  (tracks seeded by a dense flow, a two-motion RANSAC), for the stabilizer's camflow.
* :mod:`.photometric`: exposure differences between two images and matching one to the other (numpy).
* :mod:`.plausibility`: whether an estimated motion explains the pair at all (the checks the
  estimators and the :class:`~camflow_jax.predictor.Predictor` report).
"""

import importlib


def _device():
    return importlib.import_module("camflow_jax.geometry.device")


_SUBMODULES = ("device", "host", "checks", "classical", "background", "photometric", "plausibility")


def __getattr__(name: str):
    if name in _SUBMODULES:  # ``from camflow_jax.geometry import host`` asks before importing it
        return importlib.import_module(f"camflow_jax.geometry.{name}")
    if name == "__all__" or not name.startswith("__"):
        try:
            return getattr(_device(), name)
        except AttributeError:
            pass
    raise AttributeError(f"module 'camflow_jax.geometry' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_device().__all__))
