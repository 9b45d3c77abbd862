"""Tiny synthetic clips with a known camera path, to check the stabilization metrics.

Frame t shows a fixed textured scene moved by a known similarity about the frame centre: the
content of frame 0 is rotated by ``theta[t]`` radians about the centre c and shifted by
``(tx[t], ty[t])`` pixels, i.e. the homography frame 0 -> frame t is

    P_t = T(c + t_t) R(theta_t) T(-c),

which is exactly what :func:`camflow_jax.stabilization.metrics.path_signals` reads back as
(tx, ty, theta). The scene is a texture larger than the frame (no border is ever exposed), so
any black border in a clip is one added on purpose (:func:`with_black_border`).

:func:`mp4v_roundtrip` writes frames through ``cv2.VideoWriter`` (fourcc ``mp4v``, the codec
OpenCV's default ``.mp4`` writer uses) and reads them back, to measure what lossy encoding does
to a metric.
"""

from __future__ import annotations

import os
import tempfile

import cv2
import numpy as np

__all__ = ["scene", "render", "path_homographies", "sway_path", "jitter_path", "clip", "mp4v_roundtrip",
           "with_black_border"]


def scene(height: int, width: int, seed: int = 0, margin: float = 0.6) -> np.ndarray:
    """Textured scene ``[(1 + 2 margin) H, (1 + 2 margin) W, 3]`` uint8: smooth multi-scale noise
    plus anti-aliased shapes (corners and blobs for feature matching)."""
    rng = np.random.default_rng([seed, 907])
    sh, sw = int(round(height * (1 + 2 * margin))), int(round(width * (1 + 2 * margin)))
    img = np.zeros((sh, sw, 3), np.float64)
    for cell, amp in ((32, 60.0), (8, 40.0), (3, 20.0)):
        small = rng.uniform(-1, 1, (sh // cell + 2, sw // cell + 2, 3))
        img += amp * cv2.resize(small, (sw, sh), interpolation=cv2.INTER_CUBIC)
    img = np.clip(img + 128, 0, 255).astype(np.uint8)
    for _ in range(int(sh * sw / 120)):
        x, y = rng.uniform(0, sw), rng.uniform(0, sh)
        r = float(np.exp(rng.uniform(np.log(1.5), np.log(6.0))))
        col = tuple(float(v) for v in rng.uniform(0, 255, 3))
        if rng.random() < 0.5:
            cv2.circle(img, (int(x), int(y)), int(round(r)), col, -1, cv2.LINE_AA)
        else:
            cv2.rectangle(img, (int(x - r), int(y - r / 2)), (int(x + r), int(y + r / 2)), col,
                          -1, cv2.LINE_AA)
    return img


def render(scene_img, tx, ty, theta, height: int, width: int) -> np.ndarray:
    """Frames ``[T, H, W, 3]`` uint8 of ``scene_img`` (its centre at the frame centre at rest)
    moved by the path (module doc): content rotated by ``theta`` about the centre, then
    shifted by (tx, ty)."""
    sh, sw = scene_img.shape[:2]
    c = np.array([(width - 1) / 2.0, (height - 1) / 2.0])
    cs = np.array([(sw - 1) / 2.0, (sh - 1) / 2.0])
    frames = []
    for x, y, a in zip(np.asarray(tx, float), np.asarray(ty, float), np.asarray(theta, float)):
        R = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        A = np.zeros((2, 3))
        A[:, :2] = R
        A[:, 2] = c + np.array([x, y]) - R @ cs  # scene point cs lands on c + t
        frames.append(cv2.warpAffine(scene_img, A, (width, height), flags=cv2.INTER_LINEAR,
                                     borderMode=cv2.BORDER_REFLECT))
    return np.stack(frames)


def path_homographies(tx, ty, theta, height: int, width: int) -> np.ndarray:
    """``[T, 3, 3]`` homographies frame 0 -> frame t of the path (module doc): the true
    camera path as :func:`camflow_jax.stabilization.metrics.compose_path` builds it."""
    c = np.array([(width - 1) / 2.0, (height - 1) / 2.0])
    G = []
    for x, y, a in zip(np.asarray(tx, float), np.asarray(ty, float), np.asarray(theta, float)):
        g = np.eye(3)
        g[:2, :2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
        g[:2, 2] = c + np.array([x, y]) - g[:2, :2] @ c
        G.append(g)
    G = np.stack(G)
    return G @ np.linalg.inv(G[0])


def sway_path(n: int, fps: float = 30.0, amp_px: float = 20.0, hz: float = 0.3,
              amp_rad: float = 0.0, phase: float = 0.3):
    """A smooth sway: tx = amp_px sin(2 pi hz t + phase), ty = amp_px / 2 cos(...), theta =
    amp_rad sin(...). Returns (tx, ty, theta), each ``[n]``."""
    t = np.arange(n) / fps
    s = np.sin(2 * np.pi * hz * t + phase)
    return amp_px * s, 0.5 * amp_px * np.cos(2 * np.pi * hz * t + phase), amp_rad * s


def jitter_path(n: int, seed: int = 0, px: float = 3.0, rad: float = 0.0):
    """White (i.i.d. Gaussian) jitter of ``px`` pixels and ``rad`` radians std per frame."""
    rng = np.random.default_rng([seed, 311])
    return rng.normal(0, px, n), rng.normal(0, px, n), rng.normal(0, rad, n)


def clip(path, height: int = 96, width: int = 160, seed: int = 0,
         noise_std: float = 0.0) -> np.ndarray:
    """Frames of a fresh scene moved by ``path`` = (tx, ty, theta); ``noise_std`` adds seeded
    Gaussian sensor noise (grey levels), so that even a still camera gives changing frames."""
    frames = render(scene(height, width, seed), *path, height, width)
    if noise_std > 0:
        rng = np.random.default_rng([seed, 523])
        frames = np.clip(frames + rng.normal(0, noise_std, frames.shape), 0, 255).astype(np.uint8)
    return frames


def mp4v_roundtrip(frames, fps: float = 30.0) -> np.ndarray:
    """``frames`` written by ``cv2.VideoWriter`` with fourcc mp4v and read back (uint8 BGR)."""
    frames = np.asarray(frames)
    h, w = frames.shape[1:3]
    fd, path = tempfile.mkstemp(suffix=".mp4")
    os.close(fd)
    try:
        wr = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
        if not wr.isOpened():
            raise RuntimeError("cv2.VideoWriter cannot open an mp4v writer")
        for f in frames:
            wr.write(np.ascontiguousarray(f))
        wr.release()
        cap = cv2.VideoCapture(path)
        out = []
        while True:
            ok, f = cap.read()
            if not ok:
                break
            out.append(f)
        cap.release()
    finally:
        os.remove(path)
    if len(out) != len(frames):
        raise RuntimeError(f"mp4v round trip returned {len(out)} of {len(frames)} frames")
    return np.stack(out)


def with_black_border(frames, left: int = 0, right: int = 0, top: int = 0,
                      bottom: int = 0) -> np.ndarray:
    """Copy of ``frames`` with black bands of the given widths (pixels) on each side."""
    out = np.array(frames, copy=True)
    h, w = out.shape[1:3]
    if left:
        out[:, :, :left] = 0
    if right:
        out[:, :, w - right:] = 0
    if top:
        out[:, :top] = 0
    if bottom:
        out[:, h - bottom:] = 0
    return out
