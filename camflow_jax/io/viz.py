"""Pictures of flows and basis sets (numpy + OpenCV; matplotlib only where a figure is made)."""

from __future__ import annotations

import cv2
import numpy as np

__all__ = ["flow_to_color", "basis_grid"]


def flow_to_color(flow, max_magnitude: float | None = None) -> np.ndarray:
    """Middlebury-style colour coding of a flow ``[H, W, 2]`` -> uint8 RGB ``[H, W, 3]``.

    Hue encodes direction, saturation the magnitude relative to ``max_magnitude`` (default: the
    flow's own maximum). Non-finite vectors are drawn black.
    """
    flow = np.asarray(flow, np.float32)
    finite = np.all(np.isfinite(flow), axis=-1)
    f = np.where(finite[..., None], flow, 0.0)
    mag = np.hypot(f[..., 0], f[..., 1])
    ang = np.arctan2(-f[..., 1], -f[..., 0]) / np.pi  # [-1, 1]
    scale = max_magnitude if max_magnitude else float(mag.max()) or 1.0
    hsv = np.zeros(flow.shape[:2] + (3,), np.uint8)
    hsv[..., 0] = ((ang + 1.0) * 90.0).astype(np.uint8) % 180
    hsv[..., 1] = np.clip(mag / scale * 255.0, 0, 255).astype(np.uint8)
    hsv[..., 2] = 255
    rgb = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
    rgb[~finite] = 0
    return rgb


def basis_grid(bases, cols: int = 6, pad: int = 2, per_basis_scale: bool = True) -> np.ndarray:
    """Tiles a basis set ``[N, H, W, 2]`` as flow-colour images into one uint8 RGB picture."""
    bases = np.asarray(bases, np.float32)
    if bases.ndim != 4 or bases.shape[-1] != 2:
        raise ValueError(f"expected bases [N, H, W, 2], got {bases.shape}")
    n, h, w, _ = bases.shape
    rows = -(-n // cols)
    out = np.full((rows * (h + pad) + pad, cols * (w + pad) + pad, 3), 255, np.uint8)
    global_max = float(np.nanmax(np.hypot(bases[..., 0], bases[..., 1]))) or 1.0
    for i in range(n):
        r, c = divmod(i, cols)
        tile = flow_to_color(bases[i], None if per_basis_scale else global_max)
        out[pad + r * (h + pad): pad + r * (h + pad) + h, pad + c * (w + pad): pad + c * (w + pad) + w] = tile
    return out
