"""Camera-motion metrics (numpy): EPE, PME, PSNR/SSIM within masks, per-category tables.

All functions take plain arrays (numpy or anything ``np.asarray`` accepts) and return Python
floats. Flows are ``[H, W, 2]`` = (u, v) in pixels on image 1's grid (docs/design.md,
"Conventions").

Definitions (docs/design.md, "Benchmarks and metrics"; the published protocols are reproduced,
and the cleaner variants are labelled as such):

* ``epe_all_pixels`` — the published GHOF-Cam EPE: ``mean over all H*W pixels of
  |(flow - gt) * mask|``. The denominator is H*W, not the number of valid pixels, so a sample with
  a small valid area gets a small EPE. This is what the released evaluation computes.
* ``epe_valid`` — the valid-pixel mean ``sum(m |flow - gt|) / sum(m)`` (our addition).
* ``ghof_pme`` — the published GHOF "PME": EPE of the forward flow against the sample's
  ground-truth homography field over the top half of the rows (``rows < H // 2``; the bottom
  half of GHOF frames holds most of the moving foreground).
* ``cahomo_pme`` — the CAHomo point matching error: for each of the first 6 annotated pairs
  (p1, p2), ``min(|p1 + flow_f[int(y1), int(x1)] - p2|, |p2 + flow_b[int(y2), int(x2)] - p1|)``
  (flows read at integer-truncated coordinates, as in the CamFlow release), averaged over the
  points. With zero flow both terms equal |p2 - p1|. (The original homography-based CAHomo
  script took ``min(|H p1 - p2|, |H p2 - p1|)`` because the annotators did not keep a fixed image
  order; the flow form reproduced here keeps the better direction but does not undo a swapped
  annotation.)
* ``point_error`` — mean ``|p1 + flow(p1) - p2|`` with the flow read bilinearly (for sub-pixel
  synthetic correspondences).
* ``psnr`` / ``ssim`` — computed inside a mask (``form="masked"``: statistics over masked pixels
  only) or as the released evaluation did (``form="zeroed"``: both images multiplied by the mask,
  metric over the whole frame).
* ``category_table`` — per-category means and ``AVG`` = mean of the category means (each
  category weighs the same regardless of its sample count, as in the papers).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import cv2
import numpy as np

__all__ = [
    "endpoint_error_map",
    "epe_all_pixels",
    "epe_valid",
    "ghof_pme",
    "cahomo_pme",
    "point_error",
    "psnr",
    "ssim",
    "ssim_map",
    "luminance",
    "category_table",
    "AVG",
]

#: Key of the average row/column in result tables.
AVG = "AVG"


# ----------------------------------------------------------------------------- validation
def _flow(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 3 or a.shape[-1] != 2:
        raise ValueError(f"{name} must be a flow [H, W, 2], got shape {a.shape}")
    return a


def _mask(m, shape_hw: tuple[int, int], name: str = "mask") -> np.ndarray:
    if m is None:
        return np.ones(shape_hw, np.float64)
    a = np.asarray(m, dtype=np.float64)
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    if a.shape != tuple(shape_hw):
        raise ValueError(f"{name} must be [H, W] (or [H, W, 1]) matching {shape_hw}, got {np.shape(m)}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains non-finite values")
    return a


def _same_shape(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{what}: shapes differ, {a.shape} vs {b.shape}")


def _check_finite(a: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains non-finite values (NaN/inf); cannot score it")


# ----------------------------------------------------------------------------- EPE / PME
def endpoint_error_map(flow, gt) -> np.ndarray:
    """Per-pixel end-point error ``|flow - gt|_2`` as ``[H, W]`` float64."""
    f, g = _flow(flow, "flow"), _flow(gt, "gt")
    _same_shape(f, g, "endpoint_error_map")
    _check_finite(f, "flow")
    _check_finite(g, "gt")
    return np.hypot(f[..., 0] - g[..., 0], f[..., 1] - g[..., 1])


def epe_all_pixels(flow, gt, mask=None) -> float:
    """Published GHOF-Cam EPE: ``(1 / (H W)) * sum_p |(flow(p) - gt(p)) * mask(p)|``.

    For a {0, 1} mask this is ``sum(mask * |flow - gt|) / (H W)`` — the denominator counts
    every pixel, masked or not (the released evaluation multiplies both flows by the mask and
    takes a plain mean).
    """
    e = endpoint_error_map(flow, gt)
    m = _mask(mask, e.shape)
    return float(np.mean(np.abs(m) * e))


def epe_valid(flow, gt, mask=None) -> float:
    """Valid-pixel EPE ``sum(m |flow - gt|) / sum(m)``; NaN when the mask is empty."""
    e = endpoint_error_map(flow, gt)
    m = _mask(mask, e.shape)
    total = float(np.sum(m))
    if total <= 0:
        return float("nan")
    return float(np.sum(m * e) / total)


def ghof_pme(flow, homo_field) -> float:
    """Published GHOF PME: mean EPE against the homography field over rows ``[0, H // 2)``."""
    f, g = _flow(flow, "flow"), _flow(homo_field, "homo_field")
    _same_shape(f, g, "ghof_pme")
    h = f.shape[0]
    if h < 2:
        raise ValueError("ghof_pme needs at least 2 rows")
    return float(np.mean(endpoint_error_map(f[: h // 2], g[: h // 2])))


def _points(points, name: str = "points") -> np.ndarray:
    try:
        p = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError) as e:  # ragged lists
        raise ValueError(f"{name} must be a list of [[x1, y1], [x2, y2]] pairs: {e}") from None
    if p.ndim != 3 or p.shape[1:] != (2, 2):
        raise ValueError(f"{name} must have shape [N, 2, 2] (pairs of (x, y) points), got {p.shape}")
    _check_finite(p, name)
    return p


def _lookup_truncated(flow: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """flow[int(y), int(x)] with int() truncation (the reference's lookup), clamped to the frame."""
    h, w = flow.shape[:2]
    # trunc (toward zero) is what Python's int() does; clamping only matters for points that sit
    # on/over the border, which the reference code would index out of range.
    xi = np.clip(np.trunc(pts[:, 0]).astype(np.int64), 0, w - 1)
    yi = np.clip(np.trunc(pts[:, 1]).astype(np.int64), 0, h - 1)
    return flow[yi, xi]


def cahomo_pme(flow_f, points, flow_b=None, num_points: int = 6) -> float:
    """CAHomo point matching error of one pair.

    Args:
      flow_f: forward flow ``[H, W, 2]`` (image-1 grid -> image 2).
      points: ``matche_pts``: ``[N, 2, 2]`` pairs ``[[x1, y1], [x2, y2]]`` in pixels, image 1
        then image 2 (N >= num_points; the first ``num_points`` are used).
      flow_b: backward flow ``[H, W, 2]`` (image-2 grid -> image 1) or None (forward only).
    Returns:
      ``mean_j min(|p1 + flow_f[int(y1), int(x1)] - p2|, |p2 + flow_b[int(y2), int(x2)] - p1|)``.
    """
    f = _flow(flow_f, "flow_f")
    _check_finite(f, "flow_f")
    p = _points(points, "matche_pts")
    if p.shape[0] < num_points:
        raise ValueError(f"need at least {num_points} point pairs, got {p.shape[0]}")
    p = p[:num_points]
    p1, p2 = p[:, 0], p[:, 1]
    err = np.linalg.norm(p1 + _lookup_truncated(f, p1) - p2, axis=-1)
    if flow_b is not None:
        b = _flow(flow_b, "flow_b")
        _check_finite(b, "flow_b")
        err_b = np.linalg.norm(p2 + _lookup_truncated(b, p2) - p1, axis=-1)
        err = np.minimum(err, err_b)
    return float(np.mean(err))


def point_error(flow, points1, points2) -> float:
    """Mean ``|p1 + flow(p1) - p2|`` with the flow sampled bilinearly (edge-clamped) at p1."""
    f = _flow(flow, "flow")
    _check_finite(f, "flow")
    p1 = np.asarray(points1, np.float64)
    p2 = np.asarray(points2, np.float64)
    if p1.ndim != 2 or p1.shape[-1] != 2 or p1.shape != p2.shape:
        raise ValueError(f"points1/points2 must both be [N, 2], got {p1.shape} and {p2.shape}")
    if p1.shape[0] == 0:
        return float("nan")
    _check_finite(p1, "points1")
    _check_finite(p2, "points2")
    h, w = f.shape[:2]
    x = np.clip(p1[:, 0], 0, w - 1)
    y = np.clip(p1[:, 1], 0, h - 1)
    x0 = np.clip(np.floor(x).astype(np.int64), 0, max(w - 2, 0))
    y0 = np.clip(np.floor(y).astype(np.int64), 0, max(h - 2, 0))
    x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    val = (f[y0, x0] * (1 - fx) * (1 - fy) + f[y0, x1] * fx * (1 - fy)
           + f[y1, x0] * (1 - fx) * fy + f[y1, x1] * fx * fy)
    return float(np.mean(np.linalg.norm(p1 + val - p2, axis=-1)))


# ----------------------------------------------------------------------------- PSNR / SSIM
def _image(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 2:
        a = a[..., None]
    if a.ndim != 3:
        raise ValueError(f"{name} must be an image [H, W] or [H, W, C], got shape {np.shape(x)}")
    _check_finite(a, name)
    return a


def _prepare_pair(a, b, mask, form):
    x, y = _image(a, "image a"), _image(b, "image b")
    _same_shape(x, y, "psnr/ssim images")
    m = _mask(mask, x.shape[:2])
    m = (m > 0.5).astype(np.float64)
    if form == "zeroed":
        # Released evaluation: images multiplied by the mask (then truncated to uint8) and the
        # metric taken over the whole frame.
        x = np.floor(x * m[..., None])
        y = np.floor(y * m[..., None])
        m = np.ones_like(m)
    elif form != "masked":
        raise ValueError(f"form must be 'masked' or 'zeroed', got {form!r}")
    return x, y, m


def psnr(a, b, mask=None, data_range: float = 255.0, form: str = "masked") -> float:
    """PSNR ``10 log10(R^2 / MSE)`` with the MSE over masked pixels and all channels.

    Returns ``inf`` for identical images and NaN for an empty mask.
    """
    x, y, m = _prepare_pair(a, b, mask, form)
    n = float(np.sum(m)) * x.shape[-1]
    if n == 0:
        return float("nan")
    mse = float(np.sum(m[..., None] * (x - y) ** 2) / n)
    if mse == 0:
        return float("inf")
    return 10.0 * math.log10(data_range ** 2 / mse)


def luminance(img) -> np.ndarray:
    """BT.601 luma ``0.299 R + 0.587 G + 0.114 B`` of an RGB image (gray input returned as is)."""
    a = _image(img, "image")
    if a.shape[-1] == 1:
        return a[..., 0]
    if a.shape[-1] != 3:
        raise ValueError(f"expected 1 or 3 channels, got {a.shape[-1]}")
    return a[..., 0] * 0.299 + a[..., 1] * 0.587 + a[..., 2] * 0.114


def ssim_map(a, b, data_range: float = 255.0, win_size: int = 11, sigma: float = 1.5) -> np.ndarray:
    """Per-pixel SSIM (Wang et al. 2004) of two single-channel images ``[H, W]``.

    Local statistics use a normalized Gaussian window (``win_size`` 11, ``sigma`` 1.5, reflected
    borders); ``C1 = (0.01 R)^2``, ``C2 = (0.03 R)^2``:
    ``SSIM = (2 mu_a mu_b + C1)(2 s_ab + C2) / ((mu_a^2 + mu_b^2 + C1)(s_a^2 + s_b^2 + C2))``.
    """
    x = np.asarray(a, np.float64)
    y = np.asarray(b, np.float64)
    if x.ndim != 2 or x.shape != y.shape:
        raise ValueError(f"ssim_map expects two [H, W] images of equal shape, got {x.shape}, {y.shape}")
    c1 = (0.01 * data_range) ** 2
    c2 = (0.03 * data_range) ** 2

    def blur(z):
        return cv2.GaussianBlur(z, (win_size, win_size), sigma, borderType=cv2.BORDER_REFLECT)

    mu_x, mu_y = blur(x), blur(y)
    sxx = blur(x * x) - mu_x ** 2
    syy = blur(y * y) - mu_y ** 2
    sxy = blur(x * y) - mu_x * mu_y
    num = (2 * mu_x * mu_y + c1) * (2 * sxy + c2)
    den = (mu_x ** 2 + mu_y ** 2 + c1) * (sxx + syy + c2)
    return num / den


def ssim(a, b, mask=None, data_range: float = 255.0, form: str = "masked") -> float:
    """SSIM on the luma channel, averaged over the masked pixels (see :func:`ssim_map`).

    Colour images are converted with :func:`luminance` first (the released evaluation also
    scored SSIM on a luma channel). NaN for an empty mask.
    """
    x, y, m = _prepare_pair(a, b, mask, form)
    smap = ssim_map(luminance(x), luminance(y), data_range)
    total = float(np.sum(m))
    if total == 0:
        return float("nan")
    return float(np.sum(m * smap) / total)


# ----------------------------------------------------------------------------- tables
def category_table(records: Iterable[tuple[str, Mapping[str, float]]],
                   categories: Sequence[str]) -> tuple[dict, dict]:
    """Aggregates per-sample metrics into ``{category: {metric: mean}}`` plus ``AVG``.

    Args:
      records: ``(category, {metric: value})`` per sample. NaN values (e.g. an empty mask) are
        left out of their mean; categories outside ``categories`` raise ValueError.
      categories: table columns, in order.
    Returns:
      ``(table, counts)``: ``table[cat][metric]`` is the mean over that category's samples;
      ``table["AVG"][metric]`` is the mean of the category means (categories without samples
      are skipped); ``counts[cat][metric]`` is the number of samples that entered each mean.
    """
    sums: dict[str, dict[str, list[float]]] = {c: {} for c in categories}
    for cat, values in records:
        if cat not in sums:
            raise ValueError(f"sample category {cat!r} is not one of {tuple(categories)}")
        for k, v in values.items():
            sums[cat].setdefault(k, [])
            if v is not None and not math.isnan(float(v)):  # +inf (identical images' PSNR) stays
                sums[cat][k].append(float(v))
    metrics: list[str] = []
    for c in categories:
        for k in sums[c]:
            if k not in metrics:
                metrics.append(k)
    table: dict[str, dict[str, float]] = {}
    counts: dict[str, dict[str, int]] = {}
    for c in categories:
        if not any(sums[c].values()):
            continue
        table[c] = {}
        counts[c] = {}
        for k in metrics:
            vals = sums[c].get(k, [])
            counts[c][k] = len(vals)
            table[c][k] = float(np.mean(vals)) if vals else float("nan")
    if table:
        table[AVG] = {}
        counts[AVG] = {}
        for k in metrics:
            means = [table[c][k] for c in table if c != AVG and not math.isnan(table[c][k])]
            table[AVG][k] = float(np.mean(means)) if means else float("nan")
            counts[AVG][k] = int(sum(counts[c][k] for c in counts if c != AVG))
    return table, counts
