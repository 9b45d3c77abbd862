"""Photometric conditions of the synthetic scenes: the five GHOF-like categories.

``sample_appearance(rng, category, depth_scale, width)`` draws the parameters a pair (or a clip)
shares: fog density and airlight, darkness and noise level, rain direction and density, snow
density. ``apply_appearance(image, depth, params, rng)`` turns one clean rendering (float RGB,
0..255) into a uint8 frame, drawing the per-frame parts (exposure jitter, sensor noise, rain
streaks, snow flakes) from ``rng``. Categories:

- every category: exposure gain ``g ~ U(0.97, 1.03)`` and bias ``b ~ U(-3, 3)`` drawn per frame.
- RE: Gaussian noise sigma ``~ U(0.5, 1.5)``.
- FOG: Koschmieder haze ``I' = I T + A (1 - T)``, ``T = exp(-beta z)``, with
  ``beta = -ln(T_far) / depth_scale``, ``T_far ~ U(0.05, 0.35)`` and grey-blue airlight
  ``A ~ U(170, 235)``; density jitters by ±3 % between frames.
- LL: darkening ``k ~ U(0.1, 0.3)`` (applied with the exposure), a colour cast, then
  Poisson-Gaussian sensor noise
  ``sigma^2 = a I + b^2`` (``a ~ U(0.3, 1.5)``, ``b ~ U(1, 3)``), independent per channel.
- RAIN: 300–1200 streaks per 576x320 (scaled by area), a common slant ``~ U(-25, 25)`` degrees
  and length ``~ U(10, 35)`` px (scaled by width), brightness ``~ U(25, 70)``, redrawn each frame
  (rain moves), softened, plus a 10 % contrast loss.
- SNOW: 150–700 flakes per 576x320, radius 1–4 px (scaled), redrawn each frame, soft edges, plus
  a light white haze.

Weather particles and noise are nuisances on top of the camera-induced motion: they do not
change the flow labels or valid masks (as in GHOF-Cam, where only dynamic objects are masked).
"""

from __future__ import annotations

import functools
from statistics import NormalDist

import cv2
import numpy as np

from camflow_jax.data.synthetic.spec import APPEARANCE, REFERENCE_HEIGHT, REFERENCE_WIDTH

__all__ = ["CATEGORIES", "sample_appearance", "apply_appearance", "standard_normal"]

#: GHOF-like photometric categories, in the order used for ``category_id``.
CATEGORIES = ("RE", "FOG", "LL", "RAIN", "SNOW")


def sample_appearance(rng: np.random.Generator, category: str, depth_scale: float,
                      width: int, height: int | None = None) -> dict:
    """Parameters shared by the frames of a pair/clip (see the module docstring; the numbers:
    :data:`camflow_jax.data.synthetic.spec.APPEARANCE`)."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; expected one of {CATEGORIES}")
    s = APPEARANCE
    height = height if height is not None else int(round(width * REFERENCE_HEIGHT / REFERENCE_WIDTH))
    area = width * height / (float(REFERENCE_WIDTH) * REFERENCE_HEIGHT)
    scale = width / float(REFERENCE_WIDTH)
    p = {"category": category, "gain_jitter": s.gain_jitter, "bias_jitter": s.bias_jitter,
         "noise": float(rng.uniform(*s.noise))}
    if category == "FOG":
        t_far = rng.uniform(*s.fog_transmission)
        p["beta"] = float(-np.log(t_far) / max(depth_scale, 1e-6))
        p["airlight"] = (rng.uniform(*s.airlight) * (1 + rng.uniform(*s.airlight_jitter, 3))
                         + np.array(s.airlight_tint)).tolist()
    elif category == "LL":
        p["dark"] = float(rng.uniform(*s.dark))
        p["cast"] = (1 + rng.uniform(*s.cast, 3)).tolist()
        p["shot"] = float(rng.uniform(*s.shot))
        p["read"] = float(rng.uniform(*s.read))
    elif category == "RAIN":
        p["count"] = int(rng.integers(*s.rain_count) * area)
        p["angle"] = float(np.deg2rad(rng.uniform(*s.rain_angle)))
        p["length"] = float(rng.uniform(*s.rain_length) * scale)
        p["brightness"] = float(rng.uniform(*s.rain_brightness))
    elif category == "SNOW":
        p["count"] = int(rng.integers(*s.snow_count) * area)
        p["max_radius"] = max(1, int(round(s.snow_radius * scale)))
        p["haze"] = float(rng.uniform(*s.snow_haze))
    return p


@functools.lru_cache(maxsize=1)
def normal_quantiles() -> np.ndarray:
    """Standard-normal quantiles at (k + 1/2) / 65536, k = 0..65535 (float32, built once)."""
    inv = NormalDist().inv_cdf
    return np.array([inv((k + 0.5) / 65536) for k in range(65536)], np.float32)


def standard_normal(rng: np.random.Generator, shape) -> np.ndarray:
    """Float32 standard-normal samples via inverse-CDF lookup of 16 random bits each
    (about 3x cheaper than ``rng.standard_normal``; tails truncated at ±4.3 sigma, which is
    immaterial for sensor noise)."""
    n = int(np.prod(shape))
    bits = np.frombuffer(rng.bytes(2 * n), "<u2")
    return normal_quantiles().take(bits).reshape(shape)


def _rain_layer(rng, p, h, w) -> np.ndarray:
    layer = np.zeros((h, w), np.float32)
    n = p["count"]
    if n <= 0:
        return layer
    start = rng.uniform([-0.1 * w, -0.1 * h], [1.1 * w, 1.1 * h], (n, 2))
    ang = p["angle"] + rng.normal(0, APPEARANCE.streak_angle_sigma, n)
    length = p["length"] * rng.uniform(*APPEARANCE.streak_length, n)
    end = start + np.stack([np.sin(ang), np.cos(ang)], -1) * length[:, None]
    segs = np.stack([start, end], 1).round().astype(np.int32)
    # One polylines call draws every streak (no Python loop over pixels or streaks).
    cv2.polylines(layer, list(segs), False, 1.0, 1, cv2.LINE_AA)
    return cv2.GaussianBlur(layer, (0, 0), 0.7) * np.float32(p["brightness"])


def _snow_layer(rng, p, h, w) -> np.ndarray:
    layer = np.zeros((h, w), np.float32)
    n = p["count"]
    xs = rng.integers(0, w, n)
    ys = rng.integers(0, h, n)
    # Many small flakes, few big ones.
    rs = np.minimum(rng.geometric(APPEARANCE.flake_radius_p, n), p["max_radius"])
    alpha = rng.uniform(*APPEARANCE.flake_opacity, n)
    for x, y, r, a in zip(xs.tolist(), ys.tolist(), rs.tolist(), alpha.tolist()):
        cv2.circle(layer, (x, y), r, a, -1, cv2.LINE_AA)
    return np.minimum(cv2.GaussianBlur(layer, (0, 0), 0.8), 1.0)


def _scalar(v) -> tuple:
    """Per-channel constant as an OpenCV Scalar (cv2 applies it per channel in one pass; numpy
    broadcasting over a trailing axis of size 3 is several times slower)."""
    v = np.broadcast_to(np.asarray(v, np.float64), (3,))
    return (float(v[0]), float(v[1]), float(v[2]), 0.0)


def _rgb(plane: np.ndarray) -> np.ndarray:
    """``[H, W]`` float32 -> ``[H, W, 3]`` with the plane in every channel."""
    return cv2.cvtColor(np.ascontiguousarray(plane, np.float32), cv2.COLOR_GRAY2RGB)


def apply_appearance(image: np.ndarray, depth: np.ndarray, params: dict,
                     rng: np.random.Generator) -> np.ndarray:
    """One frame: clean float RGB ``[H, W, 3]`` (0..255) and its depth -> uint8 RGB.

    Order: weather (fog / rain / snow) -> exposure ``g I + b`` -> (LL: darkening and colour
    cast) -> sensor noise -> rounding to uint8. Works in place on one float32 copy with OpenCV
    arithmetic (this runs twice per sample).
    """
    img = np.array(image, np.float32, copy=True)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"image must be [H, W, 3], got shape {img.shape}")
    h, w = img.shape[:2]
    cat = params["category"]
    f32 = np.float32
    gain = float(1 + rng.uniform(-params["gain_jitter"], params["gain_jitter"]))
    bias = float(rng.uniform(-params["bias_jitter"], params["bias_jitter"]))
    if cat == "FOG":
        beta = params["beta"] * rng.uniform(*APPEARANCE.fog_frame_jitter)
        trans = _rgb(cv2.exp(np.asarray(depth, f32) * f32(-beta)))
        air = _scalar(params["airlight"])
        cv2.subtract(img, air, dst=img)  # I T + A (1 - T) = A + (I - A) T
        cv2.multiply(img, trans, dst=img)
        cv2.add(img, air, dst=img)
    elif cat == "RAIN":
        img *= f32(0.9)
        img += f32(0.1 * 128)
        cv2.add(img, _rgb(_rain_layer(rng, params, h, w)), dst=img)
    elif cat == "SNOW":
        keep = _rgb(_snow_layer(rng, params, h, w))
        np.subtract(f32(1), keep, out=keep)  # 1 - m
        haze = f32(params["haze"])
        img *= f32(1) - haze
        img += haze * f32(255) - f32(245)  # I (1 - m) + 245 m = 245 + (I - 245)(1 - m)
        cv2.multiply(img, keep, dst=img)
        img += f32(245)
    if cat == "LL":
        dark = float(params["dark"])
        cv2.multiply(img, _scalar(np.asarray(params["cast"]) * gain * dark), dst=img)
        img += f32(bias * dark)
        np.maximum(img, f32(0), out=img)
        sigma = img * f32(params["shot"])  # Poisson-Gaussian: var = a I + b^2
        sigma += f32(params["read"] ** 2)
        np.sqrt(sigma, out=sigma)
    else:
        img *= f32(gain)
        img += f32(bias)
        sigma = f32(params["noise"])
    noise = standard_normal(rng, img.shape)
    noise *= sigma
    img += noise
    img += f32(0.5)
    np.clip(img, 0, 255, out=img)
    return img.astype(np.uint8)
