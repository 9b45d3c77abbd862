"""Low-level classical camera-motion estimation with OpenCV (CPU): the building blocks of the
named estimators in :mod:`camflow_jax.estimators.registry` (which is where names live; use
``registry.get(name)`` to run one).

All take two images ``[H, W, 3]`` or ``[H, W]`` (uint8 or float in [0, 255]) and return either a
homography mapping image-1 pixels to image-2 pixels, or a dense forward flow ``[H, W, 2]`` on
image 1's grid (``warp(img2, flow) ≈ img1``), following docs/design.md, "Conventions".
"""

from __future__ import annotations

import hashlib
import threading

import cv2
import numpy as np

__all__ = ["to_gray_u8", "stretch_contrast", "ContentCache", "FeatureCache", "detect_features",
           "feature_homography", "klt_homography", "dis_flow", "ecc_homography", "ecc_refine",
           "lk_track", "lk_round_trip", "robust_fit"]

#: Smallest image side :func:`dis_flow` accepts (OpenCV's DIS fails or crashes below it).
DIS_MIN_SIDE = 32


def to_gray_u8(img: np.ndarray) -> np.ndarray:
    img = np.asarray(img)
    if img.ndim == 3 and img.shape[-1] == 3:
        img = cv2.cvtColor(np.clip(img, 0, 255).astype(np.uint8), cv2.COLOR_RGB2GRAY)
    elif img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.ndim != 2:
        raise ValueError(f"expected an image [H, W], [H, W, 1] or [H, W, 3], got shape {img.shape}")
    return np.clip(img, 0, 255).astype(np.uint8)


def stretch_contrast(gray: np.ndarray, low: float = 1.0, high: float = 99.0) -> np.ndarray:
    """A uint8 grey image with its ``low``-th .. ``high``-th percentile grey levels stretched
    linearly to 0..255 (clipped outside); returned as it is when that range is under one grey
    level (a flat image). Dark and low-contrast frames then reach SIFT's contrast threshold,
    which is relative to the full range (docs/stabilization.md, "Dark and low-contrast
    frames"). Percentiles from the 256-bin histogram (the smallest level whose cumulative
    count reaches the share)."""
    g = np.asarray(gray)
    if g.dtype != np.uint8 or g.ndim != 2:
        raise ValueError(f"expected a uint8 image [H, W], got {g.dtype} {g.shape}")
    cum = np.cumsum(np.bincount(g.ravel(), minlength=256))
    lo, hi = (int(np.searchsorted(cum, q / 100.0 * cum[-1])) for q in (low, high))
    if hi - lo < 1:
        return g
    lut = np.clip(np.round((np.arange(256) - lo) * (255.0 / (hi - lo))), 0, 255).astype(np.uint8)
    return cv2.LUT(g, lut)


_MISSING = object()


class ContentCache:
    """What ``compute(image)`` gave for the last few images, keyed by a digest of the image's
    bytes (with its shape, dtype and the caller's ``settings``): a video's frame t+1 is image 2
    of pair (t, t+1) and image 1 of pair (t+1, t+2), so with a cache it is measured once. A hit
    returns exactly what ``compute`` would (a cache never changes a result, only its cost).
    ``size``: how many images are kept (oldest first out); ``hits`` / ``misses`` count
    lookups. Thread-safe (``compute`` runs outside the lock)."""

    def __init__(self, size: int = 2):
        if size < 1:
            raise ValueError(f"cache size must be >= 1, got {size}")
        self.size = int(size)
        self._items: dict = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, image: np.ndarray, compute, settings=()):
        a = np.ascontiguousarray(image)
        key = (settings, a.shape, a.dtype.str, hashlib.blake2b(a.tobytes(), digest_size=16).digest())
        with self._lock:
            found = self._items.pop(key, _MISSING)
        hit = found is not _MISSING
        if not hit:
            found = compute(a)
        with self._lock:
            self.hits, self.misses = self.hits + hit, self.misses + (not hit)
            self._items[key] = found  # most recent last
            while len(self._items) > self.size:
                self._items.pop(next(iter(self._items)))
        return found


class FeatureCache(ContentCache):
    """The keypoints and descriptors of the last few grey images (:class:`ContentCache`, keyed
    with the detector settings): with a cache :func:`feature_homography` detects each video
    frame once."""

    def features(self, gray: np.ndarray, detector: str, max_features: int):
        return self.get(gray, lambda g: detect_features(g, detector, max_features),
                        (detector, int(max_features)))


def _detector(detector: str, max_features: int):
    if detector == "sift":
        return cv2.SIFT_create(nfeatures=max_features)
    if detector == "orb":
        return cv2.ORB_create(nfeatures=max_features)
    raise ValueError(f"detector must be 'sift' or 'orb', got {detector!r}")


def detect_features(gray: np.ndarray, detector: str = "sift",
                    max_features: int = 4000) -> tuple[np.ndarray, np.ndarray | None]:
    """Keypoint positions ``[N, 2]`` float32 (x, y) and descriptors (None when there are none)
    of a grey uint8 image (:func:`to_gray_u8`)."""
    k, d = _detector(detector, max_features).detectAndCompute(gray, None)
    pts = np.float32([p.pt for p in k]).reshape(-1, 2)
    return pts, d


#: The robust fits :func:`feature_homography` and :func:`klt_homography` offer.
_ROBUST = {"ransac": cv2.RANSAC, "magsac": cv2.USAC_MAGSAC}


def _check_robust(method: str) -> None:
    if method not in _ROBUST:
        raise ValueError(f"method must be 'ransac' or 'magsac', got {method!r}")


def _grey_pair(img1, img2, stretch: bool) -> tuple[np.ndarray, np.ndarray]:
    """Both images as uint8 grey (:func:`to_gray_u8`), contrast-stretched when ``stretch``."""
    g1, g2 = to_gray_u8(img1), to_gray_u8(img2)
    return (stretch_contrast(g1), stretch_contrast(g2)) if stretch else (g1, g2)


def robust_fit(src, dst, method: str = "ransac", threshold: float = 3.0, *,
               max_iters: int = 5000) -> tuple[np.ndarray | None, np.ndarray]:
    """``(H, inliers)``: the homography src -> dst (points ``[N, 2]`` or ``[N, 1, 2]``) by
    ``cv2.findHomography`` with ``method`` ('ransac' or 'magsac') and ``threshold`` px,
    normalized to ``H[2, 2] = 1``, and its inlier mask ``[N]`` (bool); ``(None, all False)``
    when the fit fails."""
    _check_robust(method)
    src = np.asarray(src, np.float32).reshape(-1, 1, 2)
    dst = np.asarray(dst, np.float32).reshape(-1, 1, 2)
    H, mask = cv2.findHomography(src, dst, _ROBUST[method], float(threshold), maxIters=int(max_iters),
                                 confidence=0.999)
    if H is None or not np.all(np.isfinite(H)) or abs(H[2, 2]) < 1e-12:
        return None, np.zeros(len(src), bool)
    return (H / H[2, 2]).astype(np.float64), mask.ravel() > 0


def feature_homography(img1, img2, detector: str = "sift", method: str = "magsac", *,
                       ratio: float = 0.7, min_matches: int = 10, threshold: float = 3.0,
                       max_features: int = 4000, stretch: bool = False,
                       cache: FeatureCache | None = None) -> np.ndarray | None:
    """Keypoint matching (Lowe ratio test) + robust homography fit.

    Returns the ``[3, 3]`` homography image 1 -> image 2, or ``None`` when fewer than
    ``min_matches`` matches survive or the fit fails (callers decide the fallback; a stale
    homography is never reused silently). ``cache``: a :class:`FeatureCache` that keeps the
    features of images seen before (consecutive video pairs share a frame). ``stretch``: each
    grey image's contrast is stretched first (:func:`stretch_contrast`).
    """
    _detector(detector, 1)  # validates the names before any work
    _check_robust(method)
    g1, g2 = _grey_pair(img1, img2, stretch)
    norm = cv2.NORM_L2 if detector == "sift" else cv2.NORM_HAMMING
    if cache is not None:
        (p1, d1), (p2, d2) = (cache.features(g, detector, max_features) for g in (g1, g2))
    else:
        (p1, d1), (p2, d2) = (detect_features(g, detector, max_features) for g in (g1, g2))
    if d1 is None or d2 is None or len(p1) < 4 or len(p2) < 4:
        return None
    pairs = cv2.BFMatcher(norm).knnMatch(d1, d2, k=2)
    good = [m[0] for m in pairs if len(m) == 2 and m[0].distance < ratio * m[1].distance]
    if len(good) < max(min_matches, 4):
        return None
    return robust_fit(p1[[m.queryIdx for m in good]], p2[[m.trainIdx for m in good]], method, threshold)[0]


def klt_homography(img1, img2, method: str = "ransac", *, max_corners: int = 1000,
                   quality: float = 0.01, min_distance: int = 8, window: int = 21, levels: int = 3,
                   round_trip: float = 0.5, threshold: float = 3.0, min_tracks: int = 10,
                   stretch: bool = False) -> np.ndarray | None:
    """Corner tracking + robust homography fit: Shi-Tomasi corners of image 1
    (``cv2.goodFeaturesToTrack``: at most ``max_corners``, ``quality`` of the strongest corner's
    score, ``min_distance`` px apart) tracked into image 2 by pyramidal Lucas-Kanade
    (``cv2.calcOpticalFlowPyrLK``, ``window`` px, ``levels`` pyramid levels above the image),
    then back into image 1; a track is kept when both passes converge and it returns within
    ``round_trip`` px of where it started. The kept tracks are fitted with RANSAC / MAGSAC++
    (``threshold`` px).

    Returns the ``[3, 3]`` homography image 1 -> image 2, or ``None`` when fewer than
    ``min_tracks`` tracks are kept or the fit fails. ``stretch``: each grey image's contrast is
    stretched first (:func:`stretch_contrast`). Motions larger than about
    ``window / 2 * 2 ** levels`` px are out of the tracker's reach.
    """
    _check_robust(method)
    g1, g2 = _grey_pair(img1, img2, stretch)
    p1 = cv2.goodFeaturesToTrack(g1, int(max_corners), float(quality), float(min_distance))
    if p1 is None or len(p1) < max(min_tracks, 4):
        return None
    p1, p2 = lk_round_trip(g1, g2, p1, window=window, levels=levels, round_trip=round_trip)
    if len(p1) < max(min_tracks, 4):
        return None
    return robust_fit(p1, p2, method, threshold)[0]


def lk_track(g1, g2, p1, guess=None, *, window: int = 21, levels: int = 3,
             round_trip: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Points ``p1`` (``[N, 2]``) of grey image 1 tracked into grey image 2 by pyramidal
    Lucas-Kanade (``window`` px, ``levels`` pyramid levels above the image) and back; returns
    ``(p2, kept)``: every point's track ``[N, 2]`` float32 and ``[N]`` bool, True where both
    passes converged and the backward track returned within ``round_trip`` px. ``guess``
    (``[N, 2]``): where each forward track starts (``cv2.OPTFLOW_USE_INITIAL_FLOW``; the
    backward track then starts at the point itself); None: at the point, as OpenCV does."""
    p1 = np.asarray(p1, np.float32).reshape(-1, 1, 2)
    if len(p1) == 0:
        return np.zeros((0, 2), np.float32), np.zeros(0, bool)
    lk = {"winSize": (int(window), int(window)), "maxLevel": int(levels),
          "criteria": (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 30, 0.01)}
    if guess is None:
        p2, ok2, _ = cv2.calcOpticalFlowPyrLK(g1, g2, p1, None, **lk)
        back, ok1, _ = cv2.calcOpticalFlowPyrLK(g2, g1, p2, None, **lk)
    else:
        lk["flags"] = cv2.OPTFLOW_USE_INITIAL_FLOW
        start = np.asarray(guess, np.float32).reshape(-1, 1, 2).copy()
        p2, ok2, _ = cv2.calcOpticalFlowPyrLK(g1, g2, p1, start, **lk)
        back, ok1, _ = cv2.calcOpticalFlowPyrLK(g2, g1, p2, p1.copy(), **lk)
    kept = (ok2.ravel() == 1) & (ok1.ravel() == 1) & (
        np.linalg.norm((back - p1).reshape(-1, 2), axis=1) <= round_trip)
    return p2.reshape(-1, 2), kept


def lk_round_trip(g1, g2, p1, guess=None, *, window: int = 21, levels: int = 3,
                  round_trip: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """The kept tracks ``(p1, p2)`` of :func:`lk_track` (same arguments), each ``[M, 2]`` float32."""
    p1 = np.asarray(p1, np.float32).reshape(-1, 2)
    p2, kept = lk_track(g1, g2, p1, guess, window=window, levels=levels, round_trip=round_trip)
    return p1[kept], p2[kept]


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


def ecc_homography(img1, img2, *, min_side: int = 64, gauss_size: int = 5, iterations: int = 100,
                   eps: float = 1e-6) -> tuple[np.ndarray | None, str]:
    """Homography image 1 -> image 2 maximising OpenCV's enhanced correlation coefficient
    (``cv2.findTransformECC``, ``MOTION_HOMOGRAPHY``) on gray images, coarse to fine.

    ``findTransformECC(template, input, W)`` finds W mapping template pixels to input pixels
    (``input(W p) ≈ template(p)``), so with template = image 1 and input = image 2, W is the
    homography of the repo's convention. The pyramid halves the images (``cv2.pyrDown``: coarse
    pixel i sits on fine pixel 2i) while the short side stays >= ``min_side``; the coarsest level
    starts from the identity and each finer level from ``S H S^-1``, S = diag(2, 2, 1).
    ``gauss_size``: ECC's Gaussian pre-filter; ``iterations`` / ``eps``: per-level termination.

    Returns ``(H, note)``. ECC raises when it does not converge: at the coarsest level the
    result is ``(None, reason)``; at a finer level the coarser estimate is kept and ``note``
    says so.
    """
    if min_side < 8:
        raise ValueError(f"min_side must be >= 8, got {min_side}")
    pyramid = [(to_gray_u8(img1).astype(np.float32), to_gray_u8(img2).astype(np.float32))]
    while min(pyramid[-1][0].shape) // 2 >= min_side:
        pyramid.append(tuple(cv2.pyrDown(g) for g in pyramid[-1]))
    criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, int(iterations), float(eps))
    up = np.diag([2.0, 2.0, 1.0])
    H, note = np.eye(3), ""
    for level in range(len(pyramid) - 1, -1, -1):
        g1, g2 = pyramid[level]
        if level < len(pyramid) - 1:
            H = up @ H @ np.linalg.inv(up)
        if note:  # a coarser level failed: only rescale its estimate
            continue
        W = _ecc_step(g1, g2, H, criteria, gauss_size)
        if W is None:
            if level == len(pyramid) - 1:
                return None, "ECC did not converge"
            note = f"ECC did not converge at 1/{2 ** level} scale; the coarser estimate was used"
            continue
        H = W
    return H / H[2, 2], note


def _ecc_step(g1, g2, H, criteria, gauss_size: int) -> np.ndarray | None:
    """One ``cv2.findTransformECC`` homography fit of float32 grey images, started at ``H``;
    normalized to ``W[2, 2] = 1``, or None when it does not converge."""
    try:
        _, W = cv2.findTransformECC(g1, g2, np.asarray(H, np.float32), cv2.MOTION_HOMOGRAPHY, criteria,
                                    None, int(gauss_size))
    except cv2.error:
        return None
    if W is None or not np.all(np.isfinite(W)) or abs(W[2, 2]) < 1e-12:
        return None
    return W.astype(np.float64) / W[2, 2]


def ecc_refine(img1, img2, H, *, gauss_size: int = 5, iterations: int = 50,
               eps: float = 1e-6) -> np.ndarray | None:
    """The homography image 1 -> image 2 refined by ECC at full resolution from a start ``H``
    (e.g. a feature homography; the convention of :func:`ecc_homography`), or None when ECC does
    not converge. Direct alignment uses every pixel, so on dark, noisy or blurred images it is
    far more precise than a fit to feature matches."""
    g1, g2 = to_gray_u8(img1).astype(np.float32), to_gray_u8(img2).astype(np.float32)
    H = np.asarray(H, np.float64)
    criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, int(iterations), float(eps))
    return _ecc_step(g1, g2, H / H[2, 2], criteria, gauss_size)
