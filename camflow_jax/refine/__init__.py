"""Test-time photometric refinement in the span of the motion bases (docs/refinement.md).

* :mod:`.config`: :class:`RefineConfig`, the settings, and the basis-group schedule;
* :mod:`.pyramid`: normalised images, their pyramids and the bases per level;
* :mod:`.solver`: the robust Levenberg-Marquardt solve (:func:`refine_motion`,
  :func:`refine_with_pyramids`, :func:`refine_pair`);
* :mod:`.inliers`: how much of a pair each candidate motion explains (:func:`inlier_shares`,
  :func:`dominant_homography`: the dominant motion where two compete; :func:`inlier_weights`,
  :func:`homography_weights`: per pixel; :func:`robust_costs`: the refinement's objective on one
  scale, which tells two estimates of one motion apart; :func:`judge_flows`: both measures);
* :mod:`.pairs`: :class:`PairRefiner`, one pair as the Predictor refines it (working size,
  detail level, starts, both directions).

Their public names are re-exported here: ``from camflow_jax import refine; refine.refine_pair``.
"""

from camflow_jax.refine import config as _config
from camflow_jax.refine import inliers as _inliers
from camflow_jax.refine import pairs as _pairs
from camflow_jax.refine import pyramid as _pyramid
from camflow_jax.refine import solver as _solver
from camflow_jax.refine.config import *  # noqa: F401,F403
from camflow_jax.refine.inliers import *  # noqa: F401,F403
from camflow_jax.refine.pairs import *  # noqa: F401,F403
from camflow_jax.refine.pyramid import *  # noqa: F401,F403
from camflow_jax.refine.solver import *  # noqa: F401,F403

__all__ = [*_config.__all__, *_pyramid.__all__, *_solver.__all__, *_inliers.__all__, *_pairs.__all__]
