"""How much of a pair each candidate motion explains, in the refinement's own terms.

A pixel is an inlier of a motion when the refinement would give it a robust weight of at least
1/2 there: its residual ``phi(I_2)(x + F(x)) - phi(I_1)(x)`` (locally normalised grey levels,
:func:`camflow_jax.refine.pyramid.local_normalize`) is at most the Cauchy width
``c = RefineConfig.cauchy_width * sigma``. To compare candidates, all of them are judged on one
scale, ``sigma``, the smallest of their robust scales (1.4826 x the median absolute residual),
over the pixels that every candidate keeps inside image 2. The share of those pixels each
candidate explains is its *inlier share*.

This picks the dominant motion where two compete (a large object moving against the
background): the refined CamFlow+ flow, a combination of smooth global bases fitted by one
robust cost, bends towards both motions, and so does a homography fitted to it; a rigid motion
taken from point tracks explains one of them exactly, and the motion that explains more of the
frame is the camera's (docs/stabilization.md, "Moving objects"). Textureless pixels are inliers
of every candidate, so they do not decide.

:func:`inlier_shares` and :func:`inlier_weights` (each candidate's per-pixel robust weight on
that scale) are pure ``jax.numpy`` (jit them per image size); :func:`dominant_homography` and
:func:`homography_weights` are their host wrappers for homographies of full-size frames (the
stabilizer keeps the camera's motion with the first; the adaptation's teacher weights a label
by the camera's motion with the second, docs/adaptation.md).

:func:`robust_costs` is the refinement's own objective on that common scale: each candidate's
mean Cauchy cost over the common pixels. Where the inlier share counts pixels (a step at the
Cauchy width: the right question between two different motions), the cost moves with every
hundredth of a pixel, so it tells two estimates of one motion apart (but not the camera's
motion from a compromise with a large object, which the share does, docs/stabilization.md);
:func:`judge_flows` gives both, at the working size (``stabilize --adapt`` keeps, per pair
where the adapted and the unadapted model's motions differ by more than a pixel, the unadapted
one where it fits better by both, docs/adaptation.md).
"""

from __future__ import annotations

import functools

import cv2
import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax.geometry import device, host
from camflow_jax.refine.config import RefineConfig, shrunk_size
from camflow_jax.refine.pyramid import gray, local_normalize
from camflow_jax.refine.solver import robust_scale

__all__ = ["inlier_shares", "inlier_weights", "robust_costs", "dominant_homography", "homography_weights",
           "judge_flows"]


def _judged(img1, img2, flows, cfg: RefineConfig):
    """``(r [K, P], inside [K, P], common [P], width)``: each candidate's residuals, where it keeps
    the pixel inside image 2, where all do, and the common Cauchy width (module doc)."""
    g1, g2 = gray(img1), gray(img2)
    if g1.shape != g2.shape or flows.ndim != 4 or flows.shape[1:] != g1.shape + (2,):
        raise ValueError(f"candidate flows need two images of one size and flows [K, H, W, 2] on it, "
                         f"got {g1.shape}, {g2.shape} and {flows.shape}")
    phi1, phi2 = (local_normalize(g, cfg.local_sigma, cfg.epsilon, cfg.presmooth) for g in (g1, g2))
    h, w = g1.shape
    grid = device.pixel_grid(h, w).reshape(-1, 2)

    def residual(flow):
        x, y = grid[:, 0] + flow[..., 0].ravel(), grid[:, 1] + flow[..., 1].ravel()
        sample = device.sample_bilinear(phi2[..., None], x, y, mode="edge")[:, 0]
        return sample - phi1.ravel(), device.in_frame(x, y, h, w)

    r, inside = jax.vmap(residual)(jnp.asarray(flows, jnp.float32))
    common = jnp.all(inside, axis=0)
    sigma = jnp.min(jax.vmap(lambda rk: robust_scale(rk, common, cfg))(r))
    return r, inside, common, cfg.cauchy_width * sigma


def inlier_shares(img1, img2, flows, cfg: RefineConfig = RefineConfig()) -> jax.Array:
    """``[K]`` inlier shares (module doc) of candidate flows ``[K, H, W, 2]`` (image 1 -> image
    2, pixels of image 1's grid) for the pair ``img1``, ``img2`` (``[H, W]`` or ``[H, W, C]``,
    grey levels 0..255 for ``cfg.epsilon``); normalised with ``cfg``'s ``local_sigma``,
    ``epsilon`` and ``presmooth``, judged with its ``cauchy_width`` and ``sigma_min``. Zeros where
    no pixel stays inside image 2 for every candidate."""
    r, _, common, width = _judged(img1, img2, flows, cfg)
    inlier = (jnp.abs(r) <= width) & common[None]
    return jnp.sum(inlier, axis=1) / jnp.maximum(jnp.sum(common), 1)


def inlier_weights(img1, img2, flows, cfg: RefineConfig = RefineConfig()) -> jax.Array:
    """``[K, H, W]``: each candidate flow's per-pixel Cauchy weight ``1 / (1 + (r / c)^2)`` on the
    common scale of :func:`inlier_shares` (``c`` its Cauchy width; a pixel it explains has a
    weight of at least 1/2), 0 where the candidate moves the pixel out of image 2: the IRLS
    weights the refinement would give each candidate. Arguments as :func:`inlier_shares`."""
    r, inside, _, width = _judged(img1, img2, flows, cfg)
    h, w = np.shape(flows)[1:3]
    return jnp.where(inside, 1.0 / (1.0 + (r / width) ** 2), 0.0).reshape(-1, h, w)


def robust_costs(img1, img2, flows, cfg: RefineConfig = RefineConfig()) -> jax.Array:
    """``[K]``: each candidate flow's mean Cauchy cost ``c^2 / 2 log(1 + (r / c)^2)`` over the
    pixels every candidate keeps inside image 2, on the common scale of :func:`inlier_shares`
    (``c`` its Cauchy width): the refinement's objective, one scale for all (module doc); lower
    fits the pair better. Zeros where no pixel is common. Arguments as :func:`inlier_shares`."""
    r, _, common, width = _judged(img1, img2, flows, cfg)
    rho = 0.5 * width ** 2 * jnp.log1p((r / width) ** 2)
    return jnp.sum(jnp.where(common[None], rho, 0.0), axis=1) / jnp.maximum(jnp.sum(common), 1)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _judge_flows(g1, g2, flows, cfg):
    return robust_costs(g1, g2, flows, cfg), inlier_shares(g1, g2, flows, cfg)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _homography_shares(g1, g2, Hs, cfg):
    h, w = g1.shape
    flows = jax.vmap(lambda H: device.homography_to_flow(H, h, w))(Hs)
    return inlier_shares(g1, g2, flows, cfg)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _homography_weights(g1, g2, H, cfg):
    h, w = g1.shape
    return inlier_weights(g1, g2, device.homography_to_flow(H, h, w)[None], cfg)[0]


def _grey_at_working_size(img1, img2, cfg: RefineConfig):
    """``(g1, g2, (h, w), (hs, ws))``: the grey images (float32 numpy) shrunk (area) to at most
    ``cfg.max_size`` on the longer side, the refinement's working size ``(hs, ws)``, and their
    size before it ``(h, w)``."""
    g1, g2 = (np.asarray(host.gray(x), np.float32) for x in (img1, img2))
    if g1.shape != g2.shape:
        raise ValueError(f"the two images must have one size, got {g1.shape} and {g2.shape}")
    h, w = g1.shape
    hs, ws = shrunk_size(h, w, cfg.max_size)
    if (hs, ws) != (h, w):
        g1, g2 = (cv2.resize(g, (ws, hs), interpolation=cv2.INTER_AREA) for g in (g1, g2))
    return g1, g2, (h, w), (hs, ws)


def _at_working_size(img1, img2, homographies, cfg: RefineConfig):
    """``(g1, g2, Hs)``: the grey images at the working size (:func:`_grey_at_working_size`) and
    the homographies conjugated to that size."""
    Hs = np.asarray(homographies, np.float64)
    if Hs.ndim != 3 or Hs.shape[1:] != (3, 3) or len(Hs) == 0 or not np.all(np.isfinite(Hs)):
        raise ValueError(f"homographies must be finite [K, 3, 3] with K >= 1, got shape {Hs.shape}")
    g1, g2, (h, w), (hs, ws) = _grey_at_working_size(img1, img2, cfg)
    if (hs, ws) != (h, w):
        # pixel centres: x' = (x + 0.5) ws / w - 0.5, as INTER_AREA maps them
        S = np.array([[ws / w, 0, 0.5 * ws / w - 0.5], [0, hs / h, 0.5 * hs / h - 0.5], [0, 0, 1.0]])
        Hs = S[None] @ Hs @ np.linalg.inv(S)[None]
    return jnp.asarray(g1), jnp.asarray(g2), jnp.asarray(Hs, jnp.float32)


def dominant_homography(img1, img2, homographies, cfg: RefineConfig = RefineConfig()) -> tuple[int, np.ndarray]:
    """``(index, shares)``: which of ``homographies`` (image 1 -> image 2 pixels, each ``[3, 3]``)
    explains the most of the pair, and each one's inlier share (:func:`inlier_shares`; numpy).

    Judged on the grey images shrunk (area) to at most ``cfg.max_size`` on the longer side, the
    refinement's working size, with the homographies conjugated to that size. Ties go to the
    first candidate."""
    shares = np.asarray(_homography_shares(*_at_working_size(img1, img2, homographies, cfg), cfg))
    return int(np.argmax(shares)), shares


def homography_weights(img1, img2, homography, cfg: RefineConfig = RefineConfig()) -> np.ndarray:
    """``[h, w]`` float32: the Cauchy weights (:func:`inlier_weights`) of one homography (image 1
    -> image 2 pixels) at the refinement's working size ``(h, w)`` (as
    :func:`dominant_homography` judges): near 1 where it explains the pair, low on what moves
    otherwise."""
    g1, g2, Hs = _at_working_size(img1, img2, np.asarray(homography, np.float64)[None], cfg)
    return np.asarray(_homography_weights(g1, g2, Hs[0], cfg), np.float32)


def judge_flows(img1, img2, flows, cfg: RefineConfig = RefineConfig()) -> tuple[np.ndarray, np.ndarray]:
    """``(costs [K], shares [K])`` float64: :func:`robust_costs` and :func:`inlier_shares` of
    candidate flows ``[K, H, W, 2]`` (image 1 -> image 2, pixels of image 1's grid) judged as
    :func:`dominant_homography` judges: the grey images shrunk (area) to at most
    ``cfg.max_size`` on the longer side, the flows with them
    (:func:`camflow_jax.geometry.host.resize_flow`, values rescaled)."""
    flows = np.asarray(flows, np.float32)
    g1, g2, (h, w), (hs, ws) = _grey_at_working_size(img1, img2, cfg)
    if flows.ndim != 4 or len(flows) == 0 or flows.shape[1:] != (h, w, 2):
        raise ValueError(f"candidate flows must be [K, H, W, 2] (K >= 1) on the images' {h}x{w} grid, "
                         f"got {flows.shape}")
    if not np.all(np.isfinite(flows)):
        raise ValueError("candidate flows must be finite")
    if (hs, ws) != (h, w):
        flows = np.stack([host.resize_flow(f, hs, ws) for f in flows])
    costs, shares = _judge_flows(jnp.asarray(g1), jnp.asarray(g2), jnp.asarray(flows), cfg)
    return np.asarray(costs, np.float64), np.asarray(shares, np.float64)
