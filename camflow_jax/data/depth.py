"""Depth maps on the image grid: one resampling rule for training, evaluation and inference.

Depth must be resampled with the same geometry as the image it belongs to, or the depth bases
are built from the wrong pixels: images are resized bilinearly with half-pixel centres
(``cv2.INTER_LINEAR``, :func:`camflow_jax.geometry.device.resize_image`), so depth is too. Invalid
depth (non-finite or <= 0) must not blend into valid neighbours: an output pixel whose bilinear
footprint touches an invalid input pixel is invalid (NaN) itself.

Depth of another aspect ratio than its image cannot be resized onto it without distortion; it
is refused (beyond one pixel of rounding) with an error naming the file.
"""

from __future__ import annotations

import cv2
import numpy as np

from camflow_jax.io.errors import EXPECTED_ERRORS, describe_error

__all__ = ["check_depth_aspect", "resize_depth", "read_depth", "depth_files", "DEPTH_EXTENSIONS"]

#: Depth files we read: numpy arrays, or single-channel (e.g. 16-bit) images.
DEPTH_EXTENSIONS = (".npy", ".npz", ".png", ".tif", ".tiff", ".exr", ".pfm")


def read_depth(path: str) -> np.ndarray:
    """float32 depth ``[H, W]`` from .npy / .npz / a single-channel image (any global scale)."""
    import os

    if not os.path.isfile(path):
        raise FileNotFoundError(f"depth file not found: {path}")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".npy":
            d = np.load(path, allow_pickle=False)
        elif ext == ".npz":
            with np.load(path, allow_pickle=False) as z:
                if not z.files:
                    raise ValueError(f"{path}: empty .npz")
                d = z["depth"] if "depth" in z.files else z[z.files[0]]
        else:
            d = cv2.imread(path, cv2.IMREAD_ANYDEPTH | cv2.IMREAD_GRAYSCALE)
            if d is None:
                raise ValueError(f"cannot decode depth image {path}")
    except ValueError:
        raise
    except EXPECTED_ERRORS as e:  # damaged headers / archives raise errors that name no file
        raise ValueError(describe_error(e, f"cannot read depth file {path}")) from e
    d = np.asarray(d, np.float32)
    if d.ndim == 3 and d.shape[-1] == 1:
        d = d[..., 0]
    if d.ndim != 2:
        raise ValueError(f"{path}: depth must be [H, W], got shape {d.shape}")
    return d


def depth_files(folder) -> list[str]:
    """The depth files of a folder, one per video frame, in name order (hidden files, whose
    names start with a dot, are ignored, as in frame folders)."""
    import os

    if not os.path.isdir(folder):
        raise FileNotFoundError(f"depth folder not found: {folder}")
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder)
                   if os.path.splitext(f)[1].lower() in DEPTH_EXTENSIONS and not f.startswith("."))
    if not files:
        raise ValueError(f"{folder} holds no depth files ({', '.join(DEPTH_EXTENSIONS)})")
    return files


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
