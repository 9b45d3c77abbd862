"""Classical camera-motion estimators that run anywhere (OpenCV, CPU).

All take two images ``[H, W, 3]`` or ``[H, W]`` (uint8 or float in [0, 255]) and return either a
homography mapping image-1 pixels to image-2 pixels, or a dense forward flow ``[H, W, 2]`` on
image 1's grid (``warp(img2, flow) ≈ img1``), following docs/design.md, "Conventions".
"""

from __future__ import annotations

import cv2
import numpy as np

__all__ = ["METHODS", "to_gray_u8", "feature_homography", "homography_flow_np", "dis_flow", "estimate_flow"]

#: Smallest image side :func:`dis_flow` accepts (OpenCV's DIS fails or crashes below it).
DIS_MIN_SIDE = 32

#: Names accepted by :func:`estimate_flow`.
METHODS = ("identity", "sift_ransac", "sift_magsac", "orb_ransac", "orb_magsac", "dis")


def to_gray_u8(img: np.ndarray) -> np.ndarray:
    img = np.asarray(img)
    if img.ndim == 3 and img.shape[-1] == 3:
        img = cv2.cvtColor(np.clip(img, 0, 255).astype(np.uint8), cv2.COLOR_RGB2GRAY)
    elif img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.ndim != 2:
        raise ValueError(f"expected an image [H, W], [H, W, 1] or [H, W, 3], got shape {img.shape}")
    return np.clip(img, 0, 255).astype(np.uint8)


def feature_homography(img1, img2, detector: str = "sift", method: str = "magsac", *,
                       ratio: float = 0.7, min_matches: int = 10, threshold: float = 3.0,
                       max_features: int = 4000) -> np.ndarray | None:
    """Keypoint matching (Lowe ratio test) + robust homography fit.

    Returns the ``[3, 3]`` homography image 1 -> image 2, or ``None`` when fewer than
    ``min_matches`` matches survive or the fit fails (callers decide the fallback; a stale
    homography is never reused silently).
    """
    g1, g2 = to_gray_u8(img1), to_gray_u8(img2)
    if detector == "sift":
        det = cv2.SIFT_create(nfeatures=max_features)
        norm = cv2.NORM_L2
    elif detector == "orb":
        det = cv2.ORB_create(nfeatures=max_features)
        norm = cv2.NORM_HAMMING
    else:
        raise ValueError(f"detector must be 'sift' or 'orb', got {detector!r}")
    flags = {"ransac": cv2.RANSAC, "magsac": cv2.USAC_MAGSAC}
    if method not in flags:
        raise ValueError(f"method must be 'ransac' or 'magsac', got {method!r}")
    k1, d1 = det.detectAndCompute(g1, None)
    k2, d2 = det.detectAndCompute(g2, None)
    if d1 is None or d2 is None or len(k1) < 4 or len(k2) < 4:
        return None
    pairs = cv2.BFMatcher(norm).knnMatch(d1, d2, k=2)
    good = [m[0] for m in pairs if len(m) == 2 and m[0].distance < ratio * m[1].distance]
    if len(good) < max(min_matches, 4):
        return None
    src = np.float32([k1[m.queryIdx].pt for m in good]).reshape(-1, 1, 2)
    dst = np.float32([k2[m.trainIdx].pt for m in good]).reshape(-1, 1, 2)
    H, _ = cv2.findHomography(src, dst, flags[method], threshold, maxIters=5000, confidence=0.999)
    if H is None or not np.all(np.isfinite(H)):
        return None
    return (H / H[2, 2]).astype(np.float64)


def homography_flow_np(H: np.ndarray, h: int, w: int) -> np.ndarray:
    """Numpy twin of :func:`camflow_jax.geometry.homography_to_flow` (float32 ``[h, w, 2]``)."""
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    H = np.asarray(H, np.float64)
    den = H[2, 0] * xs + H[2, 1] * ys + H[2, 2]
    u = (H[0, 0] * xs + H[0, 1] * ys + H[0, 2]) / den - xs
    v = (H[1, 0] * xs + H[1, 1] * ys + H[1, 2]) / den - ys
    return np.stack([u, v], axis=-1).astype(np.float32)


def dis_flow(img1, img2, preset: str = "medium") -> np.ndarray:
    """OpenCV DIS dense optical flow, forward (image-1 grid), float32 ``[H, W, 2]``."""
    presets = {"ultrafast": cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST,
               "fast": cv2.DISOPTICAL_FLOW_PRESET_FAST,
               "medium": cv2.DISOPTICAL_FLOW_PRESET_MEDIUM}
    if preset not in presets:
        raise ValueError(f"preset must be one of {sorted(presets)}, got {preset!r}")
    h, w = np.asarray(img1).shape[:2]
    if min(h, w) < DIS_MIN_SIDE:
        # OpenCV's DIS raises below 12 px and crashes the process (segfault) on some short, wide
        # images under 32 rows: refuse them before calling it.
        raise ValueError(f"DIS optical flow needs images of at least {DIS_MIN_SIDE}x{DIS_MIN_SIDE} "
                         f"pixels, got {w}x{h}")
    dis = cv2.DISOpticalFlow_create(presets[preset])
    return dis.calc(to_gray_u8(img1), to_gray_u8(img2), None).astype(np.float32)


def estimate_flow(method: str, img1, img2) -> tuple[np.ndarray, dict]:
    """Dense forward flow from a named classical method (see :data:`METHODS`).

    Returns ``(flow [H, W, 2], info)``; ``info["homography"]`` holds the fitted H (or None) and
    ``info["fallback"]`` is True when a feature method failed and identity was used instead.
    """
    h, w = np.asarray(img1).shape[:2]
    if method == "identity":
        return np.zeros((h, w, 2), np.float32), {"homography": np.eye(3), "fallback": False}
    if method == "dis":
        return dis_flow(img1, img2), {"homography": None, "fallback": False}
    try:
        detector, robust = method.split("_")
    except ValueError:
        raise ValueError(f"unknown method {method!r}; choose from {METHODS}") from None
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {METHODS}")
    H = feature_homography(img1, img2, detector, robust)
    if H is None:
        return np.zeros((h, w, 2), np.float32), {"homography": None, "fallback": True}
    return homography_flow_np(H, h, w), {"homography": H, "fallback": False}
