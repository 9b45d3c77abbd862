"""Exposure differences between two images, and matching them (numpy on the host).

An exposure, gain or gamma change between two frames (a phone's auto-exposure step) is a
monotone map of grey levels. The CamFlow network was trained with a few per cent of gain jitter
only and invents motion under a larger change (issue 63: 20-130 px on static pairs darkened to
40-60 %), so the :class:`camflow_jax.predictor.Predictor` and the plausibility checks first map
image 2's grey levels onto image 1's where the two differ clearly (docs/estimation.md,
"Plausibility checks"):

* :func:`exposure_shift`: how different the two images' grey-level distributions are, scale
  free (0 for equal distributions; a static pair darkened to 60 % gives about 0.3);
* :func:`match_exposure`: histogram (CDF) matching of an image to a reference, per channel;
* :func:`compensate`: image 2 matched to image 1 when :func:`exposure_shift` exceeds
  :data:`MAX_SHIFT`, else image 2 itself (the same object: such a pair's results are exactly
  what they were without this module).

Histogram matching needs no alignment and undoes any monotone per-channel map; scene motion
changes the histograms little (the unchanged pairs of the synthetic benchmark stay below a
tenth of the threshold, :data:`MAX_SHIFT`).
"""

from __future__ import annotations

import numpy as np

from camflow_jax.geometry import host

__all__ = ["exposure_shift", "match_exposure", "compensate", "MAX_SHIFT", "QUANTILES", "SAMPLE_PIXELS"]

#: The quantiles :func:`exposure_shift` compares (5 % to 95 % in steps of 5 %).
QUANTILES = np.linspace(0.05, 0.95, 19)
#: At most about this many pixels (a regular stride) are read to measure :func:`exposure_shift`.
SAMPLE_PIXELS = 1 << 16
#: Image 2 is matched to image 1 when :func:`exposure_shift` exceeds this (docs/estimation.md,
#: "Plausibility checks": chosen on development pairs, well above every unchanged pair's value).
MAX_SHIFT = 0.12


def _sample(img) -> np.ndarray:
    """The finite grey levels of ``img`` at every pixel of a regular stride (at most about
    :data:`SAMPLE_PIXELS` pixels), flat."""
    img = np.asarray(img)
    step = max(1, int(np.ceil(np.sqrt(img.shape[0] * img.shape[1] / SAMPLE_PIXELS))))
    g = host.gray(img[::step, ::step]).ravel()
    return g[np.isfinite(g)]


def exposure_shift(img1, img2) -> float:
    """How different the grey-level distributions of two images (``[H, W]`` or ``[H, W, C]``,
    any size each) are: the median over :data:`QUANTILES` of |q1 - q2| (the matching quantiles
    of the two grey images) divided by image 1's 5-95 % range q1(95 %) - q1(5 %). Scale free
    (the same for ``s * img1`` against ``s * img2``); 0 for equal distributions; a gain g on
    image 2 gives about |1 - g| * median(q1) / range. NaN when image 1's range is 0 (a flat
    image: nothing to compare) or either image has no finite pixel."""
    a, b = _sample(img1), _sample(img2)
    if a.size == 0 or b.size == 0:
        return float("nan")
    q1, q2 = np.quantile(a, QUANTILES), np.quantile(b, QUANTILES)
    span = q1[-1] - q1[0]
    if not span > 0:
        return float("nan")
    return float(np.median(np.abs(q1 - q2)) / span)


def _match_channel(ref: np.ndarray, img: np.ndarray) -> np.ndarray:
    """``img`` (one channel) with its values mapped so that its distribution is ``ref``'s: each
    value goes to the reference's value at the same mid-rank CDF position (linear between)."""
    if img.dtype == np.uint8 and ref.dtype == np.uint8:  # a 256-entry table
        levels = np.arange(256, dtype=np.float64)
        h_img = np.bincount(img.ravel(), minlength=256).astype(np.float64)
        h_ref = np.bincount(ref.ravel(), minlength=256).astype(np.float64)
        c_img = (np.cumsum(h_img) - 0.5 * h_img) / img.size
        c_ref = (np.cumsum(h_ref) - 0.5 * h_ref) / ref.size
        present = h_ref > 0
        lut = np.interp(c_img, c_ref[present], levels[present])
        return np.clip(np.rint(lut), 0, 255).astype(np.uint8)[img]
    x = np.asarray(img, np.float64)
    r = np.asarray(ref, np.float64)
    fin = np.isfinite(x)
    rs = np.sort(r[np.isfinite(r)].ravel())
    if rs.size == 0 or not fin.any():
        return np.asarray(img, np.float32)
    xs = np.sort(x[fin].ravel())
    # mid-rank CDF of each value of img (ties share one position), read off the reference's sorted values
    lo = np.searchsorted(xs, x[fin], "left")
    hi = np.searchsorted(xs, x[fin], "right")
    c = (lo + hi) / (2.0 * xs.size)
    out = np.array(x, np.float32)
    out[fin] = np.interp(c, (np.arange(rs.size) + 0.5) / rs.size, rs)
    return out


def match_exposure(reference, image) -> np.ndarray:
    """``image`` (``[H, W]`` or ``[H, W, C]``) with each channel's values mapped monotonically so
    that its distribution matches the same channel of ``reference`` (any size; a grey reference
    serves every channel): histogram (CDF) matching. Two uint8 images: a 256-entry table per
    channel, uint8 out; otherwise float32 out (non-finite values kept as they are). Undoes a gain,
    bias or gamma on ``image`` up to quantisation and clipping."""
    ref, img = np.asarray(reference), np.asarray(image)
    if img.ndim == 2:
        return _match_channel(host.gray(ref) if ref.ndim == 3 else ref, img)
    refs = [ref[..., min(c, ref.shape[-1] - 1)] if ref.ndim == 3 else ref for c in range(img.shape[-1])]
    return np.stack([_match_channel(refs[c], img[..., c]) for c in range(img.shape[-1])], axis=-1)


def compensate(img1, img2) -> tuple[np.ndarray, dict]:
    """``(image 2 as the estimate should see it, {"exposure_shift": float, "exposure_matched":
    bool})``: image 2 matched to image 1 (:func:`match_exposure`) when :func:`exposure_shift`
    exceeds :data:`MAX_SHIFT`, else ``img2`` itself (the same object)."""
    shift = exposure_shift(img1, img2)
    matched = bool(shift > MAX_SHIFT)
    return (match_exposure(img1, img2) if matched else img2), {"exposure_shift": shift, "exposure_matched": matched}
