"""Is an estimated camera motion believable? Checks every estimator's answer goes through.

An estimator always returns *some* motion; these checks decide when that answer must not be
believed (docs/estimation.md, "Plausibility checks"):

* **Identical images** give exactly zero motion (no estimator is run).
* **Featureless images** (black, a constant colour, a smooth ramp: too little texture to align,
  :func:`featureless`) give the identity motion with ``fallback`` set and a note, never an
  invented motion.
* **Worse than no motion**: when the estimate aligns the pair worse than the identity does
  (:func:`alignment_errors`: mean absolute grey-level error over the pixels that stay in the
  frame, both errors on the same pixels), the answer is replaced by the identity with
  ``fallback`` set and a note that names the estimator and both errors.

:class:`camflow_jax.estimators.registry.Estimator` applies them on every call; ``Estimator.raw`` skips
them (the evaluation tables measure the estimators themselves). Plain numpy and cv2.
"""

from __future__ import annotations

import cv2
import numpy as np

from camflow_jax.geometry import host as geometry_np

__all__ = ["texture", "featureless", "alignment_errors", "worse_than_identity", "MIN_TEXTURE",
           "TEXTURE_SIZE", "WORSE_RATIO", "WORSE_MARGIN"]

#: An image is featureless when the 99th percentile of its grey-level gradient magnitude
#: (grey levels 0..255 per pixel at :data:`TEXTURE_SIZE`, after a 1-pixel Gaussian blur) is
#: below this: a constant or black image gives 0, a full-range linear ramp 1.0, white noise of
#: one grey level 0.5; the darkest low-light scenes of the synthetic set give 2.78 and more.
MIN_TEXTURE = 1.2
#: The longer side (pixels) at which texture is measured.
TEXTURE_SIZE = 256
#: An estimate is worse than no motion when its aligned error exceeds the input's error by
#: this factor plus :data:`WORSE_MARGIN` grey levels (bilinear warping blurs noise and texture a
#: little, so a correct sub-pixel estimate can be a hair above a static pair's error).
WORSE_RATIO = 1.05
WORSE_MARGIN = 0.5


def texture(img) -> float:
    """The 99th percentile of the grey-level gradient magnitude (per pixel, 0..255 scale) of
    ``img`` (``[H, W]`` or ``[H, W, C]``), measured with its longer side shrunk to
    :data:`TEXTURE_SIZE` (when larger) and after a Gaussian blur of 1 pixel. Non-finite pixels
    count as 0 gradient."""
    g = geometry_np.gray(img)
    g = np.where(np.isfinite(g), g, 0.0).astype(np.float32)
    scale = TEXTURE_SIZE / max(g.shape)
    if scale < 1.0:  # one scale for every resolution: a gradient per pixel halves when the size doubles
        g = cv2.resize(g, (max(1, round(g.shape[1] * scale)), max(1, round(g.shape[0] * scale))),
                       interpolation=cv2.INTER_AREA)
    g = cv2.GaussianBlur(g, (0, 0), 1.0, borderType=cv2.BORDER_REFLECT)
    gy, gx = np.gradient(g)
    return float(np.percentile(np.hypot(gx, gy), 99.0))


def featureless(img1, img2) -> str | None:
    """The reason the pair cannot be aligned for lack of texture (naming the image), or None."""
    for name, img in (("image 1", img1), ("image 2", img2)):
        t = texture(img)
        if t < MIN_TEXTURE:
            return (f"{name} is featureless (texture {t:.2f} < {MIN_TEXTURE} grey levels per pixel: "
                    "nothing to align)")
    return None


def alignment_errors(img1, img2, flow_f) -> tuple[float, float]:
    """(aligned, input): the mean absolute grey-level difference between image 1 and image 2
    warped by ``flow_f`` (``warp(img2, flow_f) ≈ img1``), and between image 1 and image 2 as
    they are, both over the pixels whose target stays inside image 2
    (:func:`camflow_jax.geometry.host.warp_validity`, the library's one validity rule). NaN when
    no pixel stays inside."""
    g1, g2 = geometry_np.gray(img1), geometry_np.gray(img2)
    flow = np.asarray(flow_f, np.float32)
    valid = geometry_np.warp_validity(flow) > 0
    if not valid.any():
        return float("nan"), float("nan")
    warped = geometry_np.warp(g2[..., None], flow)[..., 0]
    return float(np.abs(g1 - warped)[valid].mean()), float(np.abs(g1 - g2)[valid].mean())


def worse_than_identity(img1, img2, flow_f) -> str | None:
    """The reason to distrust ``flow_f`` because it aligns the pair worse than no motion (both
    errors in the text), or None. A flow that moves every pixel out of the frame is worse."""
    aligned, inp = alignment_errors(img1, img2, flow_f)
    if not np.isfinite(aligned):
        return "it moves every pixel out of the frame"
    if aligned > WORSE_RATIO * inp + WORSE_MARGIN:
        return (f"it aligns the pair worse than no motion (mean |image 1 - warped image 2| "
                f"{aligned:.2f} against {inp:.2f} without motion)")
    return None
