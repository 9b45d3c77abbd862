"""The real images Debian's ``opencv-doc`` package ships (no download): the Middlebury 'Aloe'
stereo pair and ``vtest.avi`` (docs/real_images.md), read for the real-image studies
(:mod:`tools.bench.real`, ``python tools/eval_real.py``) and the figures.
"""

from __future__ import annotations

import os
from itertools import islice
from pathlib import Path

import cv2
import numpy as np

from camflow_jax.io.video import FrameSource

__all__ = ["OPENCV_DOC", "MISSING_DATA", "STEREO_FILES", "VIDEO_FILE", "load_stereo", "read_frames", "video_fps"]

#: Where Debian's ``opencv-doc`` installs OpenCV's sample data.
OPENCV_DOC = "/usr/share/doc/opencv-doc/examples/data"
MISSING_DATA = "needs Debian's opencv-doc package: apt-get install opencv-doc"
STEREO_FILES = ("aloeL.jpg", "aloeR.jpg", "aloeGT.png")
VIDEO_FILE = "vtest.avi"


def load_stereo(data) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Aloe from ``data``: (left RGB uint8, right RGB uint8, disparity float32 [H, W] of the
    left view in full-size pixels, valid bool [H, W]; 0 in the PNG = unknown)."""
    data = Path(data)
    left = cv2.imread(str(data / STEREO_FILES[0]), cv2.IMREAD_COLOR)
    right = cv2.imread(str(data / STEREO_FILES[1]), cv2.IMREAD_COLOR)
    gt = cv2.imread(str(data / STEREO_FILES[2]), cv2.IMREAD_UNCHANGED)
    if gt is None or left is None or right is None:
        raise ValueError(f"cannot read the stereo files in {data}")
    left, right = cv2.cvtColor(left, cv2.COLOR_BGR2RGB), cv2.cvtColor(right, cv2.COLOR_BGR2RGB)
    if gt.ndim == 3:
        gt = gt[..., 0]
    for name, img in ((STEREO_FILES[1], right), (STEREO_FILES[2], gt)):
        if img.shape[:2] != left.shape[:2]:
            raise ValueError(f"{data / name} is {img.shape[1]}x{img.shape[0]} but {data / STEREO_FILES[0]} is "
                             f"{left.shape[1]}x{left.shape[0]}: the pair and its ground truth must have one size")
    disp = gt.astype(np.float32)
    return left, right, disp, disp > 0


def read_frames(path, count: int) -> list[np.ndarray]:
    """The first ``count`` frames of a video (RGB uint8); at least 4 are needed."""
    frames = list(islice(FrameSource(os.fspath(path)), count))
    if len(frames) < 4:
        raise ValueError(f"{path}: read {len(frames)} frames, need at least 4")
    return frames


def video_fps(path, default: float = 25.0) -> float:
    """The frame rate a video file declares (``default`` when it declares none)."""
    cap = cv2.VideoCapture(os.fspath(path))
    fps = float(cap.get(cv2.CAP_PROP_FPS) or 0) or default
    cap.release()
    return fps
