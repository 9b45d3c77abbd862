"""``manifest.json``: what an export folder holds and how to use it, for a reader without
camflow_jax (a C++ or Rust program, another team): the inputs and outputs (names, shapes,
dtypes, value ranges), the basis set (groups, what each basis is, how the depth group is
built), the precision policy, the model, the versions that wrote it, the step from
coefficients to flows and from network-size flows to the input size, and the agreement
measured between the runtimes when the folder was written.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Mapping
from typing import Any

import jax

from camflow_jax.export.network import ExportSpec
from camflow_jax.models import basis_set

__all__ = ["FORMAT", "build", "GROUP_DESCRIPTIONS"]

#: The manifest's format name (bumped when a field changes meaning).
FORMAT = "camflow_jax.export/1"

#: What the bases of each group are (docs/bases.md).
GROUP_DESCRIPTIONS = {
    "homography": ("homography bases: polynomial flow fields on the normalized grid x, y in [-1, 1] "
                   "(12: the monomials 1, x, y, xy, x^2, y^2 in u, then in v; 8: translations, the four "
                   "affine fields and the two first-order projective fields), orthonormalized in that "
                   "order, each scaled to max |value| = 1"),
    "stochastic": ("stochastic bases: the leading singular vectors of flows of random homographies (seeded), "
                   "orthogonal to the homography span, each scaled to max |value| = 1"),
    "depth": ("depth-translational bases from the image's own depth D and intrinsics (fx, fy, cx, cy) at "
              "network size: per depth-pyramid blur sigma, D_s = GaussianBlur_sigma(D) and the three fields "
              "f^x = (fx / D_s, 0), f^y = (0, fy / D_s), f^z = -((u - cx) / D_s, (v - cy) / D_s), "
              "each divided by the 99th percentile of its magnitude"),
}

_PRECISION = {
    "exact": "float32; every dot and convolution at jax.lax.Precision.HIGHEST (true float32 products)",
    "default": "float32 at the backend's default dot precision (TF32 on recent NVIDIA GPUs)",
    "bfloat16": "bfloat16 compute in the network (weights float32, cast where used)",
}


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _array(name: str, shape, meaning: str, value_range: str | None = None, dtype: str = "float32") -> dict:
    out = {"name": name, "shape": [int(s) for s in shape], "dtype": dtype, "meaning": meaning}
    if value_range is not None:
        out["range"] = value_range
    return out


def _basis_groups(spec: ExportSpec, cfg: Mapping[str, Any]) -> list[dict]:
    static_cfg = {**basis_set.DEFAULT_BASES, **dict(cfg.get("bases") or {})}
    groups, start = [], 0
    for name, size in spec.groups:
        group = {"name": name, "size": size, "indices": [start, start + size],
                 "what": GROUP_DESCRIPTIONS.get(name, name)}
        if name == "stochastic":
            group["seed"] = int(static_cfg.get("seed", 0))
            group["orthogonal_to_homography"] = bool(static_cfg.get("orthogonal_to_homography", True))
        if name == "depth":
            group["depth_sigmas_px"] = list(spec.depth_sigmas or ())
            group["order"] = "for each sigma in depth_sigmas_px: f^x, f^y, f^z"
        groups.append(group)
        start += size
    return groups


def build(predictor, spec: ExportSpec, files: Mapping[str, dict], checks: Mapping[str, Any] | None,
          converter: Mapping[str, str | None]) -> dict:
    """The manifest of an export of ``predictor`` at ``spec`` whose files are ``files`` (file name
    -> its entry: what it is, format, inputs, outputs...), with the runtime agreement ``checks``
    and the converter's versions."""
    b, h, w, n = spec.batch, spec.height, spec.width, spec.num_bases
    cfg = dict(predictor.model_config or {})
    policy = str(getattr(predictor, "precision", None) or cfg.get("precision") or "exact")
    model_cfg = getattr(getattr(predictor, "model", None), "config", None)
    img = "RGB at network size (resize the input with bilinear interpolation, half-pixel centres, no antialiasing)"
    inputs = [
        _array("img1", (b, h, w, 3), f"image 1, {img}", "0..255"),
        _array("img2", (b, h, w, 3), f"image 2, {img}", "0..255"),
        _array("bases_f", (b, n, h, w, 2), "image 1's basis set (static bases, then its depth group)",
               "each basis scaled as its group says (max |value| 1 or 99th percentile 1)"),
        _array("bases_b", (b, n, h, w, 2), "image 2's basis set (static bases, then its depth group)",
               "as bases_f"),
    ]
    outputs = [
        _array("flow_f", (b, h, w, 2), "forward flow on image 1's grid in network pixels, (u, v): "
               "warp(img2, flow_f) ~ img1"),
        _array("flow_b", (b, h, w, 2), "backward flow on image 2's grid in network pixels"),
        _array("coeffs_f", (b, n), "forward coefficients: flow_f = sum_k coeffs_f[k] * bases_f[k]"),
        _array("coeffs_b", (b, n), "backward coefficients: flow_b = sum_k coeffs_b[k] * bases_b[k]"),
    ]
    manifest = {
        "format": FORMAT,
        "model": {
            "description": str(getattr(predictor, "description", "")),
            "architecture": model_cfg.to_dict() if hasattr(model_cfg, "to_dict") else None,
            "network_size_hw": list(spec.model_size),
            "size_multiple": spec.size_multiple,
        },
        "function": ("the network's flows-only forward pass (model.apply(..., train=False, confidence=False)): "
                     "both directions in one call, normalisation and grey average inside; no confidence maps, "
                     "no homography fit, no test-time refinement (those stay in camflow_jax)"),
        "size": {"height": h, "width": w, "batch": b},
        "inputs": inputs,
        "outputs": outputs,
        "bases": {
            "num_bases": n,
            "groups": _basis_groups(spec, cfg),
            "static_bases_file": "static_bases.npy",
            "static_bases_shape": [spec.num_static, h, w, 2],
            "per_sample": ("bases_f[i] = concat(static_bases, depth_group(depth1[i], K[i])) and likewise bases_b "
                           "with image 2's depth; without a depth group (CamFlow) both are the static bases. "
                           "Without depth a CamFlow+ model is given a constant depth (its depth group then lies "
                           "in the homography span)"),
        },
        "depth_bases": None,
        "precision": {
            "policy": policy,
            "meaning": _PRECISION.get(policy, policy),
            "onnx": ("float32 throughout: ONNX has no dot-precision attribute, so the policy's HIGHEST is "
                     "whatever the runtime's float32 kernels do (exact float32 on ONNX Runtime's CPU; on a GPU "
                     "check that the execution provider does not use TF32)"),
            "stablehlo": "the policy as written: its precision annotations are part of the StableHLO module",
        },
        "flow_from_coeffs": "flow[b, y, x, c] = sum_k coeffs[b, k] * bases[b, k, y, x, c] (network pixels)",
        "resize_to_input": ("flows at network size h x w to an input of H0 x W0 (camflow_jax.geometry.device."
                            "resize_flow): bilinear with aligned corners (sample at y * (h - 1) / (H0 - 1), "
                            "x * (w - 1) / (W0 - 1)), then u *= W0 / w and v *= H0 / h. Portrait inputs: the "
                            "Predictor rotates them to landscape first (docs/export.md)"),
        "files": dict(files),
        "checks": dict(checks) if checks else None,
        "versions": {
            "camflow_jax": _version("camflow_jax"), "jax": jax.__version__, "jaxlib": _version("jaxlib"),
            "flax": _version("flax"), "numpy": _version("numpy"), "python": platform.python_version(),
            **{k: v for k, v in converter.items()},
        },
    }
    if spec.num_depth:
        manifest["depth_bases"] = {
            "inputs": [_array("depth", (b, h, w), "depth of the image at network size (bilinear resize, "
                              "half-pixel centres); any global scale", "> 0 (NaN, inf, <= 0: invalid, "
                              "replaced by the median of the valid depth)"),
                       _array("K", (b, 4), "(fx, fy, cx, cy) at network size: from an input of H0 x W0, "
                              "fx' = fx * w / W0, cx' = (cx + 0.5) * w / W0 - 0.5, likewise fy', cy' with h / H0")],
            "output": _array("bases", (b, n, h, w, 2), "the image's full basis set (static then depth group)"),
            "steps": ["depth relative to the median of its valid values, invalid -> 1, clipped to [0.05, 1e30]",
                      "for each sigma: D_s = separable Gaussian blur (radius ceil(3 sigma), edge replication; "
                      "sigma 0 = none), inv_s = 1 / D_s",
                      "p_s = 99th percentile (linear interpolation) of inv_s, q_s = of sqrt((u-cx)^2+(v-cy)^2) "
                      "* inv_s over all pixels, (u, v) pixel coordinates",
                      "f^x = (fx * inv_s / (|fx| p_s), 0), f^y = (0, fy * inv_s / (|fy| p_s)), "
                      "f^z = (-(u - cx) inv_s / q_s, -(v - cy) inv_s / q_s)"],
            "reference": "camflow_jax.bases.depth_translational_bases (and the depth_bases.stablehlo artifact)",
        }
    return manifest
