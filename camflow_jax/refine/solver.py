r"""Photometric refinement of a motion in the span of its bases (test time).

CamFlow's motion is linear in its coefficients, ``F(x; w) = sum_k w_k b_k(x)``, so aligning the
pair directly over ``w`` is a small nonlinear least-squares problem with N unknowns (N = 24 or
36), started from the network's estimate:

    minimise over w   sum_x rho( r(x; w) ),   r(x; w) = phi(I_2)(x + F(x; w)) - phi(I_1)(x)

* ``phi``: locally normalised intensity (the grey image minus its Gaussian-weighted local mean,
  divided by the local standard deviation): invariant to a gain and a bias, and to slowly varying
  ones (fog, exposure), while keeping the texture; one channel, so a step stays cheap
  (docs/refinement.md, "Choices").
* ``rho``: the Cauchy penalty ``c^2/2 log(1 + (r/c)^2)`` with ``c = 0.7 sigma``
  (``RefineConfig.cauchy_width``) and sigma a robust scale (1.4826 x the median absolute
  residual) fixed per pyramid level: IRLS weights
  ``1 / (1 + (r/c)^2)`` turn moving objects, occlusions and weather particles into outliers.
* Levenberg–Marquardt steps: ``J_k(x) = g(x) . b_k(x)`` with ``g`` the mean of
  ``grad phi(I_2)(x + F)`` and ``grad phi(I_1)(x)`` (ESM; ``esm=False``: image 2's alone),
  ``(J^T W J + lambda diag(J^T W J)) dw = -J^T W r``, an N x N solve per iteration; a step is
  kept only when it lowers the robust cost (else lambda grows), so the cost never increases.
* Pixels whose sample leaves image 2 get zero weight, and count in the cost as a fixed penalty
  (so pushing pixels out of the frame is not free).
* Coarse to fine: the images and the bases are resampled per level (half-pixel centres, a flow in
  pixels scales with the level); a level may use every k-th pixel only (``strides``: the bases
  stay exact at the sampled pixels, so the fixed point does too).
* A basis schedule (``RefineConfig.active``): at the coarse levels only some basis groups move
  (the homography, then with the sharpest depth bases), every basis only at the finest; the
  others' flow is a fixed offset there.
* A detail level (``RefineConfig.detail_size``): when the input is larger than the working size,
  a few last iterations against the input's own images (up to 576 px), at every k-th pixel,
  with the working-size bases enlarged there as the output flow is enlarged.
* Several starts may be given (e.g. the network's coefficients, zero motion, a feature
  homography projected on the bases); each runs coarse to fine and the lowest final cost wins.
* Convergence: a level stops when the largest flow change of an accepted step is below ``tol``
  pixels, when lambda has grown past any useful step, or after its iteration budget.

Everything here is pure ``jax.numpy`` with static shapes: jit it once per image size, ``vmap``
it over pairs; :func:`refine_pair` refines both directions of a pair in one call. Every product
is float32 at HIGHEST precision on every backend (``_dot``; not TF32 on a GPU), whatever the
network's precision policy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax import bases as bases_lib
from camflow_jax.geometry import device
from camflow_jax.refine.config import OUT_OF_FRAME_WIDTHS, RefineConfig, active_stages, default_groups
from camflow_jax.refine.pyramid import (
    BasisPyramid,
    basis_pyramid,
    detail_data,
    detail_stacks,
    gray,
    level_data,
    pair_pyramids,
    resample_bases,
)

__all__ = ["residual", "jacobian", "robust_scale", "project_flow", "refine_motion", "refine_with_pyramids", "refine_pair"]

HIGHEST = device.HIGHEST


def _dot(a, b):
    """``a @ b`` in true float32 (:data:`camflow_jax.geometry.device.HIGHEST`)."""
    return jnp.matmul(a, b, precision=HIGHEST)














def _robust(r, inside, c):
    """(Cauchy cost per pixel, IRLS weight per pixel) for the Cauchy width ``c`` (the robust
    scale times ``RefineConfig.cauchy_width``), out-of-frame pixels at a fixed cost."""
    z = (r / c) ** 2
    rho = 0.5 * c ** 2 * jnp.log1p(z)
    rho_out = 0.5 * c ** 2 * jnp.log1p(OUT_OF_FRAME_WIDTHS ** 2)
    return jnp.where(inside, rho, rho_out), jnp.where(inside, 1.0 / (1.0 + z), 0.0)


def residual(phi1_pts, phi2_stack, grid_pts, bu, bv, coeffs):
    """Residual at a set of P pixels.

    Args:
      phi1_pts: ``[P]`` phi(I_1) at the pixels. phi2_stack: ``[H, W, 3]`` = (phi(I_2), d/dx, d/dy).
      grid_pts: ``[2, P]`` pixel coordinates (x; y) of the pixels.
      bu, bv: ``[N, P]`` the bases' u and v at the pixels. coeffs: ``[N]``.
    Returns:
      ``(r [P], grad [P, 2], inside [P] bool)``: r = phi2(x + F) - phi1(x), the gradient of
      phi2 sampled at x + F, and whether x + F lies inside image 2
      (:func:`camflow_jax.geometry.device.in_frame`, the library's one validity rule).
    """
    return _residual_at(phi1_pts, phi2_stack, grid_pts[0] + _dot(coeffs, bu), grid_pts[1] + _dot(coeffs, bv))


def _residual_at(phi1_pts, phi2_stack, x, y, every_pixel: bool = False):
    """:func:`residual` at given sample positions ``x``, ``y`` ``[P]`` in image 2.
    ``every_pixel``: the samples feed only per-pixel consumers (the final check at every
    pixel), so the plain four-gather sampler (:func:`camflow_jax.geometry.device.sample_bilinear`) is
    used; :func:`_sample_edge` keeps the iterations' Jacobian from recomputing the interpolation,
    but costs ~2.5x as much at every pixel."""
    h, w = phi2_stack.shape[:2]
    s = (device.sample_bilinear(phi2_stack, x, y, mode="edge") if every_pixel
         else _sample_edge(phi2_stack, x, y))
    return s[:, 0] - phi1_pts, s[:, 1:], device.in_frame(x, y, h, w)


def _sample_edge(image, x, y):
    """:func:`camflow_jax.geometry.device.sample_bilinear` (``mode="edge"``) of ``[H, W, C]`` at
    ``[P]`` points, written as one reduction over the four corners, so that XLA:CPU
    materialises the ``[P, C]`` samples instead of fusing the whole interpolation into every
    consumer (the ``[N, P]`` Jacobian would redo it for each basis)."""
    h, w = image.shape[:2]
    x = jnp.clip(x.astype(jnp.float32), 0.0, w - 1.0)
    y = jnp.clip(y.astype(jnp.float32), 0.0, h - 1.0)
    x0, y0 = jnp.floor(x), jnp.floor(y)
    fx, fy = x - x0, y - y0
    x0i = jnp.clip(x0.astype(jnp.int32), 0, w - 1)
    y0i = jnp.clip(y0.astype(jnp.int32), 0, h - 1)
    x1i, y1i = jnp.minimum(x0i + 1, w - 1), jnp.minimum(y0i + 1, h - 1)
    idx = jnp.stack([y0i * w + x0i, y0i * w + x1i, y1i * w + x0i, y1i * w + x1i], axis=1)  # [P, 4]
    wts = jnp.stack([(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy], axis=1)
    corners = jnp.take(image.reshape(h * w, -1), idx, axis=0)  # [P, 4, C]
    return jnp.einsum("pk,pkc->pc", wts, corners, precision=HIGHEST)


def jacobian(grad, bu, bv):
    """``[N, P]`` (transposed) dr/dw_k = grad phi2(x + F) . b_k(x)."""
    return grad[None, :, 0] * bu + grad[None, :, 1] * bv





def robust_scale(r, inside, cfg: RefineConfig):
    """The robust scale sigma of residuals ``r`` ``[P]`` at the pixels where ``inside``:
    1.4826 x their median absolute value (the standard deviation for Gaussian residuals), at
    least ``cfg.sigma_min``; a median of about 8k of them (a regular stride)."""
    step = max(1, r.shape[0] // 8192)  # the median of ~8k samples is plenty for a scale
    ok = inside[::step] & jnp.isfinite(r[::step])
    mad = bases_lib.quantile_nonneg(jnp.where(ok, jnp.abs(r[::step]), 0.0), 0.5, ok)
    mad = jnp.where(jnp.any(ok) & jnp.isfinite(mad), mad, 1.0 / 1.4826)
    return jnp.maximum(1.4826 * mad, cfg.sigma_min)


def _cost(data, coeffs, c):
    """(mean robust cost, (r, grad phi2, IRLS weights)) at ``coeffs`` over the level's pixels,
    for the Cauchy width ``c``."""
    r, grad, inside = residual(*data, coeffs)
    rho, wts = _robust(r, inside, c)
    return rho.sum() / r.shape[0], (r, grad, wts)


def _normal_equations(data, pixels, grad1=None):
    """(J^T W J, J^T W r) (means over the level's pixels) from :func:`_cost`'s per-pixel
    values. ``grad1`` ``[P, 2]``: grad phi(I_1) at the pixels; when given, the Jacobian uses the
    mean of both images' gradients (ESM: second-order convergence near the solution)."""
    r, grad, wts = pixels
    if grad1 is not None:
        grad = 0.5 * (grad + grad1)
    Jt = jacobian(grad, data[3], data[4])
    Jw = Jt * wts[None, :]
    p = r.shape[0]
    return jnp.einsum("np,mp->nm", Jw, Jt, precision=HIGHEST) / p, _dot(Jw, r) / p


def _evaluate(data, coeffs, c, grad1=None):
    """(mean robust cost, J^T W J, J^T W r) at ``coeffs`` (:func:`_cost`, :func:`_normal_equations`)."""
    cost, pixels = _cost(data, coeffs, c)
    return (cost, *_normal_equations(data, pixels, grad1))


def _solve(A, g, lam):
    """LM step ``-(A + lam diag(A) + eps I)^-1 g``."""
    n = A.shape[0]
    d = jnp.diag(A)
    # The absolute floor (1e-6, in the normal equations' units: normalised intensity x pixels)
    # keeps a step from a textureless image, where A and g are round-off, at round-off size.
    reg = A + lam * jnp.diag(d) + (1e-9 * jnp.trace(A) / n + 1e-6) * jnp.eye(n, dtype=A.dtype)
    return -jnp.linalg.solve(reg, g)


def _level(data, coeffs0, sigma, max_iters: int, cfg: RefineConfig, grad1=None):
    """LM iterations at one level from ``coeffs0`` with a fixed robust scale ``sigma`` (over
    the bases in ``data``). Returns (coeffs, cost, iterations)."""
    c = cfg.cauchy_width * sigma
    cost0, A0, g0 = _evaluate(data, coeffs0, c, grad1)

    def cond(s):
        return (s["it"] < max_iters) & ~s["done"]

    def body(s):
        delta = _solve(s["A"], s["g"], s["lam"])
        delta = jnp.where(jnp.all(jnp.isfinite(delta)), delta, 0.0)
        cand = s["w"] + delta
        cost, pixels = _cost(data, cand, c)
        ok = jnp.isfinite(cost) & (cost < s["cost"])
        # the largest flow change at the level's pixels
        change = jnp.maximum(jnp.max(jnp.abs(_dot(delta, data[3]))), jnp.max(jnp.abs(_dot(delta, data[4]))))
        converged = ok & (change < cfg.tol)
        # The normal equations only for an accepted step that another iteration will use (a
        # rejected one retries the same system with more damping; after the last iteration, or
        # a converged step, nothing reads them): rejected and final trials cost a residual.
        A, g = jax.lax.cond(ok & ~converged & (s["it"] + 1 < max_iters),
                            lambda: _normal_equations(data, pixels, grad1), lambda: (s["A"], s["g"]))
        new = {
            "w": jnp.where(ok, cand, s["w"]),
            "cost": jnp.where(ok, cost, s["cost"]),
            "A": A,
            "g": g,
            "lam": jnp.where(ok, jnp.maximum(s["lam"] / 3.0, 1e-7), s["lam"] * 4.0),
            "it": s["it"] + 1,
        }
        new["done"] = converged | (new["lam"] > 1e6)
        return new

    state = {"w": coeffs0, "cost": cost0, "A": A0, "g": g0,
             "lam": jnp.asarray(cfg.damping, jnp.float32), "it": jnp.int32(0),
             "done": jnp.asarray(max_iters == 0)}
    def frozen_when_done(s):
        return jax.tree.map(lambda old, new: jnp.where(s["done"], old, new), s, body(s))

    if cfg.loop == "unrolled":  # the whole budget as straight-line code; a finished pair stays as it was
        for _ in range(max_iters):
            state = frozen_when_done(state)
    else:
        state = jax.lax.while_loop(cond, body, state)
    return state["w"], state["cost"], state["it"]





def project_flow(flow: jax.Array, bases: jax.Array, size: tuple[int, int] | None = None) -> jax.Array:
    """Least-squares coefficients ``[N]`` of ``flow`` ``[H, W, 2]`` in the span of ``bases``
    ``[N, H, W, 2]`` (both resampled to ``size`` first, e.g. a coarse level, to save time).
    Non-finite flow values are ignored."""
    flow = jnp.asarray(flow, jnp.float32)
    if size is not None and tuple(size) != tuple(flow.shape[:2]):
        flow = resample_bases(flow[None], *size)[0]
        bases = resample_bases(bases, *size)
    n = bases.shape[0]
    ok = jnp.repeat(jnp.all(jnp.isfinite(flow), axis=-1).reshape(-1), 2)
    A = jnp.where(ok[:, None], bases.reshape(n, -1).T, 0.0)
    b = jnp.where(ok, flow.reshape(-1), 0.0)
    # Minimum-norm least squares (SVD, small singular values cut): basis sets can be nearly
    # dependent (depth bases of a constant depth map fall into the homography span), and
    # normal equations then return huge cancelling coefficients that only cancel on this grid.
    return jnp.linalg.lstsq(A, b, rcond=1e-4)[0]


def refine_motion(img1, img2, bases, starts, cfg: RefineConfig = RefineConfig(), groups=None,
                  detail=None) -> dict:
    """Refines the motion image 1 -> image 2 in the span of ``bases``.

    Args:
      img1, img2: ``[H, W]`` or ``[H, W, C]`` (any intensity scale; grey levels 0..255 for the
        default ``epsilon``).
      bases: ``[N, H, W, 2]`` on image 1's grid (pixels of that grid), its components
        ``(u [N, H, W], v [N, H, W])`` (saves a copy), or their :class:`BasisPyramid` (built once
        and reused, e.g. for bases shared by many pairs; :func:`with_detail` adds the detail
        level's samples to it); the refined flow is
        ``sum_k coeffs_k bases_k``.
      starts: ``[S, N]`` candidate start coefficients; ``starts[0]`` is the reference (the
        network's), returned unchanged when refinement cannot lower its cost (non-finite
        values are read as 0, so the result is always finite).
      cfg: :class:`RefineConfig` (static).
      groups: the bases' layout ``((group name, count), ...)`` in basis order (static), which
        ``cfg.active``'s group names refer to; default :func:`default_groups` (CamFlow's:
        12 homography, 12 stochastic, the rest depth). The Predictor passes its model's.
      detail: None, or the same two images at a higher resolution ``[H', W']`` (H' >= H,
        W' >= W; e.g. the input before it was shrunk to the working size): a last level there
        (``cfg.detail_iterations`` iterations over every basis at every ``cfg.detail_stride``-th
        pixel), whose bases are the working-size ones enlarged bilinearly at those pixels (as
        :func:`camflow_jax.geometry.host.resize_flow` enlarges the flow). The flow, weights and
        costs stay at the working size.
    Returns:
      dict: ``coeffs [N]``, ``flow [H, W, 2]``, ``weights [H, W]`` (final IRLS weights at the
      working resolution, 0 outside the frame: an inlier map), ``cost_before`` (start 0) and
      ``cost_after`` (robust cost at the finest level, full grid, same scale), ``iterations``
      ``[levels]`` (coarsest first; a level's stages summed; one more with ``detail``), ``start`` (index of the start
      that won), ``start_costs`` (each start's final robust cost on the one scale
      ``cost_after`` uses; with
      ``select_after``, only the start that went on: ``[1]``), ``improved`` (bool:
      False means the reference start was returned), ``sigma`` (the final robust scale),
      ``noisy`` (bool: the pair got ``cfg.noise_presmooth``, :func:`pair_pyramids`).
    """
    p1, p2, noisy = pair_pyramids(gray(img1), gray(img2), cfg)
    d = None if detail is None else detail_stacks(gray(detail[0]), gray(detail[1]), cfg, noisy)
    return {**refine_with_pyramids(p1, p2, bases, starts, cfg, groups, d), "noisy": noisy}


def refine_with_pyramids(pyr1, pyr2, bases, starts, cfg: RefineConfig = RefineConfig(), groups=None,
                         detail=None) -> dict:
    """:func:`refine_motion` from the images' :func:`image_pyramid` s (``pyr1`` of image 1,
    ``pyr2`` of image 2, made with the same ``cfg``); same arguments and results otherwise.
    ``detail``: None, or the images' :func:`image_stack` s ``(stack 1, stack 2)`` at a
    resolution above the working size's, for a last level there (:func:`refine_motion`)."""
    H, W = pyr1[-1].shape[:2]
    bp = bases if isinstance(bases, BasisPyramid) else basis_pyramid(bases, cfg)
    if len(bp.levels) != cfg.levels:
        raise ValueError(f"the basis pyramid has {len(bp.levels)} levels, the config {cfg.levels}")
    starts = jnp.asarray(starts, jnp.float32)
    starts = jnp.where(jnp.isfinite(starts), starts, 0.0)  # never propagate NaN from a start
    n = bp.levels[0][0].shape[0]
    groups = default_groups(n) if groups is None else tuple((str(g), int(k)) for g, k in groups)
    if sum(k for _, k in groups) != n:
        raise ValueError(f"groups {groups} lay out {sum(k for _, k in groups)} bases, the basis set has {n}")
    levels = []
    for li, (u, v) in enumerate(bp.levels):  # coarsest first
        k = cfg.strides[li]
        data = level_data(pyr1[li][..., 0], pyr2[li], u, v, k)
        grad1 = pyr1[li][::k, ::k, 1:].reshape(-1, 2) if cfg.esm else None
        levels.append((data, active_stages(cfg.active[li], groups), grad1))
    iterations = list(cfg.iterations)
    if detail is not None:
        s1, s2 = (jnp.asarray(x, jnp.float32) for x in detail)
        if s1.shape != s2.shape or s1.ndim != 3 or s1.shape[2] != 3 or s1.shape[0] < H or s1.shape[1] < W:
            raise ValueError(f"detail stacks must be two [H', W', 3] of one size at least the working "
                             f"size {H}x{W}, got {s1.shape} and {s2.shape}")
        data, grad1 = detail_data(s1, s2, bp, cfg.detail_stride)
        levels.append((data, active_stages("all", groups), grad1 if cfg.esm else None))
        iterations.append(cfg.detail_iterations)
    num_levels = len(levels)
    full = level_data(pyr1[-1][..., 0], pyr2[-1], None, None, 1)[:3]  # the finest level's every pixel

    def coarse_to_fine(coeffs, first=0, last=num_levels):
        its = []
        for li in range(first, last):
            data, stages, grad1 = levels[li]
            r0, _, in0 = residual(*data, coeffs)
            sigma = robust_scale(r0, in0, cfg)
            it = 0
            for idx in stages:  # each stage: LM over its bases, the others' flow a fixed offset
                if len(idx) == n:
                    coeffs, _, k = _level(data, coeffs, sigma, iterations[li], cfg, grad1)
                else:
                    phi1_pts, stack2, pts, u, v = data
                    move = np.asarray(idx)
                    fixed = np.setdiff1d(np.arange(n), move)
                    head = slice(0, len(idx)) if idx == tuple(range(len(idx))) else move  # a slice: no gather
                    if len(fixed):
                        pts = pts + jnp.stack([_dot(coeffs[fixed], u[fixed]), _dot(coeffs[fixed], v[fixed])])
                    part, _, k = _level((phi1_pts, stack2, pts, u[head], v[head]), coeffs[head], sigma,
                                        iterations[li], cfg, grad1)
                    coeffs = coeffs.at[head].set(part)
                it = it + k
            its.append(it)
        return coeffs, jnp.stack(its)

    # Every start runs coarse to fine (one after the other: a batched while_loop would run
    # each for as long as the slowest); the lowest final cost wins, on one robust scale (the
    # reference start's result's), at the finest level's every pixel. With ``select_after``,
    # the starts run only up to that level, and the one with the lowest cost there (on the
    # reference start's scale, at that level's pixels) goes on alone.
    num = starts.shape[0]
    sel = num_levels - 1 if cfg.select_after is None or num == 1 else min(cfg.select_after, num_levels - 1)
    runs = [coarse_to_fine(starts[i], 0, sel + 1) for i in range(num)]
    run_start = jnp.arange(num)
    if sel < num_levels - 1:
        data = levels[sel][0]
        res = [residual(*data, c) for c, _ in runs]
        scale = robust_scale(res[0][0], res[0][2], cfg)
        level_costs = jnp.stack([jnp.where(jnp.all(jnp.isfinite(c)), _robust(r, inside, cfg.cauchy_width * scale)[0].mean(), jnp.inf)
                                 for (c, _), (r, _, inside) in zip(runs, res)])
        pick = jnp.argmin(level_costs)
        c_fin, its_fin = coarse_to_fine(jnp.stack([c for c, _ in runs])[pick], sel + 1)
        runs = [(c_fin, jnp.concatenate([jnp.stack([i for _, i in runs])[pick], its_fin]))]
        run_start = pick[None]
    # The flows of every result and of the reference start at every pixel, in one pass over
    # the bases (the largest arrays here): the final check and the output read them.
    cands = jnp.stack([c for c, _ in runs] + [starts[0]])
    fu = fv = 0.0
    lo = 0
    for gu, gv in bp.full:
        m = gu.shape[0]
        fu = fu + _dot(cands[:, lo:lo + m], gu.reshape(m, -1))
        fv = fv + _dot(cands[:, lo:lo + m], gv.reshape(m, -1))
        lo += m
    phi1_full, stack2_full, pts_full = full
    resid = [_residual_at(phi1_full, stack2_full, pts_full[0] + fu[i], pts_full[1] + fv[i], every_pixel=True)
             for i in range(cands.shape[0])]
    sigma = robust_scale(resid[0][0], resid[0][2], cfg)
    width = cfg.cauchy_width * sigma
    costs, maps = [], []
    for i, (c, _) in enumerate(runs):
        rho, wts = _robust(resid[i][0], resid[i][2], width)
        costs.append(jnp.where(jnp.all(jnp.isfinite(c)), rho.mean(), jnp.inf))
        maps.append(wts)
    costs = jnp.stack(costs)
    best = jnp.argmin(jnp.where(jnp.isfinite(costs), costs, jnp.inf))
    its = jnp.stack([i for _, i in runs])[best]
    cost_after, wts = costs[best], jnp.stack(maps)[best]
    rho0, wts0 = _robust(resid[-1][0], resid[-1][2], width)
    cost_before = rho0.mean()
    improved = jnp.isfinite(cost_after) & (cost_after < cost_before) & jnp.all(jnp.isfinite(cands[best]))
    pick = jnp.where(improved, best, cands.shape[0] - 1)
    coeffs = cands[pick]
    wts = jnp.where(improved, wts, wts0)
    flow = jnp.stack([fu[pick], fv[pick]], axis=-1).reshape(H, W, 2)
    return {
        "coeffs": coeffs,
        "flow": flow,
        "weights": wts.reshape(H, W),
        "cost_before": cost_before,
        "cost_after": jnp.where(improved, cost_after, cost_before),
        "iterations": its,
        "start": jnp.where(improved, run_start[best], 0),
        "start_costs": costs,
        "improved": improved,
        "sigma": sigma,
    }


def refine_pair(img1, img2, bases_f, bases_b, starts_f, starts_b, cfg: RefineConfig = RefineConfig(),
                groups=None, detail=None) -> dict:
    """Both directions in one call: forward (image 1 -> 2, ``bases_f`` on image 1's grid) and
    backward (image 2 -> 1, ``bases_b`` on image 2's grid); ``detail``: as :func:`refine_motion`'s
    (image 1, image 2 at the higher resolution). Every output of
    :func:`refine_motion` but ``noisy`` (one for the pair) gains a leading axis of 2 (forward,
    backward).

    The directions run one after the other, in one computation under ``jax.jit``. Neither
    ``vmap`` (XLA:CPU runs the batched normal-equation matmul ~9x slower than two plain ones)
    nor ``lax.map`` (1.6x slower on a 2-core CPU at 160x288) is faster (docs/refinement.md).
    The Predictor instead calls one jitted direction twice, in two threads on a multi-core CPU
    (XLA:CPU runs each inline on its calling thread, so only threads make them overlap), and
    shares one cached :class:`BasisPyramid` of the static bases between them."""
    p1, p2, noisy = pair_pyramids(gray(img1), gray(img2), cfg)
    d1 = d2 = None
    if detail is not None:
        s1, s2 = detail_stacks(gray(detail[0]), gray(detail[1]), cfg, noisy)
        d1, d2 = (s1, s2), (s2, s1)
    fwd = refine_with_pyramids(p1, p2, bases_f, starts_f, cfg, groups, d1)
    bwd = refine_with_pyramids(p2, p1, bases_b, starts_b, cfg, groups, d2)
    out = jax.tree.map(lambda a, b: jnp.stack([a, b]), fwd, bwd)
    out["noisy"] = noisy
    return out
