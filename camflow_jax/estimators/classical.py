"""The classical estimators (no model): the identity, feature matches (SIFT, ORB) and corner
tracks (KLT) with a robust homography fit, OpenCV's ECC homography and DIS dense flow.

Registered by name in :mod:`.registry` (``identity``, ``sift_ransac``, ..., ``ecc``, ``dis``);
the image work is :mod:`camflow_jax.geometry.classical`'s.
"""

from __future__ import annotations

import numpy as np

from camflow_jax.estimators.base import Estimator, Motion, identity_motion
from camflow_jax.geometry import classical, host

__all__ = ["Identity", "HomographyEstimator", "Feature", "KLT", "ECC", "DIS"]


class Identity(Estimator):
    """Zero motion (a control): a reference, so the plausibility checks do not apply."""

    checked = False

    def __init__(self, forward_only: bool = False):
        pass

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        return identity_motion(*a.shape[:2])


class HomographyEstimator(Estimator):
    """Shared tail of the homography methods: flows of H and H^-1, identity on failure."""

    def __init__(self, forward_only: bool = False):
        self.forward_only = forward_only

    def _motion(self, H, h: int, w: int, failure: str, note: str = "") -> Motion:
        if H is None:
            return identity_motion(h, w, f"identity fallback: {failure}", fallback=True)
        flow_b = None if self.forward_only else host.homography_flow(np.linalg.inv(H), h, w)
        return Motion(host.homography_flow(H, h, w), flow_b, np.asarray(H, np.float64), note=note)


class Feature(HomographyEstimator):
    """Feature matches (``detector`` 'sift' or 'orb', ratio test) and a ``robust`` homography fit."""

    def __init__(self, detector: str, robust: str, *, ratio: float = 0.7, threshold: float = 3.0,
                 min_matches: int = 10, max_features: int = 4000, stretch: bool = False,
                 forward_only: bool = False):
        super().__init__(forward_only)
        self.detector, self.robust = detector, robust
        self.options = {"ratio": ratio, "threshold": threshold, "min_matches": min_matches,
                        "max_features": max_features, "stretch": bool(stretch)}
        # consecutive video pairs share a frame: its features are detected once (exact reuse)
        self.cache = classical.FeatureCache(8)

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        H = classical.feature_homography(a, b, self.detector, self.robust, cache=self.cache,
                                         **self.options)
        return self._motion(H, *a.shape[:2], "too few feature matches")


class KLT(HomographyEstimator):
    """Shi-Tomasi corners tracked by pyramidal Lucas-Kanade and a ``robust`` homography fit."""

    def __init__(self, robust: str, *, max_corners: int = 1000, quality: float = 0.01,
                 min_distance: int = 8, window: int = 21, levels: int = 3, round_trip: float = 0.5,
                 threshold: float = 3.0, min_tracks: int = 10, stretch: bool = False,
                 forward_only: bool = False):
        super().__init__(forward_only)
        self.robust = robust
        self.options = {"max_corners": max_corners, "quality": quality, "min_distance": min_distance,
                        "window": window, "levels": levels, "round_trip": round_trip,
                        "threshold": threshold, "min_tracks": min_tracks, "stretch": bool(stretch)}

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        H = classical.klt_homography(a, b, self.robust, **self.options)
        return self._motion(H, *a.shape[:2], "too few corner tracks")


class ECC(HomographyEstimator):
    """OpenCV's ECC homography, coarse to fine."""

    def __init__(self, *, min_side: int = 64, gauss_size: int = 5, iterations: int = 100,
                 eps: float = 1e-6, forward_only: bool = False):
        super().__init__(forward_only)
        self.options = {"min_side": min_side, "gauss_size": gauss_size, "iterations": iterations,
                        "eps": eps}

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        H, note = classical.ecc_homography(a, b, **self.options)
        return self._motion(H, *a.shape[:2], note, note)


def _fitted_homography(flow: np.ndarray) -> np.ndarray | None:
    """Least-squares homography of a dense flow (:func:`camflow_jax.geometry.device.fit_homography`),
    or None when none can be fitted."""
    from camflow_jax.geometry import device
    H, valid = device.fit_homography(flow, return_valid=True)
    if not bool(valid):
        return None
    H = np.asarray(H, np.float64)
    return H / H[2, 2]


class DIS(Estimator):
    """OpenCV's DIS dense flow, both directions, and the homography fitted to the forward flow."""

    def __init__(self, *, preset: str = "medium", forward_only: bool = False):
        self.preset, self.forward_only = preset, forward_only

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        flow_f = classical.dis_flow(a, b, self.preset)
        if self.forward_only:
            return Motion(flow_f)
        H = _fitted_homography(flow_f)
        note = "" if H is not None else "no homography can be fitted to the flow"
        return Motion(flow_f, classical.dis_flow(b, a, self.preset), H, note=note)
