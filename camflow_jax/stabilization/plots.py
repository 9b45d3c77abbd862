"""Figures for stabilization reports (matplotlib, object API: no pyplot global state) and the
KLT point tracker whose trajectories they show.

* :func:`plot_camera_path` — camera path before/after: centre translation x, y (pixels) and
  rotation (degrees) of the composed inter-frame homographies (``metrics.path_signals``).
* :func:`plot_trajectories` — x and y trajectories of tracked scene points (as in the paper's
  tracked-point figure): dashed = input, solid = stabilized, one colour per point.
"""

from __future__ import annotations

import cv2
import numpy as np

from camflow_jax.geometry.classical import lk_track, to_gray_u8

__all__ = ["PointTracker", "plot_camera_path", "plot_trajectories", "COLORS"]

COLORS = ("tab:red", "tab:green", "tab:blue", "tab:orange", "tab:purple", "tab:brown")


class PointTracker:
    """Pyramidal Lucas-Kanade tracking of a few points through a frame stream.

    ``update(frame)`` for every frame in order; the first call uses ``start`` points (``[N, 2]``)
    or picks ``num_points`` strong corners (``cv2.goodFeaturesToTrack``) in the central region,
    spread apart. A point is dropped (NaN from then on) when LK fails or its forward-backward
    error exceeds 1 pixel. ``tracks`` is ``[T, N, 2]``.
    """

    def __init__(self, num_points: int = 3, start=None):
        self.num_points = num_points
        self.start = None if start is None else np.asarray(start, np.float32).reshape(-1, 2)
        self._prev = None
        self._pts = None
        self.rows: list[np.ndarray] = []

    def _pick(self, gray):
        h, w = gray.shape
        mask = np.zeros_like(gray)
        mask[h // 5: h - h // 5, w // 5: w - w // 5] = 255
        pts = cv2.goodFeaturesToTrack(gray, self.num_points, 0.01, max(h, w) / 6, mask=mask)
        if pts is None:
            return np.zeros((0, 2), np.float32)
        return pts.reshape(-1, 2).astype(np.float32)

    def update(self, frame) -> None:
        gray = to_gray_u8(frame)
        if self._prev is None:
            self._pts = self.start if self.start is not None else self._pick(gray)
            self.rows.append(self._pts.copy())
        else:
            pts = self._pts.copy()
            alive = np.all(np.isfinite(pts), axis=1)
            new = np.full_like(pts, np.nan)
            if alive.any():
                # round trip within 1 px (lk_track's defaults: 21 px windows, 3 levels)
                vals, good = lk_track(self._prev, gray, pts[alive], round_trip=1.0)
                vals[~good] = np.nan
                new[alive] = vals
            self._pts = new
            self.rows.append(new.copy())
        self._prev = gray

    @property
    def tracks(self) -> np.ndarray:
        n = max((r.shape[0] for r in self.rows), default=0)
        return np.stack([np.pad(r, ((0, n - r.shape[0]), (0, 0)), constant_values=np.nan)
                         for r in self.rows]) if self.rows else np.zeros((0, 0, 2))


def stacked_axes(rows, width=7.0, height_per_row=1.7):
    """A figure of ``rows`` stacked axes sharing x (the stabilization plots' layout)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height_per_row * rows + 0.4), dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]


def plot_camera_path(path_in: dict, path_out: dict, fps: float, filename: str,
                     title: str = "") -> None:
    """Camera path before (dashed) and after (solid) stabilization; signals from
    :func:`camflow_jax.stabilization.metrics.path_signals`."""
    fig, axes = stacked_axes(3)
    n = len(path_in["tx"])
    t = np.arange(n) / fps
    for ax, key, label, scale in zip(axes, ("tx", "ty", "theta"),
                                     ("x (px)", "y (px)", "rotation (deg)"),
                                     (1.0, 1.0, 180.0 / np.pi)):
        ax.plot(t, np.asarray(path_in[key]) * scale, "--", color="0.45", lw=1.2, label="input")
        ax.plot(t[:len(path_out[key])], np.asarray(path_out[key]) * scale, "-", color="tab:blue",
                lw=1.5, label="stabilized")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize=8)
    axes[-1].set_xlabel("time (s)")
    if title:
        axes[0].set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(filename)


def plot_trajectories(tracks_in, tracks_out, fps: float, filename: str, title: str = "") -> None:
    """x (top) and y (bottom) trajectories of tracked points; dashed input, solid output."""
    tracks_in = np.asarray(tracks_in, np.float64)
    tracks_out = np.asarray(tracks_out, np.float64)
    fig, axes = stacked_axes(2)
    n = max(tracks_in.shape[0], tracks_out.shape[0])
    t = np.arange(n) / fps
    for k in range(max(tracks_in.shape[1] if tracks_in.ndim == 3 else 0,
                       tracks_out.shape[1] if tracks_out.ndim == 3 else 0)):
        col = COLORS[k % len(COLORS)]
        for ax, dim in zip(axes, (0, 1)):
            if tracks_in.ndim == 3 and k < tracks_in.shape[1]:
                ax.plot(t[:tracks_in.shape[0]], tracks_in[:, k, dim], "--", color=col, lw=1.0)
            if tracks_out.ndim == 3 and k < tracks_out.shape[1]:
                ax.plot(t[:tracks_out.shape[0]], tracks_out[:, k, dim], "-", color=col, lw=1.6)
    axes[0].set_ylabel("x (px)")
    axes[1].set_ylabel("y (px)")
    axes[1].set_xlabel("time (s)  —  dashed: input, solid: stabilized")
    for ax in axes:
        ax.grid(alpha=0.3)
    if title:
        axes[0].set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(filename)
