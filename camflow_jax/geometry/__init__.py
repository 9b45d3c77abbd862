"""Geometry: the pure functions everything else is built on.

* :mod:`.device`: JAX pixel grids, homographies, bilinear warping, flow composition, resizing and
  intrinsics updates (jit/vmap-friendly). Its public functions are re-exported here, so
  ``from camflow_jax import geometry; geometry.warp(...)`` works.
* :mod:`.host`: the same warp, homography flow and flow resizing in numpy/OpenCV for host code
  (input pipelines, the stabilizer, the command lines).
* :mod:`.checks`: checks of intrinsics, depth maps, flows and homographies (numpy).
* :mod:`.classical`: the OpenCV estimators (SIFT/ORB with RANSAC/MAGSAC, DIS, ECC).
"""

from camflow_jax.geometry.device import *  # noqa: F401,F403
from camflow_jax.geometry.device import __all__  # noqa: F401
