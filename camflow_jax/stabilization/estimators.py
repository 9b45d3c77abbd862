"""Swappable camera-motion estimators for stabilization, all behind one interface.

An estimator is a callable ``estimator(frame_t, frame_t1) -> flow [H, W, 2]`` (float32 numpy)
taking two RGB frames ``[H, W, 3]`` and returning the forward flow F_t on frame t's grid that
maps frame t to frame t+1 (docs/design.md, "Conventions": pixel p of frame t matches p + F_t(p) in frame t+1, so
``warp(frame_t1, F_t) ≈ frame_t``). Homography methods are sampled as per-pixel displacement
fields, so the smoothing and rendering stages see the same representation for every method
(paper §"Video Stabilization").

Every estimator counts its calls and failures (``stats()``). A failed estimate (too few feature
matches, a non-finite network output) falls back to the identity motion for that frame pair and
is counted; a stale motion is never reused silently.
"""

from __future__ import annotations

import time

import cv2
import numpy as np

from camflow_jax import baselines

__all__ = ["ESTIMATORS", "Estimator", "IdentityEstimator", "HomographyEstimator",
           "DISEstimator", "CamFlowEstimator", "make_estimator", "resize_flow_np"]

#: Names accepted by :func:`make_estimator` (and the CLI's ``--estimator``).
ESTIMATORS = ("camflow", "sift", "orb", "dis", "identity")


def resize_flow_np(flow: np.ndarray, h: int, w: int) -> np.ndarray:
    """Resamples a flow ``[H0, W0, 2]`` to ``h x w`` and rescales its values (u by w/W0, v by h/H0).

    Half-pixel-centre convention (as ``cv2.resize``): area averaging when shrinking, bilinear
    when enlarging; a uniform translation of t pixels becomes exactly t * w / W0.
    """
    flow = np.asarray(flow, np.float32)
    h0, w0 = flow.shape[:2]
    if (h0, w0) == (h, w):
        return flow.copy()
    interp = cv2.INTER_AREA if (h < h0 and w < w0) else cv2.INTER_LINEAR
    out = cv2.resize(flow, (w, h), interpolation=interp)
    return out * np.array([w / w0, h / h0], np.float32)


def _check_pair(frame_t, frame_t1) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(frame_t), np.asarray(frame_t1)
    if a.ndim not in (2, 3) or a.shape != b.shape:
        raise ValueError(f"estimator expects two frames of the same shape [H, W, 3], got "
                         f"{a.shape} and {b.shape}")
    return a, b


class Estimator:
    """Base class: subclasses implement ``_estimate`` and may return None for failure."""

    name = "estimator"

    def __init__(self):
        self.calls = 0
        self.failures = 0
        self.seconds = 0.0
        self.times: list[float] = []  # seconds per call (the first may include compilation)

    def __call__(self, frame_t, frame_t1) -> np.ndarray:
        a, b = _check_pair(frame_t, frame_t1)
        h, w = a.shape[:2]
        t0 = time.perf_counter()
        flow = self._estimate(a, b)
        self.times.append(time.perf_counter() - t0)
        self.seconds += self.times[-1]
        self.calls += 1
        if flow is None or not np.all(np.isfinite(flow)):
            self.failures += 1
            return np.zeros((h, w, 2), np.float32)
        flow = np.asarray(flow, np.float32)
        if flow.shape != (h, w, 2):
            raise ValueError(f"{self.name}: flow has shape {flow.shape}, expected {(h, w, 2)}")
        return flow

    def _estimate(self, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        raise NotImplementedError

    def stats(self) -> dict:
        """Calls, identity fallbacks, mean and median milliseconds per call."""
        ms = 1000.0 * self.seconds / self.calls if self.calls else 0.0
        med = 1000.0 * float(np.median(self.times)) if self.times else 0.0
        return {"estimator": self.name, "calls": self.calls, "failures": self.failures,
                "ms_per_pair": ms, "ms_per_pair_median": med}


class IdentityEstimator(Estimator):
    """Zero motion (a no-op stabilizer; useful as a control)."""

    name = "identity"

    def _estimate(self, a, b):
        return np.zeros(a.shape[:2] + (2,), np.float32)


class HomographyEstimator(Estimator):
    """SIFT / ORB matches + robust homography (``baselines.feature_homography``), as a flow.

    ``last_homography`` holds the latest fitted H (None after a failure).
    """

    def __init__(self, detector: str = "sift", method: str = "ransac", **kwargs):
        super().__init__()
        if detector not in ("sift", "orb"):
            raise ValueError(f"detector must be 'sift' or 'orb', got {detector!r}")
        self.detector, self.method, self.kwargs = detector, method, kwargs
        self.name = detector
        self.last_homography = None

    def _estimate(self, a, b):
        H = baselines.feature_homography(a, b, self.detector, self.method, **self.kwargs)
        self.last_homography = H
        if H is None:
            return None
        return baselines.homography_flow_np(H, a.shape[0], a.shape[1])


class DISEstimator(Estimator):
    """OpenCV DIS dense optical flow (the generic dense-flow reference)."""

    name = "dis"

    def __init__(self, preset: str = "medium"):
        super().__init__()
        self.preset = preset

    def _estimate(self, a, b):
        return baselines.dis_flow(a, b, self.preset)


class CamFlowEstimator(Estimator):
    """Adapter for a CamFlow / CamFlow+ predictor.

    ``predictor(img1, img2)`` must return a dict whose ``flow_f`` is the forward flow
    ``[H', W', 2]`` or ``[1, H', W', 2]`` (numpy or jax); if its size differs from the frames'
    it is resized with :func:`resize_flow_np`. ``camflow_jax.predictor.Predictor`` satisfies this;
    :meth:`from_checkpoint` builds one lazily (only this estimator needs the network code).
    """

    name = "camflow"

    def __init__(self, predictor, depth_files=None, intrinsics=None, fov_deg: float | None = None,
                 frame_size: tuple[int, int] | None = None):
        """``depth_files``: one depth map per video frame (any resolution of the frame's aspect,
        any global scale), for CamFlow+'s depth bases; ``intrinsics`` (fx, fy, cx, cy) in pixels
        of the original ``frame_size`` (H, W), or ``fov_deg`` (horizontal field of view) with
        the principal point at the centre. The pipeline asks for pairs (t, t+1) in order, so the
        t-th call uses depth maps t and t+1."""
        super().__init__()
        if not callable(predictor):
            raise ValueError("CamFlowEstimator needs a callable predictor(img1, img2) -> dict")
        if intrinsics is not None and fov_deg is not None:
            raise ValueError("give intrinsics or a field of view, not both")
        if fov_deg is not None and not (np.isfinite(fov_deg) and 1.0 <= fov_deg <= 170.0):
            raise ValueError(f"field of view must be between 1 and 170 degrees, got {fov_deg}")
        if intrinsics is not None and frame_size is None:
            raise ValueError("intrinsics need the frame size they are given in")
        self.predictor = predictor
        self.depth_files = list(depth_files) if depth_files is not None else None
        self.intrinsics = None if intrinsics is None else np.asarray(intrinsics, np.float64).reshape(4)
        self.fov_deg = fov_deg
        self.frame_size = frame_size

    @classmethod
    def from_checkpoint(cls, path: str | None, **kwargs) -> "CamFlowEstimator":
        """The model at ``path``, or the shipped one when ``path`` is None."""
        from camflow_jax.predictor import Predictor

        return cls(Predictor.load(path), **kwargs)

    def _camera(self, t: int, h: int, w: int):
        """(depth_t, depth_t+1, K) at the estimation size h x w, or Nones without depth."""
        if self.depth_files is None:
            return None, None, None
        from camflow_jax import geometry
        from camflow_jax.data import depth as depth_lib

        if t + 1 >= len(self.depth_files):
            raise ValueError(f"the depth folder has {len(self.depth_files)} files, but the video has "
                             f"at least {t + 2} frames")
        maps = []
        for f in self.depth_files[t:t + 2]:
            d = depth_lib.read_depth(f)
            depth_lib.check_depth_aspect(d.shape, (h, w), f)
            maps.append(depth_lib.resize_depth(d, h, w))  # the predictor checks and fills it
        if self.intrinsics is not None:
            K = np.asarray(geometry.resize_intrinsics(self.intrinsics, self.frame_size, (h, w)), np.float32)
        else:
            fov = 60.0 if self.fov_deg is None else self.fov_deg
            fx = 0.5 * w / np.tan(np.deg2rad(fov) / 2)
            K = np.array([fx, fx, (w - 1) / 2, (h - 1) / 2], np.float32)
        return maps[0], maps[1], K

    def _estimate(self, a, b):
        d1, d2, K = self._camera(self.calls, a.shape[0], a.shape[1])
        out = self.predictor(a, b) if d1 is None else self.predictor(a, b, depth1=d1, depth2=d2, intrinsics=K)
        if not isinstance(out, dict) or "flow_f" not in out:
            raise ValueError("camflow predictor must return a dict with 'flow_f'")
        flow = np.asarray(out["flow_f"], np.float32)
        if flow.ndim == 4 and flow.shape[0] == 1:
            flow = flow[0]
        if flow.ndim != 3 or flow.shape[-1] != 2:
            raise ValueError(f"camflow predictor returned flow_f of shape {flow.shape}; "
                             "expected [H, W, 2] or [1, H, W, 2]")
        if not np.all(np.isfinite(flow)):
            return None
        return resize_flow_np(flow, a.shape[0], a.shape[1])


def make_estimator(name: str, checkpoint: str | None = None, **kwargs) -> Estimator:
    """Builds an estimator by name (:data:`ESTIMATORS`).

    sift / orb: ratio test 0.7 and RANSAC (``method=`` may select 'magsac'); dis: DIS 'medium';
    camflow: ``checkpoint`` (an inference checkpoint or a training workdir), or the shipped
    model when it is None; ``depth_files``/``intrinsics``/``fov_deg``/``frame_size`` as
    :class:`CamFlowEstimator` takes them.
    """
    if name in ("sift", "orb"):
        return HomographyEstimator(name, **kwargs)
    if name == "dis":
        return DISEstimator(**kwargs)
    if name == "identity":
        return IdentityEstimator()
    if name == "camflow":
        return CamFlowEstimator.from_checkpoint(checkpoint or None, **kwargs)
    raise ValueError(f"unknown estimator {name!r}; choose from {', '.join(ESTIMATORS)}")
