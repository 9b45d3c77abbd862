"""Benchmark protocols: which metrics each dataset reports, how one sample is scored, and the
published zero-flow rows a full run is checked against (docs/evaluation.md; the formulas are
in :mod:`camflow_jax.evaluation.metrics`).

=========  ==========================================================================
ghof_cam   epe (published all-pixel form vs gt_flow on the valid mask), epe_valid,
           pme (GHOF protocol: EPE vs the GT homography field, top half of the rows),
           psnr / ssim of warp(img2, flow_f) vs img1 inside mask & both warps' validity
ghof       epe (generic optical-flow EPE vs gt_flow, all pixels, no mask), pme (Clean
           files only: they carry homo_field)
cahomo     pme (6 annotated points, min of forward / backward error)
synthetic  epe (all-pixel form on valid_f), epe_valid, pme (static background points,
           flow read bilinearly), psnr / ssim inside valid_f & warp validity
=========  ==========================================================================
"""

from __future__ import annotations

import numpy as np

from camflow_jax.evaluation import metrics
from camflow_jax.geometry import host

__all__ = ["METRIC_NAMES", "PUBLISHED_IDENTITY", "metric_title", "score_sample",
           "alignment_scores", "check_published_identity"]

#: Metric columns per dataset, in table order.
METRIC_NAMES = {
    "ghof_cam": ("epe", "epe_valid", "pme", "psnr", "ssim"),
    "ghof": ("epe", "pme"),
    "cahomo": ("pme",),
    "synthetic": ("epe", "epe_valid", "pme", "psnr", "ssim"),
}

_METRIC_TITLES = {
    "epe": "EPE (px, published all-pixel form: mean over H*W of |(flow - gt) * mask|)",
    "epe_valid": "EPE (px, mean over valid pixels only)",
    "psnr": "PSNR (dB) of warp(img2, flow_f) vs img1 inside the valid mask",
    "ssim": "SSIM (luma, Gaussian 11/1.5) of warp(img2, flow_f) vs img1 inside the valid mask",
}
_GHOF_PME = "PME (px, GHOF protocol: EPE vs GT homography field over the top half rows)"
_PME_TITLES = {
    "ghof_cam": _GHOF_PME,
    "ghof": _GHOF_PME,
    "cahomo": "PME (px, CAHomo protocol: 6 points, min of forward/backward error)",
    "synthetic": "PME (px, static background points, flow read bilinearly)",
}
_EPE_GHOF = "EPE (px, generic optical flow vs gt_flow, all pixels incl. moving objects)"
_HIGHER_IS_BETTER = {"psnr", "ssim"}

#: Published identity (zero-flow) rows: CAHomo PME (the paper's CAHomo table), GHOF-Cam
#: EPE and GHOF PME (paper tables, row I_3x3). A full-benchmark run with ``identity`` is checked
#: against them: they validate the data files and the protocol together.
PUBLISHED_IDENTITY = {
    "cahomo": {"pme": {"RE": 7.75, "LT": 7.65, "LL": 7.21, "SF": 7.53, "LF": 3.39, "AVG": 6.70}},
    "ghof_cam": {"epe": {"RE": 3.65, "FOG": 6.69, "LL": 5.88, "RAIN": 4.90, "SNOW": 4.96, "AVG": 5.22},
                 "pme": {"RE": 4.94, "FOG": 7.24, "LL": 8.09, "RAIN": 5.48, "SNOW": 5.89, "AVG": 6.33}},
}


def metric_title(dataset: str, metric: str) -> str:
    """The table heading of ``metric`` on ``dataset`` (what it measures, which way is better)."""
    if metric == "pme":
        return _PME_TITLES[dataset]
    if dataset == "ghof" and metric == "epe":
        return _EPE_GHOF
    arrow = "higher is better" if metric in _HIGHER_IS_BETTER else "lower is better"
    return f"{_METRIC_TITLES[metric]} ({arrow})"


def alignment_scores(img1, img2, flow_f, mask, form: str = "masked") -> dict:
    """PSNR / SSIM of ``warp(img2, flow_f)`` (rounded to 8 bit) against ``img1`` in ``mask``."""
    warped = np.clip(np.rint(host.warp(img2, flow_f)), 0, 255)
    return {"psnr": metrics.psnr(img1, warped, mask, form=form),
            "ssim": metrics.ssim(img1, warped, mask, form=form)}


def score_sample(dataset: str, sample: dict, flow_f: np.ndarray, flow_b=None,
                 iqa_form: str = "masked") -> dict:
    """Per-sample metrics (:data:`METRIC_NAMES`) of one forward (and, for CAHomo, backward) flow."""
    flow_f = np.asarray(flow_f, np.float32)
    h, w = sample["img1"].shape[:2]
    if flow_f.shape != (h, w, 2):
        raise ValueError(f"flow_f has shape {flow_f.shape}, expected {(h, w, 2)} (input resolution)")
    if not np.all(np.isfinite(flow_f)):
        raise ValueError("estimated flow_f contains non-finite values")
    if dataset == "cahomo":
        return {"pme": metrics.cahomo_pme(flow_f, sample["points"], flow_b)}
    if dataset == "ghof":
        out = {"epe": metrics.epe_all_pixels(flow_f, sample["gt_flow"])}
        if "homo_field" in sample:
            out["pme"] = metrics.ghof_pme(flow_f, sample["homo_field"])
        return out
    if dataset == "ghof_cam":
        mask = sample["mask"]
        iqa_mask = ((mask > 0.5) * host.warp_validity(flow_f)
                    * host.warp_validity(sample["homo_field"]))
        out = {"epe": metrics.epe_all_pixels(flow_f, sample["gt_flow"], mask),
               "epe_valid": metrics.epe_valid(flow_f, sample["gt_flow"], mask),
               "pme": metrics.ghof_pme(flow_f, sample["homo_field"])}
        out.update(alignment_scores(sample["img1"], sample["img2"], flow_f, iqa_mask, iqa_form))
        return out
    if dataset == "synthetic":
        valid = np.asarray(sample["valid_f"], np.float32)
        out = {"epe": metrics.epe_all_pixels(flow_f, sample["flow_f"], valid),
               "epe_valid": metrics.epe_valid(flow_f, sample["flow_f"], valid),
               "pme": metrics.point_error(flow_f, sample["points1"], sample["points2"])}
        iqa_mask = (valid > 0.5) * host.warp_validity(flow_f)
        out.update(alignment_scores(sample["img1"], sample["img2"], flow_f, iqa_mask, iqa_form))
        return out
    raise ValueError(f"unknown dataset {dataset!r}")


def check_published_identity(dataset: str, table: dict) -> dict:
    """Compares an identity-method table with :data:`PUBLISHED_IDENTITY` (2-decimal rounding).

    Returns ``{metric: {"match": bool, "max_abs_diff": float}}`` (empty if nothing to compare).
    """
    out = {}
    for metric, ref in PUBLISHED_IDENTITY.get(dataset, {}).items():
        diffs = [abs(table.get(c, {}).get(metric, float("nan")) - v) for c, v in ref.items()]
        worst = max(diffs)
        out[metric] = {"match": bool(worst <= 0.005 + 1e-9), "max_abs_diff": worst}
    return out
