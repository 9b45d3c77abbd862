"""The rigid motions among point tracks where a foreground motion competes with the background's
(numpy + OpenCV).

A dense estimate fitted to the whole frame (CamFlow+'s refined flow) lands between the camera's
motion and a large foreground object's: both pull on one robust photometric cost. Point
tracks separate the two. :func:`seeded_tracks` tracks a grid of textured points from where a
dense flow predicts them (so Lucas-Kanade needs no pyramid: the flow is already within a pixel
or two), and :func:`track_motions` fits the tracks with RANSAC: one motion, or two where a
second one holds a share of the tracks of its own. Which is the camera's is decided by the
pixels, not the tracks: the candidate that explains more of the frame photometrically
(:func:`camflow_jax.refine.dominant_homography`, the stabilizer's camflow).

Measured in docs/stabilization.md, "Moving objects".
"""

from __future__ import annotations

import cv2
import numpy as np

from camflow_jax.geometry.classical import lk_round_trip, robust_fit, to_gray_u8
from camflow_jax.geometry.host import homography_flow

__all__ = ["inlier_homography", "seeded_tracks", "track_motions", "motion_candidates", "TRACK_STEP",
           "SECOND_MOTION_SHARE", "REFIT_PX"]

#: Grid spacing (px) of the tracked points.
TRACK_STEP = 6
#: A second motion counts when its RANSAC inliers are at least this share of all tracks.
SECOND_MOTION_SHARE = 0.15
#: Each motion is fitted again by RANSAC at this threshold (px) to its own inlier tracks.
REFIT_PX = 0.25


def inlier_homography(flow, weights=None, *, min_weight: float = 0.5, num_points: int = 4096,
                      threshold: float | None = None, min_points: int = 32) -> np.ndarray | None:
    """Homography (image-1 -> image-2 pixels, ``H[2, 2] = 1``) of a forward flow ``[H, W, 2]``
    at its inlier pixels, or None when none can be fitted.

    Points on a regular grid (about ``num_points``) whose ``weights`` ``[H, W]`` (e.g. the
    refinement's IRLS weights; None: all points) are at least ``min_weight`` are matched to
    x + flow(x) and fitted with RANSAC (``threshold`` pixels, default 0.1 % of the diagonal
    and at least 0.5 px), then least squares on RANSAC's inliers. If fewer than ``min_points``
    pass the weight test, the best-weighted half of the grid is used instead.
    """
    flow = np.asarray(flow, np.float32)
    if flow.ndim != 3 or flow.shape[-1] != 2:
        raise ValueError(f"flow must be [H, W, 2], got shape {flow.shape}")
    h, w = flow.shape[:2]
    step = max(1, int(np.sqrt(h * w / float(num_points))))
    ys, xs = np.mgrid[step // 2:h:step, step // 2:w:step]
    ys, xs = ys.ravel(), xs.ravel()
    f = flow[ys, xs]
    keep = np.all(np.isfinite(f), axis=-1)
    if weights is not None:
        wts = np.asarray(weights, np.float32).reshape(h, w)[ys, xs]
        good = keep & (wts >= min_weight)
        if good.sum() < min_points:
            good = keep & (wts >= np.median(wts[keep])) if keep.any() else keep
        keep = good
    if keep.sum() < max(min_points, 4):
        return None
    src = np.stack([xs, ys], -1)[keep].astype(np.float32)
    dst = src + f[keep]
    if threshold is None:
        threshold = max(0.5, 1e-3 * float(np.hypot(h, w)))
    return robust_fit(src, dst, "ransac", threshold, max_iters=2000)[0]


def seeded_tracks(img1, img2, flow, *, step: int = TRACK_STEP, window: int = 15, levels: int = 1,
                  round_trip: float = 0.5, min_texture: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Lucas-Kanade tracks ``(p1, p2)``, each ``[N, 2]`` float32 pixels, of grid points of image 1
    (every ``step`` px) into image 2, started at ``p + flow(p)`` (``flow`` ``[H, W, 2]`` on
    image 1's grid, e.g. a refined estimate).

    Only textured points are tracked: the smaller eigenvalue of the structure tensor
    (``cv2.cornerMinEigenVal``, 7 px blocks) at least ``min_texture`` of the image's largest.
    ``window`` px windows, ``levels`` pyramid levels above the image; a track is kept when
    both directions converge and the backward track (started at the point itself) returns
    within ``round_trip`` px."""
    g1, g2 = to_gray_u8(img1), to_gray_u8(img2)
    flow = np.asarray(flow, np.float32)
    h, w = g1.shape
    if g2.shape != (h, w) or flow.shape != (h, w, 2):
        raise ValueError(f"images and flow must share one size, got {g1.shape}, {g2.shape} and {flow.shape}")
    ys, xs = np.mgrid[step // 2:h:step, step // 2:w:step]
    ys, xs = ys.ravel(), xs.ravel()
    eig = cv2.cornerMinEigenVal(g1, 7)[ys, xs]
    textured = eig > min_texture * max(float(eig.max()), 1e-12)
    ys, xs = ys[textured], xs[textured]
    empty = np.zeros((0, 2), np.float32)
    if xs.size == 0:
        return empty, empty
    p1 = np.stack([xs, ys], -1).astype(np.float32)
    guess = p1 + flow[ys, xs]
    if not np.all(np.isfinite(guess)):
        raise ValueError("the flow has non-finite values")
    return lk_round_trip(g1, g2, p1, guess, window=window, levels=levels, round_trip=round_trip)


def track_motions(p1, p2, *, threshold: float = 0.5, min_share: float = SECOND_MOTION_SHARE,
                  min_tracks: int = 16, refit: float | None = REFIT_PX) -> list[np.ndarray]:
    """The rigid motions among tracks ``p1 -> p2`` (``[N, 2]``): a list of homographies (image 1
    -> image 2, ``H[2, 2] = 1``), the largest consensus first.

    RANSAC (``threshold`` px) fits the tracks; if at least ``min_share`` of them are left out,
    RANSAC fits those again, and that second motion is listed when its inliers are at least
    ``min_share`` of all tracks. Each motion is then fitted again to its own inliers (None: not):
    RANSAC at ``refit`` px, then three rounds of least squares on those within ``refit`` px of
    the fit. Where two motions differ by about a pixel, a consensus at ``threshold`` can take
    tracks of both and land between them, and a fit at one pixel's error is coarse on noisy
    tracks; the refit returns to the motion most of them share and averages their noise
    (docs/stabilization.md, "Moving objects").
    Empty with fewer than ``min_tracks`` tracks or when the fit fails. Which motion is the
    camera's is not decided here: the largest consensus is often a large foreground object's
    (its texture may be richer than the background's), so the stabilizer compares the
    candidates photometrically (:func:`camflow_jax.refine.dominant_homography`)."""
    p1 = np.asarray(p1, np.float32).reshape(-1, 2)
    p2 = np.asarray(p2, np.float32).reshape(-1, 2)
    if len(p1) != len(p2):
        raise ValueError(f"p1 and p2 must hold as many points, got {len(p1)} and {len(p2)}")
    n = len(p1)
    if n < max(min_tracks, 4):
        return []

    H1, in1 = robust_fit(p1, p2, "ransac", threshold, max_iters=2000)
    if H1 is None:
        return []
    motions = [(H1, np.flatnonzero(in1))]
    rest = np.flatnonzero(~in1)
    if rest.size >= max(min_share * n, 4):
        H2, in2 = robust_fit(p1[rest], p2[rest], "ransac", threshold, max_iters=2000)
        if H2 is not None and in2.sum() >= min_share * n:
            motions.append((H2, rest[in2]))
    if refit is None:
        return [H for H, _ in motions]
    return [_refit(p1[own], p2[own], H, refit) if own.size >= 8 else H for H, own in motions]


def _refit(p1, p2, H, threshold: float, rounds: int = 3) -> np.ndarray:
    """``H`` fitted again to its tracks ``p1 -> p2``: RANSAC at ``threshold`` px, then
    ``rounds`` of least squares (``cv2.findHomography``'s DLT and Levenberg-Marquardt) on the
    tracks within ``threshold`` of the current fit. Keeps the last fit that succeeded."""
    Hr = robust_fit(p1, p2, "ransac", threshold, max_iters=2000)[0]
    H = H if Hr is None else Hr
    for _ in range(rounds):
        moved = cv2.perspectiveTransform(p1.reshape(-1, 1, 2), H).reshape(-1, 2)
        near = np.linalg.norm(moved - p2, axis=1) < threshold
        if near.sum() < 8:
            break
        Hn = cv2.findHomography(p1[near], p2[near], 0)[0]
        if Hn is None or not np.all(np.isfinite(Hn)) or abs(Hn[2, 2]) < 1e-12:
            break
        H = Hn / Hn[2, 2]
    return H


def motion_candidates(img1, img2, flow, weights=None, **track_options) -> list[np.ndarray]:
    """The candidate camera motions of a pair from a dense estimate ``flow`` ``[H, W, 2]`` (image 1
    -> image 2) and its inlier ``weights`` ``[H, W]`` (e.g. the refinement's IRLS weights):
    ``[H_fit, *tracked]``, the homography fitted to the flow's inliers
    (:func:`inlier_homography`) and the rigid motions of points tracked from its prediction
    (:func:`seeded_tracks`, :func:`track_motions` with ``track_options``: one, or two where a
    second motion holds a share of the tracks). Empty when no homography fits. Which candidate
    is the camera's is decided photometrically (:func:`camflow_jax.refine.dominant_homography`)."""
    H = inlier_homography(flow, weights)
    if H is None:
        return []
    tracked = track_motions(*seeded_tracks(img1, img2, homography_flow(H, *np.shape(flow)[:2])),
                            **track_options)
    return [H, *(m for m in tracked if np.all(np.isfinite(m)))]
