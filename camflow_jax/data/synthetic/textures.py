"""Textures for the synthetic scenes: procedural images, photo folders, mip pyramids.

Every texture is a square uint8 image of side ``TEXTURE_SIZE`` (a power of two) stored as an RGBA
mip pyramid ``(level0, level1, ...)`` built with ``cv2.pyrDown``. Level ``L`` pixel ``i`` is
centred on level-0 pixel ``2^L i``, so a level-0 texel coordinate ``x`` reads ``x / 2^L`` at level
``L``; the power-of-two side keeps wrap-around tiling exact at every level.

Procedural textures mix multi-octave value noise (1/f-like spectrum: gradients for photometric
losses at every scale) with random shapes, lines and occasional regular patterns (corners and
blobs for SIFT). Everything is drawn from the numpy Generator passed in: no global RNG state.
"""

from __future__ import annotations

import os

import cv2
import numpy as np

__all__ = [
    "TEXTURE_SIZE",
    "procedural_texture",
    "procedural_textures",
    "list_texture_files",
    "load_texture",
    "mip_pyramid",
]

#: Side of every texture (level 0 of its pyramid).
TEXTURE_SIZE = 512
_MIN_LEVEL_SIZE = 8
_PHOTO_EXTENSIONS = (".png", ".jpg", ".jpeg")


def mip_pyramid(texture: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(level0, level1, ...)`` down to ``_MIN_LEVEL_SIZE`` px, each a ``cv2.pyrDown`` of the last
    (5-tap Gaussian, then decimation by 2; wrap-around borders so the tiling stays seamless).

    Takes a square uint8 RGB (or RGBA) texture; every level is RGBA with alpha 255 (the alpha
    is unused: four channels make a texel one 32-bit word, which the renderer moves whole).
    """
    texture = np.ascontiguousarray(texture)
    if (texture.ndim != 3 or texture.shape[2] not in (3, 4) or texture.shape[0] != texture.shape[1]
            or texture.dtype != np.uint8):
        raise ValueError(f"texture must be square uint8 RGB [S, S, 3], got {texture.dtype} {texture.shape}")
    if texture.shape[2] == 3:
        texture = cv2.cvtColor(texture, cv2.COLOR_RGB2RGBA)
    levels = [texture]
    while levels[-1].shape[0] // 2 >= _MIN_LEVEL_SIZE:
        levels.append(cv2.pyrDown(levels[-1], borderType=cv2.BORDER_WRAP))
    return tuple(levels)


def _value_noise(rng: np.random.Generator, size: int, channels: int, beta: float) -> np.ndarray:
    """Multi-octave value noise in [0, 1]: octave k is uniform noise on a (2^k)^2 lattice weighted
    by (2^k)^-beta (beta ~ 1 gives a natural-image-like 1/f amplitude spectrum; smaller beta is
    rougher). Octaves are accumulated coarse to fine, the running sum upsampled 2x (bicubic,
    wrap-around so the texture tiles) before the next octave is added: one full-size resize's
    worth of work instead of one per octave."""
    k = 2
    acc = rng.random((k, k, channels), dtype=np.float32) * np.float32(k ** -beta)
    while k < size:
        k *= 2
        padded = np.pad(acc.reshape(k // 2, k // 2, channels), ((2, 2), (2, 2), (0, 0)), mode="wrap")
        up = cv2.resize(padded, (k + 8, k + 8), interpolation=cv2.INTER_CUBIC)
        acc = up.reshape(k + 8, k + 8, channels)[4:-4, 4:-4]
        if k < size:  # the finest octave stays smooth (no per-pixel white noise)
            acc = acc + rng.random((k, k, channels), dtype=np.float32) * np.float32(k ** -beta)
    out = np.ascontiguousarray(acc)
    out -= out.min()
    out /= max(float(out.max()), 1e-6)
    return out


def _random_colour(rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(0.0, 255.0, 3)


def procedural_texture(rng: np.random.Generator, size: int = TEXTURE_SIZE) -> np.ndarray:
    """One procedural RGB texture ``[size, size, 3]`` uint8 drawn from ``rng``.

    Layers: (1) a colour ramp over a palette of 2–4 random colours indexed by multi-octave
    value noise, modulated by a second noise field (luminance) plus per-channel grain; (2) with probability 0.35 a regular pattern
    (stripes, checker or bricks) blended in; (3) 80–300 random shapes (log-uniform sizes: many small ones, blobs and corners at every scale) (filled or outlined
    circles, ellipses, rectangles, polygons, lines) with anti-aliased edges; (4) a light Gaussian
    blur (sigma 0.6 px) so that texels stay band-limited (less aliasing when rendered).
    """
    if size < 16 or size & (size - 1):
        raise ValueError(f"texture size must be a power of two >= 16, got {size}")
    beta = rng.uniform(0.6, 1.3)
    base = _value_noise(rng, size, 1, beta)[..., 0]
    n_col = int(rng.integers(2, 5))
    palette = np.stack([_random_colour(rng) for _ in range(n_col)]).astype(np.float32)
    # Colour ramp: piecewise-linear interpolation through the palette along the noise value.
    pos = base * (n_col - 1)
    i0 = np.minimum(pos.astype(np.int32), n_col - 2)
    f = (pos - i0)[..., None]
    img = palette[i0] * (1.0 - f) + palette[i0 + 1] * f
    # Luminance modulation and per-channel grain: no large flat regions, gradients everywhere.
    lum = _value_noise(rng, size, 1, rng.uniform(0.5, 1.1))
    img *= rng.uniform(0.35, 0.75) + rng.uniform(0.5, 0.9) * lum
    img += (_value_noise(rng, size, 3, rng.uniform(0.3, 0.9)) - 0.5) * rng.uniform(25.0, 70.0)

    if rng.random() < 0.35:
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
        period = float(2 ** rng.integers(3, 7))  # divides size: keeps the tiling seamless
        kind = int(rng.integers(0, 3))
        if kind == 0:  # stripes
            pat = 0.5 + 0.5 * np.sin(2 * np.pi * (xx if rng.random() < 0.5 else yy) / period)
        elif kind == 1:  # checker
            pat = ((np.floor(xx / period) + np.floor(yy / period)) % 2).astype(np.float32)
        else:  # bricks with mortar lines
            row = np.floor(yy / (period / 2))
            xs = (xx + (row % 2) * period / 2) % period
            ys = yy % (period / 2)
            pat = ((xs > 1.5) & (ys > 1.5)).astype(np.float32)
        pat = cv2.GaussianBlur(pat, (0, 0), 0.8)
        tone = _random_colour(rng).astype(np.float32)
        a = rng.uniform(0.3, 0.8)
        img = img * (1 - a * pat[..., None]) + tone * (a * pat[..., None])

    img = np.clip(img, 0, 255).astype(np.uint8)
    n_shapes = int(rng.integers(80, 301))
    for _ in range(n_shapes):
        col = tuple(float(c) for c in _random_colour(rng))
        kind = int(rng.integers(0, 5))
        c = rng.integers(0, size, 2)
        r = int(np.exp(rng.uniform(np.log(2.0), np.log(max(3.0, size / 8)))))
        thick = -1 if rng.random() < 0.6 else int(rng.integers(1, 5))
        if kind == 0:
            cv2.circle(img, (int(c[0]), int(c[1])), r, col, thick, cv2.LINE_AA)
        elif kind == 1:
            axes = (r, int(rng.integers(2, r + 2)))
            cv2.ellipse(img, (int(c[0]), int(c[1])), axes, float(rng.uniform(0, 180)), 0, 360, col,
                        thick, cv2.LINE_AA)
        elif kind == 2:
            d = rng.integers(3, max(4, size // 6), 2)
            cv2.rectangle(img, (int(c[0]), int(c[1])), (int(c[0] + d[0]), int(c[1] + d[1])), col,
                          thick, cv2.LINE_AA)
        elif kind == 3:
            n = int(rng.integers(3, 7))
            pts = (c + rng.normal(0, r, (n, 2))).astype(np.int32)
            if thick < 0:
                cv2.fillPoly(img, [pts], col, cv2.LINE_AA)
            else:
                cv2.polylines(img, [pts], True, col, thick, cv2.LINE_AA)
        else:
            e = c + rng.normal(0, size / 4, 2)
            cv2.line(img, (int(c[0]), int(c[1])), (int(e[0]), int(e[1])), col,
                     int(rng.integers(1, 5)), cv2.LINE_AA)
    return cv2.GaussianBlur(img, (0, 0), 0.6, borderType=cv2.BORDER_WRAP)


def procedural_textures(seed: int, count: int, size: int = TEXTURE_SIZE) -> list[tuple[np.ndarray, ...]]:
    """``count`` mip pyramids of procedural textures; texture ``j`` is a pure function of
    ``(seed, j, size)``."""
    return [mip_pyramid(procedural_texture(np.random.default_rng([seed, 7919, j]), size))
            for j in range(count)]


def list_texture_files(directory: str | os.PathLike) -> list[str]:
    """Sorted paths of the ``.png`` / ``.jpg`` / ``.jpeg`` files directly inside ``directory``.

    Raises FileNotFoundError if the folder does not exist and ValueError if it holds no photo.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"textures_dir {directory!r} does not exist or is not a directory")
    files = sorted(
        os.path.join(directory, n) for n in os.listdir(directory)
        if n.lower().endswith(_PHOTO_EXTENSIONS) and os.path.isfile(os.path.join(directory, n)))
    if not files:
        raise ValueError(f"textures_dir {directory!r} contains no .png/.jpg/.jpeg images")
    return files


def load_texture(path: str, size: int = TEXTURE_SIZE) -> tuple[np.ndarray, ...]:
    """Reads a photo, keeps its central square, resizes it to ``size`` (area filter) and returns
    its mip pyramid. Raises ValueError naming the file if it cannot be decoded."""
    bgr = cv2.imread(path, cv2.IMREAD_COLOR)
    if bgr is None or bgr.size == 0:
        raise ValueError(f"cannot decode texture image {path!r} (corrupt or not an image)")
    h, w = bgr.shape[:2]
    s = min(h, w)
    y0, x0 = (h - s) // 2, (w - s) // 2
    square = bgr[y0:y0 + s, x0:x0 + s]
    interp = cv2.INTER_AREA if s > size else cv2.INTER_CUBIC
    rgb = cv2.cvtColor(cv2.resize(square, (size, size), interpolation=interp), cv2.COLOR_BGR2RGB)
    return mip_pyramid(rgb)
