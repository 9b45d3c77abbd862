"""Training losses (docs/design.md, "Losses"): Laplace NLL, motion, feature consistency, depth-aware smoothness.

Laplace NLL with per-pixel log-variance s (confidence d = exp(-s)), for every element e:
    l_e = sqrt(2) * exp(-s/2) * |y_e - y_hat_e| + s/2,
which equals the paper's sqrt(2 (d + eps)) |y - y_hat| - 1/2 log(d + eps) with eps = 0; s
broadcasts over channels. For one element the minimiser over s is s* = log(2 |y - y_hat|^2)
(set dl/ds = 0).

Reduction (``reduction``): ``"paper"`` (the default) is the paper's Eq. (nll): the sum over the
C channels of a pixel, averaged over pixels. ``"release"`` is the authors' code: the mean over
all elements, i.e. the paper's value divided by C. With C = 2 for flows, the release form halves
the motion term, so the paper's 1 : 10 : 40 weighting silently becomes 0.5 : 10 : 40 (and the
1-channel feature term is the same in both forms).

All functions take the model's output dict (contract B) and are jit/grad friendly;
non-finite inputs are excluded (and cannot leak NaN into gradients).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from camflow_jax.geometry import device

SQRT2 = math.sqrt(2.0)
DEFAULT_ALPHA = 10.0

__all__ = [
    "laplace_nll",
    "motion_loss",
    "feature_loss",
    "smoothness_loss",
    "depth_smoothness",
    "total_loss",
]


def _expand_mask(mask: jax.Array | None, like: jax.Array) -> jax.Array:
    if mask is None:
        return jnp.ones(like.shape[:-1] + (1,), jnp.float32)
    mask = jnp.asarray(mask, jnp.float32)
    if mask.ndim == like.ndim - 1:
        mask = mask[..., None]
    if mask.ndim != like.ndim:
        raise ValueError(f"mask shape {mask.shape} does not fit values of shape {like.shape}")
    return mask


NLL_REDUCTIONS = ("paper", "release")


def _check_reduction(reduction: str) -> str:
    if reduction not in NLL_REDUCTIONS:
        raise ValueError(f"NLL reduction must be one of {NLL_REDUCTIONS}, got {reduction!r}")
    return reduction


def laplace_nll(y: jax.Array, y_hat: jax.Array, logvar: jax.Array,
                mask: jax.Array | None = None, reduction: str = "paper") -> jax.Array:
    """Laplace NLL, summed over channels and averaged over pixels (``reduction="paper"``) or
    averaged over elements (``"release"``), excluding masked-out and non-finite elements.

    Args:
      y, y_hat: ``[..., C]`` target and prediction.
      logvar: ``[..., 1]`` (broadcast over channels) or ``[..., C]``; s in the formula above.
      mask: optional ``[...]`` / ``[..., 1]`` / ``[..., C]`` weights (0 excludes; {0,1} masks
        give the mean over the selected pixels).
      reduction: ``"paper"`` or ``"release"`` (module docstring).
    Returns:
      scalar float32: sum_e m_e l_e / (sum_e m_e / C) for "paper", sum_e m_e l_e / sum_e m_e
      for "release" (0 when nothing is selected).
    """
    _check_reduction(reduction)
    y = jnp.asarray(y, jnp.float32)
    y_hat = jnp.asarray(y_hat, jnp.float32)
    s = jnp.asarray(logvar, jnp.float32)
    if y.shape != y_hat.shape:
        raise ValueError(f"laplace_nll: target {y.shape} and prediction {y_hat.shape} differ")
    try:
        shape = jnp.broadcast_shapes(y.shape, s.shape)
    except ValueError:
        shape = None
    if shape != y.shape:
        raise ValueError(f"laplace_nll: logvar {s.shape} does not broadcast to values {y.shape}")
    m = jnp.broadcast_to(_expand_mask(mask, y), shape)
    s = jnp.broadcast_to(s, shape)
    ok = jnp.isfinite(y) & jnp.isfinite(y_hat) & jnp.isfinite(s) & jnp.isfinite(m)
    # Sanitise before the arithmetic so excluded elements give zero (not NaN) gradients.
    y = jnp.where(ok, y, 0.0)
    y_hat = jnp.where(ok, y_hat, 0.0)
    s = jnp.where(ok, s, 0.0)
    w = jnp.where(ok, m, 0.0)
    elem = SQRT2 * jnp.exp(-0.5 * s) * jnp.abs(y - y_hat) + 0.5 * s
    count = jnp.sum(w) / (shape[-1] if reduction == "paper" else 1)
    return jnp.sum(w * elem) / jnp.maximum(count, 1e-12)


def motion_loss(outputs: Mapping[str, jax.Array], flow_label_f: jax.Array, flow_label_b: jax.Array,
                mask_f: jax.Array | None = None, mask_b: jax.Array | None = None,
                reduction: str = "paper") -> jax.Array:
    """NLL(m_ab, m_hat_ab; s_ab) + NLL(m_ba, m_hat_ba; s_ba) against (pseudo) flow labels."""
    for name, lab, pred in (("flow_label_f", flow_label_f, outputs["flow_f"]),
                            ("flow_label_b", flow_label_b, outputs["flow_b"])):
        if tuple(lab.shape) != tuple(pred.shape):
            raise ValueError(f"motion_loss: {name} has shape {lab.shape}, the prediction {pred.shape}")
    return (laplace_nll(flow_label_f, outputs["flow_f"], outputs["logvar_f"], mask_f, reduction)
            + laplace_nll(flow_label_b, outputs["flow_b"], outputs["logvar_b"], mask_b, reduction))


def feature_loss(outputs: Mapping[str, jax.Array], mask_out_of_frame: bool = True,
                 reduction: str = "paper") -> jax.Array:
    """NLL(F_a, warp(F_b, m_hat_ab); s_ab) + NLL(F_b, warp(F_a, m_hat_ba); s_ba).

    Gradients reach the flows (through the warp), the shallow features and the log-variances.
    ``mask_out_of_frame`` excludes pixels whose warp samples outside image b (their warped
    value is an artificial 0; the release does not exclude them).
    """
    f1, f2 = outputs["feat1"], outputs["feat2"]
    flow_f, flow_b = outputs["flow_f"], outputs["flow_b"]
    w2 = device.warp(f2, flow_f)
    w1 = device.warp(f1, flow_b)
    m_f = device.warp_validity(flow_f) if mask_out_of_frame else None
    m_b = device.warp_validity(flow_b) if mask_out_of_frame else None
    return (laplace_nll(f1, w2, outputs["logvar_f"], m_f, reduction)
            + laplace_nll(f2, w1, outputs["logvar_b"], m_b, reduction))


def smoothness_loss(trans: jax.Array, depth: jax.Array, alpha: float = DEFAULT_ALPHA) -> jax.Array:
    """Depth-aware smoothness of a translational flow, mean over pixels of
        exp(-alpha * ||grad D_n||_1) * ||grad t||_1,
    with forward differences (both taken at the same pixel, so the last row/column drop out),
    ||grad t||_1 = sum_c |dx t_c| + |dy t_c| and D_n = D / median(D) per sample (scale-free
    alpha). Depth values that are non-finite or <= 0 are invalid: differences touching them
    are excluded.

    Args:
      trans: ``[B, H, W, 2]``; depth: ``[B, H, W]`` or ``[B, H, W, 1]`` on the same grid.
    """
    trans = jnp.asarray(trans, jnp.float32)
    depth = jnp.asarray(depth, jnp.float32)
    if depth.ndim == trans.ndim:
        depth = depth[..., 0]
    if trans.ndim != 4 or depth.shape != trans.shape[:3]:
        raise ValueError(f"smoothness_loss: trans {trans.shape} needs depth [B, H, W] on the same grid, "
                         f"got {depth.shape} (resize depth to the network size first)")
    depth = jax.lax.stop_gradient(depth)
    valid = jnp.isfinite(depth) & (depth > 0)
    med = jnp.nanmedian(jnp.where(valid, depth, jnp.nan), axis=(1, 2), keepdims=True)
    med = jnp.where(jnp.isfinite(med) & (med > 0), med, 1.0)
    d = jnp.where(valid, depth, 1.0) / med

    def dx(a):
        return a[:, :-1, 1:] - a[:, :-1, :-1]

    def dy(a):
        return a[:, 1:, :-1] - a[:, :-1, :-1]

    grad_d = jnp.abs(dx(d)) + jnp.abs(dy(d))
    grad_t = jnp.sum(jnp.abs(dx(trans)) + jnp.abs(dy(trans)), axis=-1)
    ok = (valid[:, :-1, :-1] & valid[:, :-1, 1:] & valid[:, 1:, :-1]).astype(jnp.float32)
    weight = jnp.exp(-alpha * grad_d) * ok
    return jnp.sum(weight * grad_t) / jnp.maximum(jnp.sum(ok), 1.0)


def depth_smoothness(outputs: Mapping[str, jax.Array], depth1: jax.Array, depth2: jax.Array,
                     alpha: float = DEFAULT_ALPHA) -> jax.Array:
    """Smoothness of t_ab with D_a plus smoothness of t_ba with D_b."""
    return (smoothness_loss(outputs["trans_f"], depth1, alpha)
            + smoothness_loss(outputs["trans_b"], depth2, alpha))


def _get(cfg: Any, key: str, default: Any) -> Any:
    if cfg is None:
        return default
    if isinstance(cfg, Mapping):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def _maybe_zero(x: Any) -> bool:
    """True only for a concrete Python zero (then the term is skipped entirely)."""
    return isinstance(x, (int, float)) and x == 0


def total_loss(outputs: Mapping[str, jax.Array], batch: Mapping[str, Any],
               weights: Mapping[str, Any] | Any = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """L = w_m L_m + w_f L_f + w_s L_s (GHOF refinement: 1 : 10 : 40).

    Args:
      outputs: the model's output dict (contract B).
      batch: 'flow_f', 'flow_b' (labels on the network grid); optional 'label_mask_f',
        'label_mask_b'; optional 'depth1', 'depth2' (network grid) — without them, or with
        weight 0, the smoothness term is skipped.
      weights: mapping / ConfigDict with 'motion' (default 1), 'feature' (default 0),
        'smooth' (default 0), 'alpha' (default 10), 'nll' (the NLL reduction, default
        "paper"; see the module docstring), 'balance_feature' (default False). With
        balancing the feature term is w_f * sg(L_m / L_f) * L_f: the ratio's gradient is stopped
        (the release does not stop it, which cancels the feature term's gradient).
    Returns:
      (total, {'motion', 'feature', 'smooth', 'total'}).
    """
    w_m = _get(weights, "motion", 1.0)
    w_f = _get(weights, "feature", 0.0)
    w_s = _get(weights, "smooth", 0.0)
    alpha = _get(weights, "alpha", DEFAULT_ALPHA)
    balance = bool(_get(weights, "balance_feature", False))
    reduction = _check_reduction(str(_get(weights, "nll", "paper")))
    zero = jnp.zeros((), jnp.float32)

    l_m = motion_loss(outputs, batch["flow_f"], batch["flow_b"], batch.get("label_mask_f"),
                      batch.get("label_mask_b"), reduction)
    l_f = zero if _maybe_zero(w_f) else feature_loss(outputs, reduction=reduction)
    have_depth = batch.get("depth1") is not None and batch.get("depth2") is not None
    l_s = zero if (_maybe_zero(w_s) or not have_depth) else depth_smoothness(
        outputs, batch["depth1"], batch["depth2"], alpha)

    if balance:
        ratio = jax.lax.stop_gradient(l_m / (l_f + 1e-7))
        feature_term = w_f * ratio * l_f
    else:
        feature_term = w_f * l_f
    total = w_m * l_m + feature_term + w_s * l_s
    return total, {"motion": l_m, "feature": l_f, "smooth": l_s, "total": total}
