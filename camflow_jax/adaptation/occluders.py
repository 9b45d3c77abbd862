"""Occluders pasted into footage pairs while fine-tuning (docs/adaptation.md, "Occluders").

The teacher labels the camera's motion. A clip whose training frames never show a large object
moving by itself teaches the network nothing about ignoring one, and the adapted network follows
the first such object it meets (tree.avi's hand, which enters only in the clip's last third). So
each footage pair of a step gets, with the probability ``AdaptConfig.occluders``, an elliptical
patch cut from a frame of the same clip, pasted at one place in the first image and shifted by a
random amount in the second; the label stays the camera's motion. numpy only, on the network-size
images the fine-tuning loop feeds.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Occluder", "sample", "paste", "occlude", "AREA", "MAX_SHIFT"]

#: The occluder's area, as a share of the image's (drawn uniformly between the two).
AREA = (0.05, 0.35)
#: The occluder's shift between the two images, at most this share of the image's width (drawn
#: uniformly in a disk).
MAX_SHIFT = 0.15


@dataclasses.dataclass(frozen=True)
class Occluder:
    """An ellipse of semi-axes ``radii`` (ry, rx) cut around ``source_center`` (y, x) of the
    source image and drawn around ``center1`` in the first image and ``center2`` in the second
    (integer pixels)."""
    radii: tuple[int, int]
    source_center: tuple[int, int]
    center1: tuple[int, int]
    center2: tuple[int, int]


def sample(rng: np.random.Generator, height: int, width: int, area=AREA, max_shift: float = MAX_SHIFT) -> Occluder:
    """A random :class:`Occluder` for ``height`` x ``width`` images: its area a uniform share in
    ``area``, its aspect within 2:1 either way, its first centre anywhere in the image (it may
    stick out), its shift uniform in a disk of radius ``max_shift * width``."""
    a = rng.uniform(*area) * height * width
    aspect = float(np.exp(rng.uniform(-0.7, 0.7)))  # rx / ry
    ry = int(np.clip(round(np.sqrt(a / (np.pi * aspect))), 1, (height - 1) // 2))
    rx = int(np.clip(round(ry * aspect), 1, (width - 1) // 2))
    source = (int(rng.integers(ry, height - ry)), int(rng.integers(rx, width - rx)))
    c1 = (int(rng.integers(0, height)), int(rng.integers(0, width)))
    r = max_shift * width * np.sqrt(rng.uniform())
    phi = rng.uniform(0, 2 * np.pi)
    c2 = (c1[0] + int(round(r * np.sin(phi))), c1[1] + int(round(r * np.cos(phi))))
    return Occluder((ry, rx), source, c1, c2)


def _mask(height: int, width: int, center, radii) -> np.ndarray:
    y, x = np.ogrid[:height, :width]
    return ((y - center[0]) / radii[0]) ** 2 + ((x - center[1]) / radii[1]) ** 2 <= 1.0


def paste(image: np.ndarray, source: np.ndarray, occ: Occluder, which: int) -> tuple[np.ndarray, np.ndarray]:
    """``(copy of image with the occluder drawn, its mask [h, w] bool)``; ``which`` 1 or 2 picks
    the centre. Pixel (y, x) inside the ellipse takes ``source[y - c + s]``."""
    h, w = image.shape[:2]
    c = occ.center1 if which == 1 else occ.center2
    m = _mask(h, w, c, occ.radii)
    ys, xs = np.nonzero(m)
    out = image.copy()
    out[ys, xs] = source[ys - c[0] + occ.source_center[0], xs - c[1] + occ.source_center[1]]
    return out, m


def occlude(img1: np.ndarray, img2: np.ndarray, source: np.ndarray, rng: np.random.Generator,
            **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """``img1``, ``img2`` (``[h, w, C]``) with one random occluder cut from ``source`` (same
    shape) pasted into both, moved between them (:func:`sample`'s ``kwargs``)."""
    occ = sample(rng, *img1.shape[:2], **kwargs)
    return paste(img1, source, occ, 1)[0], paste(img2, source, occ, 2)[0]
