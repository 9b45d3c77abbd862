"""Depth maps on the image grid: one resampling rule for training, evaluation and inference.

Depth must be resampled with the same geometry as the image it belongs to, or the depth bases
are built from the wrong pixels: images are resized bilinearly with half-pixel centres
(``cv2.INTER_LINEAR``, :func:`camflow_jax.geometry.resize_image`), so depth is too. Invalid
depth (non-finite or <= 0) must not blend into valid neighbours: an output pixel whose bilinear
footprint touches an invalid input pixel is invalid (NaN) itself.

Depth of another aspect ratio than its image cannot be resized onto it without distortion; it
is refused (beyond one pixel of rounding) with an error naming the file.
"""

from __future__ import annotations

import cv2
import numpy as np

__all__ = ["check_depth_aspect", "resize_depth"]


def check_depth_aspect(depth_hw, image_hw, what: str) -> None:
    """Raises ValueError when a ``depth_hw`` map cannot be the ``image_hw`` frame's depth at
    another resolution (aspect ratios differ by more than one pixel's rounding)."""
    dh, dw = (int(v) for v in depth_hw[:2])
    ih, iw = (int(v) for v in image_hw[:2])
    if min(dh, dw, ih, iw) <= 0:
        raise ValueError(f"{what}: empty depth or image ({dh}x{dw} vs {ih}x{iw})")
    # The depth map's height predicted from its width at the image's aspect, +-1 px of rounding
    # at either resolution.
    expected_h = dw * ih / iw
    tol = 1.0 + dw / iw
    if abs(dh - expected_h) > tol:
        raise ValueError(f"{what}: depth is {dh}x{dw} but the image is {ih}x{iw} (another aspect ratio); "
                         "give depth of the frame itself (any resolution of the same aspect)")


def resize_depth(depth: np.ndarray, height: int, width: int) -> np.ndarray:
    """``[H0, W0]`` depth -> float32 ``[height, width]``, bilinear with half-pixel centres;
    pixels influenced by invalid depth (non-finite or <= 0) come out NaN."""
    d = np.asarray(depth, np.float32)
    if d.ndim != 2:
        raise ValueError(f"resize_depth: depth must be [H, W], got shape {d.shape}")
    if d.shape == (height, width):
        return d.copy()
    ok = np.isfinite(d) & (d > 0)
    filled = np.where(ok, d, 0.0).astype(np.float32)
    out = cv2.resize(filled, (width, height), interpolation=cv2.INTER_LINEAR)
    weight = cv2.resize(ok.astype(np.float32), (width, height), interpolation=cv2.INTER_LINEAR)
    return np.where(weight > 1 - 1e-4, out, np.nan).astype(np.float32)
