"""Reading images from disk (one place, one error wording)."""

from __future__ import annotations

import os

import cv2
import numpy as np


def read_rgb(path) -> np.ndarray:
    """uint8 RGB ``[H, W, 3]``; FileNotFoundError / ValueError naming the file otherwise."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"image not found: {path}")
    img = cv2.imread(path, cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError(f"cannot decode image {path}")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
