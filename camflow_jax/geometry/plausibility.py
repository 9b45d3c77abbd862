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
* **No motion fits**: when the estimate, although better than no motion, leaves the pair
  unexplained (:func:`aligned_correlation`: the correlation of the two images' gradients after
  alignment, at a coarse scale, below :data:`MIN_CORRELATION`), the answer is replaced by the
  identity with ``fallback`` set and a note that names the estimator, the measure, its value and
  the threshold. This catches pairs no motion of the estimator's span can align (unrelated
  images, an image against itself mirrored, for CamFlow's bases; a 180-degree turn is found when
  the Predictor's retry starts from the feature homography), whose
  best fit is still a little better than no motion.

:class:`camflow_jax.estimators.registry.Estimator` applies them on every call; ``Estimator.raw`` skips
them (the evaluation tables measure the estimators themselves). :func:`report` gathers them for one
answer, with a forward-backward consistency test and notes (an exposure matched, one image much
blurrier): the :class:`camflow_jax.predictor.Predictor` returns it as ``out["plausibility"]``. Image 2
is exposure-matched to image 1 first where they differ (:mod:`camflow_jax.geometry.photometric`).
Plain numpy and cv2.
"""

from __future__ import annotations

import cv2
import numpy as np

from camflow_jax.geometry import classical, host, photometric

__all__ = ["texture", "featureless", "alignment_errors", "worse_than_identity", "gradient_correlation",
           "aligned_correlation", "no_motion_fits", "forward_backward_error", "forward_backward_errors", "inconsistent",
           "texture_note", "report", "MIN_TEXTURE", "TEXTURE_SIZE", "WORSE_RATIO", "WORSE_MARGIN", "MIN_CORRELATION",
           "FIT_SIZE", "FIT_SIGMA", "MIN_FIT_PIXELS", "FB_SIZE", "MAX_FB_ERROR", "FB_GRID", "FB_CELL_SHARE",
           "MAX_FB_REGION", "BLUR_RATIO", "BLUR_SIZE"]

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
#: No motion fits the pair when :func:`aligned_correlation` is below this (docs/estimation.md,
#: "Plausibility checks"; tools/bench/studies/plausibility/span_fit.py): the largest multiple of 0.05 at most
#: 2/3 of the lowest correct answer of the refined shipped model on the development pairs
#: (0.657); its answers on unrelated, turned and mirrored development pairs are mostly below 0.3.
MIN_CORRELATION = 0.4
#: The longer side (pixels) at which :func:`aligned_correlation` is measured, and the Gaussian
#: blur (pixels at that size) before the gradients: a coarse scale, so that sensor noise, rain
#: and snow, and an estimate off by a few pixels, still correlate; unrelated images do not.
FIT_SIZE = 128
FIT_SIGMA = 2.0
#: Fewer pixels than this (at :data:`FIT_SIZE`) inside both images after alignment: too little
#: overlap to judge, :func:`no_motion_fits` does not decide.
MIN_FIT_PIXELS = 100
#: The longer side (pixels) at which :func:`forward_backward_error` is measured.
FB_SIZE = 256
#: The two directions contradict each other when :func:`forward_backward_error` exceeds this
#: fraction of the image's longer side (docs/estimation.md, "Plausibility checks"): correct refined
#: answers on development pairs stay below 0.0052 but one in 100, contradictions 0.0165 and more.
MAX_FB_ERROR = 0.01
#: The forward-backward error is also judged part by part: the image is cut into FB_GRID x FB_GRID
#: cells, and a cell's error is the median over its pixels that stay in the frame. A miss confined
#: to a part of the image (a 1.2x zoom whose answer bends one corner: the median over the whole
#: frame stays small) shows there.
FB_GRID = 4
#: A cell is judged when at least this share of its pixels stays in the frame.
FB_CELL_SHARE = 0.25
#: The two directions contradict each other in part of the image when the worst cell's error
#: exceeds this fraction of the longer side (docs/estimation.md, "Plausibility checks"; chosen on
#: the development pairs of seed 7).
MAX_FB_REGION = 0.05
#: One image is much blurrier than the other when the ratio of their :func:`texture` measured at
#: :data:`BLUR_SIZE` is below this (a note: docs/estimation.md, "Plausibility checks"): unchanged
#: pairs give 0.919 and more (the 100-pair benchmark, vtest), image 2 blurred by 4 px 0.25-0.54
#: at 512-1282 px wide, by 2 px 0.43-0.76.
BLUR_RATIO = 0.75
#: The longer side (pixels) at which the blur note measures :func:`texture`: larger than
#: :data:`TEXTURE_SIZE`, because shrinking a large image shrinks its blur with it (at 256 px, a
#: 4 px blur of a 1282 px wide image is under 1 px and gave a ratio of 0.835: no note).
BLUR_SIZE = 768


def texture(img, size: int = TEXTURE_SIZE) -> float:
    """The 99th percentile of the grey-level gradient magnitude (per pixel, 0..255 scale) of
    ``img`` (``[H, W]`` or ``[H, W, C]``), measured with its longer side shrunk to ``size``
    (when larger) and after a Gaussian blur of 1 pixel. Non-finite pixels count as 0 gradient."""
    g = host.gray(img)
    g = np.where(np.isfinite(g), g, 0.0).astype(np.float32)
    scale = size / max(g.shape)
    if scale < 1.0:  # one scale for every resolution: a gradient per pixel halves when the size doubles
        g = cv2.resize(g, (max(1, round(g.shape[1] * scale)), max(1, round(g.shape[0] * scale))),
                       interpolation=cv2.INTER_AREA)
    g = cv2.GaussianBlur(g, (0, 0), 1.0, borderType=cv2.BORDER_REFLECT)
    gy, gx = np.gradient(g)
    return float(np.percentile(np.hypot(gx, gy), 99.0))


#: :func:`texture` of the last few images (a video frame is image 2 of one pair and image 1 of
#: the next: measured once; a hit is exactly what :func:`texture` gives).
_textures = classical.ContentCache(8)
#: :func:`texture` at :data:`BLUR_SIZE` of the last few images (the blur note's measure).
_sharpness = classical.ContentCache(8)


def _sharp(img) -> float:
    """:func:`texture` of ``img`` at :data:`BLUR_SIZE`."""
    return _sharpness.get(img, lambda a: texture(a, BLUR_SIZE))


def featureless(img1, img2) -> str | None:
    """The reason the pair cannot be aligned for lack of texture (naming the image), or None."""
    return _featureless(_textures.get(img1, texture), _textures.get(img2, texture))


def _featureless(t1: float, t2: float) -> str | None:
    """:func:`featureless`'s reason from the two images' :func:`texture`."""
    for name, t in (("image 1", t1), ("image 2", t2)):
        if t < MIN_TEXTURE:
            return (f"{name} is featureless (texture {t:.2f} < {MIN_TEXTURE} grey levels per pixel: "
                    "nothing to align)")
    return None


def alignment_errors(img1, img2, flow_f) -> tuple[float, float]:
    """(aligned, input): the mean absolute grey-level difference between image 1 and image 2
    warped by ``flow_f`` (``warp(img2, flow_f) ≈ img1``), and between image 1 and image 2 as
    they are, both over the pixels whose target stays inside image 2
    (:func:`camflow_jax.geometry.host.warp_validity`, the library's one validity rule). NaN when
    no pixel stays inside. The warp is OpenCV's (``warp(..., exact=False)``): a mean error needs
    no more precision."""
    g1, g2 = host.gray(img1), host.gray(img2)
    flow = np.asarray(flow_f, np.float32)
    valid = host.warp_validity(flow) > 0
    if not valid.any():
        return float("nan"), float("nan")
    warped = host.warp(g2, flow, exact=False)
    return float(np.abs(g1 - warped)[valid].mean()), float(np.abs(g1 - g2)[valid].mean())


def worse_than_identity(img1, img2, flow_f) -> str | None:
    """The reason to distrust ``flow_f`` because it aligns the pair worse than no motion (both
    errors in the text), or None. A flow that moves every pixel out of the frame is worse."""
    return _worse(*alignment_errors(img1, img2, flow_f))


def _worse(aligned: float, inp: float) -> str | None:
    """:func:`worse_than_identity`'s reason from the two errors of :func:`alignment_errors`."""
    if not np.isfinite(aligned):
        return "it moves every pixel out of the frame"
    if aligned > WORSE_RATIO * inp + WORSE_MARGIN:
        return (f"it aligns the pair worse than no motion (mean |image 1 - warped image 2| "
                f"{aligned:.2f} against {inp:.2f} without motion)")
    return None


def gradient_correlation(a, b, mask=None) -> float:
    """The correlation of the grey-level gradients of two images ``[H, W]`` of one shape:
    ``sum(ga . gb) / sqrt(sum |ga|^2 * sum |gb|^2)`` over the pixels of ``mask`` (all when
    None), gradients by central differences (``np.gradient``). 1 when ``b`` is ``a`` up to
    brightness and contrast (``s * a + c``, s > 0), -1 for an inverted contrast, about 0 for
    unrelated images. NaN when either image has no gradient on the mask."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    m = np.ones(a.shape, bool) if mask is None else np.asarray(mask, bool)
    ay, ax = np.gradient(a)
    by, bx = np.gradient(b)
    num = float((ax * bx + ay * by)[m].sum())
    den = float(np.sqrt((ax * ax + ay * ay)[m].sum() * (bx * bx + by * by)[m].sum()))
    return num / den if den > 0 else float("nan")


def aligned_correlation(img1, img2, flow_f, *, size: int = FIT_SIZE, sigma: float = FIT_SIGMA) -> float:
    """How well ``flow_f`` explains the pair: :func:`gradient_correlation` of image 1 and image 2
    warped by ``flow_f`` (``warp(img2, flow_f) ≈ img1``), grey levels, measured with the longer
    side shrunk to ``size`` (images and flow area-averaged; smaller images as they are) and
    after a Gaussian blur of ``sigma`` pixels, over the pixels whose target stays inside image 2
    (:func:`camflow_jax.geometry.host.warp_validity`) and whose blur reads no pixel outside it.
    Insensitive to brightness and contrast (fog, low light); near 1 for a good alignment, near 0
    when the images do not match under the motion. NaN when fewer than
    :data:`MIN_FIT_PIXELS` pixels remain."""
    g1, g2 = (np.where(np.isfinite(g), g, 0.0).astype(np.float32)
              for g in (host.gray(img1), host.gray(img2)))
    flow = np.asarray(flow_f, np.float32)
    h, w = g1.shape
    scale = size / max(h, w)
    if scale < 1.0:
        h, w = max(1, round(h * scale)), max(1, round(w * scale))
        g1, g2 = (cv2.resize(g, (w, h), interpolation=cv2.INTER_AREA) for g in (g1, g2))
        flow = host.resize_flow(flow, h, w)
    valid = (host.warp_validity(flow) > 0).astype(np.uint8)
    warped = host.warp(g2, flow, exact=False)
    reach = int(np.ceil(3 * sigma))  # the blur's kernel radius
    if sigma > 0:
        k = 2 * reach + 1
        g1, warped = (cv2.GaussianBlur(g, (k, k), sigma, borderType=cv2.BORDER_REFLECT) for g in (g1, warped))
    r = reach + 1  # the blur's reach plus the central difference's: no masked pixel reads outside
    valid = cv2.erode(valid, np.ones((2 * r + 1, 2 * r + 1), np.uint8), borderType=cv2.BORDER_CONSTANT,
                      borderValue=0) > 0
    if valid.sum() < MIN_FIT_PIXELS:
        return float("nan")
    return gradient_correlation(g1, warped, valid)


def no_motion_fits(img1, img2, flow_f, *, correlation: float | None = None) -> str | None:
    """The reason to distrust ``flow_f`` because the pair stays unexplained after it
    (:func:`aligned_correlation` below :data:`MIN_CORRELATION`; the value and threshold in the
    text), or None (also when too little overlap remains to judge). ``correlation``: that
    measure already taken."""
    r = aligned_correlation(img1, img2, flow_f) if correlation is None else correlation
    if np.isfinite(r) and r < MIN_CORRELATION:
        return (f"no motion it found fits the pair (gradient correlation after alignment {r:.2f} < "
                f"{MIN_CORRELATION}: the images do not match under it)")
    return None


def forward_backward_error(flow_f, flow_b, *, size: int = FB_SIZE) -> float:
    """How far the two directions of an answer contradict each other, in input pixels: the median
    over the pixels x of image 1 whose target stays inside image 2
    (:func:`camflow_jax.geometry.host.warp_validity`) of |F_f(x) + F_b(x + F_f(x))|, measured
    with the longer side shrunk to ``size`` (both flows area-averaged and rescaled) and scaled
    back. 0 for a homography and its inverse; NaN when no pixel stays inside."""
    return forward_backward_errors(flow_f, flow_b, size=size)[0]


def forward_backward_errors(flow_f, flow_b, *, size: int = FB_SIZE) -> tuple[float, float, tuple | None]:
    """:func:`forward_backward_error` and the same error part by part: ``(whole, worst cell,
    (y0, y1, x0, x1) of that cell in input pixels)``. The image is cut into :data:`FB_GRID` x
    :data:`FB_GRID` cells; a cell with at least :data:`FB_CELL_SHARE` of its pixels staying in
    the frame gets the median of theirs. ``(nan, nan, None)`` when no pixel stays inside; the
    worst cell NaN when no cell is judged."""
    f, b = np.asarray(flow_f, np.float32), np.asarray(flow_b, np.float32)
    H, W = f.shape[:2]
    scale = min(1.0, size / max(H, W))
    if scale < 1.0:
        h, w = max(1, round(H * scale)), max(1, round(W * scale))
        f, b = host.resize_flow(f, h, w), host.resize_flow(b, h, w)
    h, w = f.shape[:2]
    valid = host.warp_validity(f) > 0
    if not valid.any():
        return float("nan"), float("nan"), None
    back = max(H, W) / max(h, w)
    err = np.linalg.norm(f + host.warp(b, f, exact=False), axis=-1)
    worst, cell = float("nan"), None
    for i in range(FB_GRID):
        for j in range(FB_GRID):
            y0, y1, x0, x1 = i * h // FB_GRID, (i + 1) * h // FB_GRID, j * w // FB_GRID, (j + 1) * w // FB_GRID
            m = valid[y0:y1, x0:x1]
            if m.size == 0 or m.mean() < FB_CELL_SHARE:
                continue
            e = float(np.median(err[y0:y1, x0:x1][m]) * back)
            if not e <= worst:  # the first judged cell, or a worse one
                worst, cell = e, (i * H // FB_GRID, (i + 1) * H // FB_GRID, j * W // FB_GRID, (j + 1) * W // FB_GRID)
    return float(np.median(err[valid]) * back), worst, cell


def inconsistent(fb_error: float, shape, region_error: float = float("nan"), region=None) -> str | None:
    """The reason to distrust an answer whose :func:`forward_backward_error` ``fb_error`` exceeds
    :data:`MAX_FB_ERROR` of the longer side of ``shape`` (``[H, W, ...]``), or whose worst cell
    (``region_error``, ``region``: :func:`forward_backward_errors`) exceeds :data:`MAX_FB_REGION`
    of it; None otherwise."""
    limit = MAX_FB_ERROR * max(shape[:2])
    if np.isfinite(fb_error) and fb_error > limit:
        return (f"its two directions contradict each other (forward-backward error {fb_error:.2f} px > "
                f"{limit:.2f} px, {MAX_FB_ERROR:g} of the longer side)")
    limit = MAX_FB_REGION * max(shape[:2])
    if np.isfinite(region_error) and region_error > limit and region is not None:
        y0, y1, x0, x1 = region
        return (f"its two directions contradict each other in part of the image (forward-backward error "
                f"{region_error:.2f} px in rows {y0}-{y1}, columns {x0}-{x1} > {limit:.2f} px, {MAX_FB_REGION:g} "
                "of the longer side): the motion there may be wrong")
    return None


def texture_note(img1, img2) -> str | None:
    """A note when one image of the pair is much blurrier than the other (the ratio of their
    :func:`texture` at :data:`BLUR_SIZE` below :data:`BLUR_RATIO`): an estimate on such a pair
    can invent a little motion. None otherwise (also for a featureless image,
    :func:`featureless`'s case)."""
    if _featureless(_textures.get(img1, texture), _textures.get(img2, texture)):
        return None
    return _texture_note(_sharp(img1), _sharp(img2))


def _texture_note(t1: float, t2: float) -> str | None:
    """:func:`texture_note` from the two images' :func:`texture` at :data:`BLUR_SIZE` (the
    pair not featureless)."""
    if min(t1, t2) < BLUR_RATIO * max(t1, t2):
        blurry = "image 2" if t2 < t1 else "image 1"
        return (f"{blurry} is much blurrier than the other (texture {min(t1, t2):.1f} against {max(t1, t2):.1f} "
                f"grey levels per pixel): the motion may be off by a pixel or so")
    return None


def report(img1, img2, out: dict, exposure: dict | None = None) -> dict:
    """Whether an answer ``out`` (a dict with ``flow_f`` ``[H, W, 2]`` and, where computed,
    ``flow_b``) explains the pair ``img1``, ``img2`` (as the estimate saw them: image 2
    exposure-matched where :func:`camflow_jax.geometry.photometric.compensate` did so;
    ``exposure`` is its record, None: measured here):

    ``{"plausible": bool, "reasons": [str], "notes": [str], "exposure_matched": bool,
    "exposure_shift": float, "fb_error": float or None, "fb_region_error": float or None,
    "inconsistent": str or None,
    "aligned_error": float, "input_error": float, "correlation": float}``. ``reasons`` (each makes the answer implausible, in this
    order): a featureless image (:func:`featureless`), worse than no motion
    (:func:`worse_than_identity`), no motion fits (:func:`no_motion_fits`), the two directions
    contradict each other (:func:`inconsistent`; only with ``flow_b``). ``notes`` say what the
    answer may not explain without making it implausible: an exposure difference matched, one
    image much blurrier (:func:`texture_note`). ``fb_error``: :func:`forward_backward_error`
    (None without ``flow_b``), ``fb_region_error`` its worst part (:func:`forward_backward_errors`);
    ``inconsistent``: the forward-backward reason where it is one (the
    estimators' checks note it rather than fall back: a pair with strong parallax, Aloe's stereo
    pair, has directions that disagree although its forward answer is right)."""
    if exposure is None:
        img2, exposure = photometric.compensate(img1, img2)
    flow_f = np.asarray(out["flow_f"], np.float32)
    g1, g2 = host.gray(img1), host.gray(img2)
    aligned, inp = alignment_errors(g1, g2, flow_f)
    corr = aligned_correlation(g1, g2, flow_f)
    fb, fb_region, region = (None, None, None) if out.get("flow_b") is None else forward_backward_errors(
        flow_f, out["flow_b"])
    contradiction = None if fb is None else inconsistent(fb, flow_f.shape, fb_region, region)
    t1, t2 = _textures.get(img1, texture), _textures.get(img2, texture)
    reasons = [r for r in (_featureless(t1, t2), _worse(aligned, inp), no_motion_fits(g1, g2, flow_f, correlation=corr),
                           contradiction) if r]
    notes = [n for n in (
        (f"image 2's exposure differs from image 1's (shift {exposure['exposure_shift']:.2f} > "
         f"{photometric.MAX_SHIFT}): matched to image 1 first") if exposure["exposure_matched"] else None,
        None if _featureless(t1, t2) else _texture_note(_sharp(img1), _sharp(img2))) if n]
    return {"plausible": not reasons, "reasons": reasons, "notes": notes,
            "exposure_matched": bool(exposure["exposure_matched"]), "exposure_shift": float(exposure["exposure_shift"]),
            "fb_error": fb, "fb_region_error": fb_region, "inconsistent": contradiction, "aligned_error": aligned, "input_error": inp, "correlation": corr}
