"""One image pair's camera motion and the files that show it (the work behind
``python -m camflow_jax.estimate``; the command line only parses and prints).

:func:`estimate_pair` runs a registry estimator (:mod:`camflow_jax.estimators.registry`) on a pair;
:func:`check_result` refuses a result that must not be written (non-finite flows, a degenerate
homography); :func:`write_outputs` writes the flows, warps, overlays, heat map, colour coding
and ``homography.json`` listed in :data:`OUTPUT_FILES`.
"""

from __future__ import annotations

import os

import cv2
import numpy as np

from camflow_jax.estimators import registry
from camflow_jax.geometry import checks, host, plausibility
from camflow_jax.io import atomic, flo, viz
from camflow_jax.io.images import read_rgb

__all__ = ["OUTPUT_FILES", "read_image", "check_result", "estimate_pair", "write_outputs"]

ERROR_RANGE = 64.0  # grey levels mapped to the top of the heat map's colour scale

#: Files this tool writes into OUTDIR (an existing one is replaced only with -y).
OUTPUT_FILES = ("flow_f.npy", "flow_f.flo", "flow_b.npy", "flow_b.flo", "img2_warped.png",
                "img1_warped.png", "overlay.png", "overlay_input.png", "error_heatmap.png",
                "flow_f_color.png", "confidence_f.png", "homography.json")


def read_image(path: str) -> np.ndarray:
    """uint8 RGB ``[H, W, 3]`` (EXIF orientation applied by OpenCV)."""
    return read_rgb(path)


def check_result(result: dict, height: int, width: int) -> None:
    """ValueError (naming the cause) unless the flows are finite and the homography is not
    degenerate: such a result is never written."""
    hint = ("the model's weights or bases may be damaged, or the depth / intrinsics are wrong"
            if registry.is_camflow(result.get("method") or "") else "")
    for key, name in (("flow_f", "the forward flow"), ("flow_b", "the backward flow")):
        checks.check_flow(result[key], name, hint)
    if result["homography"] is None:
        raise ValueError(result.get("note") or "the estimator gave no homography")
    checks.check_homography(result["homography"], height, width, hint)


def estimate_pair(img1, img2, *, method="camflow", depth1=None, depth2=None, intrinsics=None) -> dict:
    """Flows, homography (and model outputs) for one pair.

    ``method`` is a name of the estimator registry (:mod:`camflow_jax.estimators.registry`) or an
    estimator it made. Returns the estimator's extras (the network's outputs for camflow) with
    ``flow_f``, ``flow_b``, ``homography``, ``method`` (the registry name), ``refined`` (whether
    test-time refinement ran), ``fallback``, ``note`` and, when there are any, ``weights_f``.
    """
    img1, img2 = np.asarray(img1), np.asarray(img2)
    if img1.shape != img2.shape:
        raise ValueError(f"the images differ in size: {img1.shape} vs {img2.shape}")
    est = registry.get(method) if isinstance(method, str) else method
    m = est(img1, img2, depth1=depth1, depth2=depth2, intrinsics=intrinsics)
    out = dict(m.extras)
    out.update(flow_f=m.flow_f, flow_b=m.flow_b, homography=m.homography, method=est.name,
               refined=bool(m.extras.get("refined", False)), fallback=m.fallback, note=m.note)
    if m.weights is not None:
        out["weights_f"] = m.weights
    return out


def _warp(image: np.ndarray, flow: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(host.warp(image, flow)), 0, 255).astype(np.uint8)


def _gray(img: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)


def _overlay(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Red/cyan anaglyph (RGB): red from a, green and blue from b."""
    ga, gb = _gray(a), _gray(b)
    return np.stack([ga, gb, gb], axis=-1)


def _save_png(path: str, rgb: np.ndarray) -> None:
    if not cv2.imwrite(path, cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR)):
        raise OSError(f"could not write {path}")


def write_outputs(out_dir: str, img1: np.ndarray, img2: np.ndarray, result: dict) -> dict:
    """Writes the files listed in the module doc; returns the summary stored in homography.json."""
    os.makedirs(out_dir, exist_ok=True)
    flow_f = np.asarray(result["flow_f"], np.float32)
    flow_b = np.asarray(result["flow_b"], np.float32)
    for name, f in (("flow_f", flow_f), ("flow_b", flow_b)):
        np.save(os.path.join(out_dir, f"{name}.npy"), f)
        flo.write_flo(os.path.join(out_dir, f"{name}.flo"), f)
    warped2 = _warp(img2, flow_f)
    warped1 = _warp(img1, flow_b)
    _save_png(os.path.join(out_dir, "img2_warped.png"), warped2)
    _save_png(os.path.join(out_dir, "img1_warped.png"), warped1)
    _save_png(os.path.join(out_dir, "overlay.png"), _overlay(img1, warped2))
    _save_png(os.path.join(out_dir, "overlay_input.png"), _overlay(img1, img2))
    valid = host.warp_validity(flow_f) > 0
    err = np.abs(img1.astype(np.float32) - warped2.astype(np.float32)).mean(axis=-1)
    scaled = np.clip(err / ERROR_RANGE * 255.0, 0, 255).astype(np.uint8)
    heat = cv2.cvtColor(cv2.applyColorMap(scaled, cv2.COLORMAP_JET), cv2.COLOR_BGR2RGB)
    heat[~valid] = 0
    _save_png(os.path.join(out_dir, "error_heatmap.png"), heat)
    _save_png(os.path.join(out_dir, "flow_f_color.png"), viz.flow_to_color(flow_f))
    if "logvar_f" in result:
        conf = np.exp(-np.asarray(result["logvar_f"], np.float32)[..., 0])
        conf8 = np.clip(conf * 255.0, 0, 255).astype(np.uint8)
        _save_png(os.path.join(out_dir, "confidence_f.png"), np.repeat(conf8[..., None], 3, -1))
    H = np.asarray(result["homography"], np.float64)
    mag = np.hypot(flow_f[..., 0], flow_f[..., 1])
    # The same numbers the plausibility check compares (grey levels, one pixel set: those whose
    # target stays inside image 2), so the summary explains a "worse than no motion" refusal.
    aligned, unaligned = plausibility.alignment_errors(img1, img2, flow_f)
    summary = {
        "homography": H.tolist(),
        "convention": "maps image-1 pixel coordinates (x right, y down, pixel centres at integers) "
                      "to image-2 pixel coordinates",
        "method": result.get("method"),
        "refined": bool(result.get("refined", False)),
        "image_size_hw": [int(img1.shape[0]), int(img1.shape[1])],
        "mean_flow_magnitude_px": float(mag.mean()),
        "max_flow_magnitude_px": float(mag.max()),
        "mean_abs_error_aligned": aligned if np.isfinite(aligned) else None,
        "mean_abs_error_input": unaligned if np.isfinite(unaligned) else None,
        "valid_fraction": float(valid.mean()),
    }
    if result.get("note"):
        summary["note"] = result["note"]
    if result.get("fallback"):
        summary["fallback"] = True
    if "rotated" in result:
        summary["portrait_rotated"] = bool(result["rotated"])
    text = atomic.strict_json(summary, indent=2)
    with open(os.path.join(out_dir, "homography.json"), "w") as fh:
        fh.write(text)
    return summary
