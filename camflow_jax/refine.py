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
it over pairs; :func:`refine_pair` refines both directions of a pair in one call.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax import bases as bases_lib
from camflow_jax import geometry
from camflow_jax.models.camflow import group_layout
from camflow_jax.models.config import DEPTH_GROUP, GROUP_NAMES

__all__ = ["RefineConfig", "gray", "local_normalize", "image_gradients", "pyramid_sizes",
           "downsample2", "resample_bases", "image_pyramid", "image_stack", "detail_stacks", "residual",
           "jacobian", "refine_motion", "refine_with_pyramids", "refine_pair", "BasisPyramid", "basis_pyramid",
           "join_basis_pyramids", "with_detail",
           "project_flow", "noise_ratio", "pair_pyramids", "active_stages", "default_groups",
           "NOISE_SIZE", "NOISE_BLOCK"]

#: Out-of-frame pixels cost as much as a residual of this many Cauchy widths.
OUT_OF_FRAME_WIDTHS = 3.0
#: The noise test (:func:`pair_pyramids`) looks at the grey image halved until its longer side
#: is at most this (the default working size), so ``noise_ratio`` means the same at every size.
NOISE_SIZE = 288
#: The noise test's blocks (pixels a side); an image needs NOISE_BLOCK + 2 a side for one.
NOISE_BLOCK = 8


def _parse_active(entry) -> tuple[tuple[str, ...], ...] | int:
    """An ``active`` entry as an int (first k bases; 0 and ``"all"``: every basis) or its stages
    (tuples of group names). ValueError on anything else."""
    if isinstance(entry, str):
        if entry.strip() == "all":
            return 0
        stages = []
        for stage in entry.split(">"):
            names = tuple(g.strip() for g in stage.split("+"))
            for g in names:
                if g not in GROUP_NAMES and not (
                        g.startswith(DEPTH_GROUP) and g[len(DEPTH_GROUP):].isdigit()):
                    raise ValueError(f"active: unknown basis group {g!r} in {entry!r}; groups are "
                                     f"{list(GROUP_NAMES)} and {DEPTH_GROUP}<s> (depth level s), "
                                     f"joined by '+', stages by '>', or 'all'")
            stages.append(names)
        return tuple(stages)
    if isinstance(entry, (bool, float)) or not isinstance(entry, int) and not hasattr(entry, "__index__"):
        raise ValueError(f"active: an entry is 'all', a count >= 0 or a group schedule string, got {entry!r}")
    if int(entry) < 0:
        raise ValueError(f"active: a count must be >= 0, got {entry}")
    return int(entry)


def default_groups(n: int) -> tuple[tuple[str, int], ...]:
    """The basis layout ``((group, count), ...)`` assumed for ``n`` bases when none is given:
    CamFlow's order, the first 12 homography, the next 12 stochastic, the rest depth."""
    sizes, names = group_layout(min(12, n), min(12, max(0, n - 12)), max(0, n - 24))
    return tuple(zip(names, sizes))


def active_stages(entry, groups) -> tuple[tuple[int, ...], ...]:
    """The basis indices refined by each stage of one ``active`` entry, for a basis set laid
    out as ``groups`` (``((name, count), ...)`` in basis order, e.g. a model's
    ``zip(group_names, group_sizes)``). Groups the set lacks are skipped, and so is a stage left
    empty (a level whose stages are all empty refines nothing) or equal to the one before it
    (CamFlow without depth: ``"homography > homography+depth0"`` is one homography stage); the
    depth group splits into levels of 3 (f^x, f^y, f^z per level)."""
    n = sum(k for _, k in groups)
    parsed = _parse_active(entry)
    if isinstance(parsed, int):
        return (tuple(range(min(parsed, n) if parsed else n)),)
    spans, lo = {}, 0
    for name, k in groups:
        spans[name] = range(lo, lo + k)
        if name == DEPTH_GROUP:
            for s in range(k // 3):
                spans[f"{DEPTH_GROUP}{s}"] = range(lo + 3 * s, lo + 3 * s + 3)
        lo += k
    out = []
    for stage in parsed:
        idx = tuple(sorted({i for g in stage for i in spans.get(g, ())}))
        if idx and (not out or idx != out[-1]):  # a stage the set reduces to its predecessor's: once
            out.append(idx)
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class RefineConfig:
    """Settings of :func:`refine_motion` (hashable: a static argument of ``jax.jit``).

    levels: pyramid levels (the finest is the working resolution).
    iterations: LM iterations per level, coarsest first (at most; a level stops on convergence).
      The default gives the finest level 10 (6 until the tenth round: on development pairs,
      with 6 detail iterations instead of 4, 0.61 -> 0.57 and 0.73 -> 0.69 px, no pair worse;
      docs/refinement.md, "More iterations at the finest levels"). The coarsest level's 8 (12
      until the eleventh round; each of its two basis stages gets them) came with the narrower
      Cauchy width: on the same pairs 0.401 -> 0.393 and 0.402 -> 0.381 px with ~6 fewer
      iterations per direction (6 gave 0.402 and 0.381).
    strides: per level (coarsest first), use every k-th pixel in x and y (the bases stay exact
      at the sampled pixels, so a stride thins the data without biasing the fixed point).
    max_size: images whose longer side exceeds it are refined at this size (the caller resizes).
    local_sigma: Gaussian window (pixels of each level) of the local normalisation.
    presmooth: Gaussian blur (pixels of each level) before normalising (noise, aliasing).
    epsilon: floor of the local standard deviation, in grey levels (0..255): flat regions stay
      flat instead of amplifying noise.
    sigma_min: floor of the robust scale (normalised units).
    cauchy_width: the Cauchy penalty's width c in units of the robust scale sigma. A residual of
      c gets weight 1/2. 0.7 was chosen on development pairs (seeds 7 and 8, 100 pairs each at
      320x576) in the eleventh round: with depth 0.57 -> 0.40 and 0.69 -> 0.40 px, without depth
      3.17 -> 2.95 and 3.54 -> 3.24, against the textbook 2.385 (95 % efficiency on Gaussian
      noise), which lets weather, occlusions and parallax pull the solution
      (docs/refinement.md, "Choices").
    damping: initial LM lambda.
    tol: convergence threshold (pixels of the level) on the flow change of an accepted step.
    active: per level (coarsest first), which bases are refined there (the others keep their
      values): ``"all"`` (or 0); an int k, the first k bases; or stages by basis group, run one
      after the other at that level, each with the level's iteration budget: stages are joined
      by ``">"``, a stage's groups by ``"+"``, a group is ``"homography"``, ``"stochastic"``,
      ``"depth"`` or ``"depth<s>"`` (the depth bases of depth level s: f^x, f^y, f^z). A group
      the basis set lacks is skipped (:func:`active_stages`). The default refines the
      homography first, then with the sharpest depth bases (the camera's translation) at the
      coarsest level, adds the second depth level at the middle one and everything (stochastic
      bases, blurred depth) only at the finest: the network's start puts little weight on
      the depth bases, and letting all 36 bases move at once from there sent pairs into wrong
      minima (docs/refinement.md, "Basis schedule").
    starts: which candidate starts to try ("network", "zero", "homography": a feature
      homography when the caller can compute one); the first is the reference for
      ``cost_before``.
    select_after: with several starts, each runs only up to this level (0 = the coarsest), and
      the one with the lowest robust cost there goes on alone (None: every start runs to the
      finest level and the final cost decides; the cheaper choice only skips the losers'
      finer levels).
    noise_presmooth: the pre-blur (pixels of each level) used instead of ``presmooth`` when the
      pair is noisy: when either image's :func:`noise_ratio` exceeds ``noise_ratio`` (dark,
      high-gain frames, where the 1-px pre-blur leaves the normalised images noise-dominated
      and the refinement wanders off). None: never. The threshold sits between the clean and
      the low-light synthetic images and above real photographs with fine texture
      (docs/refinement.md, "Noisy images").
    noise_ratio: the threshold of the noise test (noise floor over median local contrast).
    esm: the Jacobian uses the mean of both images' gradients, grad phi(I_2)(x + F) and
      grad phi(I_1)(x), instead of image 2's alone (efficient second-order minimisation: near the
      solution the step is second-order accurate at first-order cost). On development pairs it
      lowered the EPE at the same iteration budget (docs/refinement.md, "Choices").
    detail_size: a last level above the working size (None: none): when the input is larger
      than ``max_size``, ``detail_iterations`` more iterations over every basis at every
      ``detail_stride``-th pixel of the input itself, or of the input shrunk to this longer side
      (the caller resizes; :meth:`camflow_jax.predictor.Predictor.detail_size`). The bases
      there are the working-size ones enlarged bilinearly at those pixels, as the output flow
      is enlarged, so the level refines exactly the flow the caller gets, against the sharper
      images; the flow, weights and costs stay at the working size. It runs only when
      ``detail_size`` exceeds the working size (never for ``at_size(576)``). On development
      pairs it took the mean EPE from 0.84 to 0.67 and 0.95 to 0.74 px (every 8th pixel) for
      about 5 ms a pair (docs/refinement.md, "Detail level").
    detail_iterations: LM iterations at the detail level (at most).
    detail_stride: the detail level uses every k-th pixel in x and y (5: 7,424 pixels at
      320x576, 2.6x the working size's finest level at its stride 4; on development pairs it
      gave 0.61 and 0.73 px against 0.68 and 0.80 for 8, for about 2 ms more a pair:
      docs/refinement.md, "Detail level").
    """

    levels: int = 3
    iterations: tuple[int, ...] = (8, 10, 10)
    strides: tuple[int, ...] = (1, 2, 4)
    max_size: int = 288
    local_sigma: float = 4.0
    presmooth: float = 1.0
    epsilon: float = 2.0
    sigma_min: float = 0.02
    cauchy_width: float = 0.7
    damping: float = 1e-3
    tol: float = 0.02
    active: tuple[int | str, ...] = ("homography > homography+depth0", "homography+depth0+depth1", "all")
    starts: tuple[str, ...] = ("network",)
    select_after: int | None = None
    noise_presmooth: float | None = 2.0
    noise_ratio: float = 0.17
    esm: bool = True
    detail_size: int | None = 576
    detail_iterations: int = 6
    detail_stride: int = 5

    def __post_init__(self):
        if self.levels < 1:
            raise ValueError(f"refinement needs at least one level, got {self.levels}")
        if len(self.iterations) != self.levels or any(int(i) < 0 for i in self.iterations):
            raise ValueError(f"iterations must give {self.levels} non-negative counts (coarsest "
                             f"first), got {self.iterations}")
        if len(self.strides) != self.levels or any(int(k) < 1 for k in self.strides):
            raise ValueError(f"strides must give {self.levels} positive steps (coarsest first), got {self.strides}")
        if len(self.active) != self.levels:
            raise ValueError(f"active must give {self.levels} entries (coarsest first), got {self.active}")
        for a in self.active:
            _parse_active(a)  # raises on a bad entry
        if self.max_size < 16:
            raise ValueError(f"max_size must be >= 16, got {self.max_size}")
        if self.detail_size is not None and (isinstance(self.detail_size, bool) or int(self.detail_size) < 16):
            raise ValueError(f"detail_size must be None or >= 16, got {self.detail_size}")
        if isinstance(self.detail_iterations, bool) or int(self.detail_iterations) < 0:
            raise ValueError(f"detail_iterations must be >= 0, got {self.detail_iterations}")
        if isinstance(self.detail_stride, bool) or int(self.detail_stride) < 1:
            raise ValueError(f"detail_stride must be >= 1, got {self.detail_stride}")
        for name in ("local_sigma", "epsilon", "sigma_min", "cauchy_width", "damping", "tol"):
            v = getattr(self, name)
            if not (v == v and 0 < v < float("inf")):
                raise ValueError(f"refinement setting {name} must be a positive number, got {v}")
        if not (self.presmooth == self.presmooth and 0 <= self.presmooth < float("inf")):
            raise ValueError(f"presmooth must be >= 0, got {self.presmooth}")
        if self.noise_presmooth is not None and not (
                self.noise_presmooth == self.noise_presmooth and 0 <= self.noise_presmooth < float("inf")):
            raise ValueError(f"noise_presmooth must be None or >= 0, got {self.noise_presmooth}")
        if not (self.noise_ratio == self.noise_ratio and 0 < self.noise_ratio < float("inf")):
            raise ValueError(f"noise_ratio must be a positive number, got {self.noise_ratio}")
        if self.select_after is not None and not 0 <= int(self.select_after) < self.levels:
            raise ValueError(f"select_after must be None or a level in 0..{self.levels - 1}, got {self.select_after}")
        known = {"network", "zero", "homography"}
        if not self.starts or any(s not in known for s in self.starts) or len(set(self.starts)) != len(self.starts):
            raise ValueError(f"starts must be distinct names from {sorted(known)}, got {self.starts}")
        object.__setattr__(self, "iterations", tuple(int(i) for i in self.iterations))
        object.__setattr__(self, "strides", tuple(int(i) for i in self.strides))
        object.__setattr__(self, "active", tuple(a if isinstance(a, str) else int(a) for a in self.active))
        object.__setattr__(self, "starts", tuple(self.starts))
        object.__setattr__(self, "detail_size", None if self.detail_size is None else int(self.detail_size))
        object.__setattr__(self, "detail_iterations", int(self.detail_iterations))
        object.__setattr__(self, "detail_stride", int(self.detail_stride))

    @classmethod
    def at_size(cls, max_size: int, **changes) -> "RefineConfig":
        """The default settings carried to a larger working size: one pyramid level more per
        doubling of the default's 288 px (rounded), so the coarsest level keeps its size and
        reach (exactly for 576, 1152, ...; within a factor sqrt(2) otherwise); each new finer level doubles the stride (the same number of sampled pixels per
        level) and gets 4 iterations. ``at_size(288)`` is the default;
        ``at_size(576)`` is ``levels=4, iterations=(8, 10, 10, 4), strides=(1, 2, 4, 8)`` and the
        default's ``active`` with ``"all"`` at the new level. ~3-4x slower at 576. With the
        eleventh round's defaults it is more precise on finely textured real images (Aloe with
        depth 0.209 against 0.332 px) but not on the synthetic benchmark's average (0.22
        against 0.21 px: RE better, rain and snow worse). In the seventh round, with the wider
        Cauchy width, it gave 0.45 against 0.67 there. Dark, noisy frames need the noise test
        there. docs/refinement.md, "Working resolution".
        ``changes``: other settings, as :meth:`replace`."""
        base = cls()
        if not max_size >= base.max_size:
            raise ValueError(f"at_size needs max_size >= {base.max_size} (the default's), got {max_size}")
        extra = int(round(math.log2(max_size / base.max_size)))
        cfg = dataclasses.replace(
            base, max_size=int(max_size), levels=base.levels + extra,
            iterations=base.iterations + (4,) * extra,
            strides=base.strides + tuple(base.strides[-1] * 2 ** (i + 1) for i in range(extra)),
            active=base.active + ("all",) * extra)
        return cfg.replace(**changes)

    def replace(self, **changes) -> "RefineConfig":
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown refinement setting(s) {sorted(unknown)}; valid: "
                             f"{[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **changes)


# ----------------------------------------------------------------------------- image features
def gray(image: jax.Array) -> jax.Array:
    """``[H, W]`` float32 grey (mean over channels) of ``[H, W]``, ``[H, W, 1]`` or ``[H, W, 3]``."""
    x = jnp.asarray(image, jnp.float32)
    return x.mean(axis=-1) if x.ndim == 3 else x


def local_normalize(g: jax.Array, sigma: float = 4.0, epsilon: float = 2.0, presmooth: float = 1.0) -> jax.Array:
    """Locally normalised intensity ``(I - G*I) / sqrt(G*(I - G*I)^2 + eps^2)`` of a grey ``[H, W]``.

    A gain a and bias b (``a I + b``, a > 0) leave it unchanged up to the ``epsilon`` floor
    (relative to a); so do gain and bias fields that vary slowly across the ``sigma`` window.
    """
    return _normalize(geometry.gaussian_blur(jnp.asarray(g, jnp.float32), presmooth), sigma, epsilon)


def _normalize(g, sigma, epsilon):
    """:func:`local_normalize` of an image already pre-blurred."""
    d = g - geometry.gaussian_blur(g, sigma)
    return d / jnp.sqrt(geometry.gaussian_blur(d * d, sigma) + epsilon ** 2)


def noise_ratio(g: jax.Array, block: int = NOISE_BLOCK) -> jax.Array:
    """How noisy a grey ``[H, W]`` image is for the refinement: its noise floor over its typical
    contrast (a scalar; at 288 px, 0.01-0.15 for the synthetic clean and weather frames and
    real photographs we tried, 0.18-0.54 for the dark, high-gain ones). Both come from the same ``block`` x ``block`` blocks (cheap: no blur, no sort of
    the image).

    Noise floor: the response to Immerkaer's 3x3 mask ``[1,-2,1] x [1,-2,1]`` (6 sigma for white
    noise of std sigma, ~0 on smooth shading) has an RMS per block; the 5th percentile of those,
    / 6, is the noise in the flattest parts of the image, which fine texture does not reach the
    way a whole-image statistic would (a low percentile of 64-pixel RMSs: ~0.79 sigma for white
    noise of std sigma). Contrast: the median over blocks of the standard deviation in a block."""
    g = jnp.asarray(g, jnp.float32)
    h, w = g.shape
    if h < block + 2 or w < block + 2:
        raise ValueError(f"noise_ratio needs an image of at least {block + 2} px a side, got {h}x{w}")

    def blocks(x):
        bh, bw = (x.shape[0] // block) * block, (x.shape[1] // block) * block
        return x[:bh, :bw].reshape(bh // block, block, bw // block, block)

    dx = g[:, :-2] - 2.0 * g[:, 1:-1] + g[:, 2:]
    lap = blocks(dx[:-2] - 2.0 * dx[1:-1] + dx[2:])
    noise = jnp.quantile(jnp.sqrt(jnp.mean(lap * lap, axis=(1, 3))).reshape(-1), 0.05) / 6.0
    contrast = jnp.median(jnp.std(blocks(g), axis=(1, 3)).reshape(-1))
    return noise / jnp.maximum(contrast, 1e-6)


def image_gradients(phi: jax.Array) -> jax.Array:
    """``[H, W, 2]`` (d/dx, d/dy) by central differences (one-sided at the borders)."""
    gx = jnp.gradient(phi, axis=1)
    gy = jnp.gradient(phi, axis=0)
    return jnp.stack([gx, gy], axis=-1)


# ----------------------------------------------------------------------------- pyramid
def pyramid_sizes(h: int, w: int, levels: int) -> list[tuple[int, int]]:
    """Level sizes, finest first: each is ``ceil(previous / 2)``."""
    sizes = [(h, w)]
    for _ in range(levels - 1):
        h, w = (h + 1) // 2, (w + 1) // 2
        sizes.append((h, w))
    return sizes


def downsample2(x: jax.Array) -> jax.Array:
    """Halves ``[..., H, W, C]`` by 2x2 averaging (the last row / column is repeated when odd).

    Pixel x of the result sits at 2x + 0.5 on the input grid (half-pixel centres), so a flow
    field downsampled this way and divided by 2 is the same motion in pixels of the new grid.
    """
    h, w = x.shape[-3], x.shape[-2]
    if h % 2 or w % 2:
        pad = [(0, 0)] * (x.ndim - 3) + [(0, h % 2), (0, w % 2), (0, 0)]
        x = jnp.pad(x, pad, mode="edge")
    return 0.25 * (x[..., 0::2, 0::2, :] + x[..., 1::2, 0::2, :] + x[..., 0::2, 1::2, :] + x[..., 1::2, 1::2, :])


def _half(x: jax.Array) -> jax.Array:
    """:func:`downsample2` of ``[..., H, W]`` (no channel axis)."""
    h, w = x.shape[-2], x.shape[-1]
    if h % 2 or w % 2:
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, h % 2), (0, w % 2)], mode="edge")
    return 0.25 * (x[..., 0::2, 0::2] + x[..., 1::2, 0::2] + x[..., 0::2, 1::2] + x[..., 1::2, 1::2])


def resample_bases(bases: jax.Array, h: int, w: int) -> jax.Array:
    """Bases (or flows) ``[N, H, W, 2]`` resampled to ``h x w`` (half-pixel centres) with u
    scaled by w/W and v by h/H: the same motions in pixels of the new grid. Linear, so
    coefficients keep their meaning. Sizes of :func:`pyramid_sizes` are reached by repeated
    :func:`downsample2` (2x2 averaging, exact and cheap); other sizes by bilinear resampling."""
    n, H, W, _ = bases.shape
    while (H, W) != (h, w) and ((H + 1) // 2, (W + 1) // 2) >= (h, w) and h <= (H + 1) // 2 and w <= (W + 1) // 2:
        bases = downsample2(bases) * 0.5
        n, H, W, _ = bases.shape
    if (h, w) == (H, W):
        return bases
    out = jax.image.resize(bases, (n, h, w, 2), method="linear", antialias=False)
    return out * jnp.array([w / W, h / H], out.dtype)


# ----------------------------------------------------------------------------- residual, Jacobian
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
      (:func:`camflow_jax.geometry.in_frame`, the library's one validity rule).
    """
    return _residual_at(phi1_pts, phi2_stack, grid_pts[0] + coeffs @ bu, grid_pts[1] + coeffs @ bv)


def _residual_at(phi1_pts, phi2_stack, x, y, every_pixel: bool = False):
    """:func:`residual` at given sample positions ``x``, ``y`` ``[P]`` in image 2.
    ``every_pixel``: the samples feed only per-pixel consumers (the final check at every
    pixel), so the plain four-gather sampler (:func:`camflow_jax.geometry.sample_bilinear`) is
    used; :func:`_sample_edge` keeps the iterations' Jacobian from recomputing the interpolation,
    but costs ~2.5x as much at every pixel."""
    h, w = phi2_stack.shape[:2]
    s = (geometry.sample_bilinear(phi2_stack, x, y, mode="edge") if every_pixel
         else _sample_edge(phi2_stack, x, y))
    return s[:, 0] - phi1_pts, s[:, 1:], geometry.in_frame(x, y, h, w)


def _sample_edge(image, x, y):
    """:func:`camflow_jax.geometry.sample_bilinear` (``mode="edge"``) of ``[H, W, C]`` at
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
    return jnp.einsum("pk,pkc->pc", wts, corners)


def jacobian(grad, bu, bv):
    """``[N, P]`` (transposed) dr/dw_k = grad phi2(x + F) . b_k(x)."""
    return grad[None, :, 0] * bu + grad[None, :, 1] * bv


# ----------------------------------------------------------------------------- one level
def image_pyramid(g: jax.Array, cfg: RefineConfig = RefineConfig(), noisy=None) -> tuple[jax.Array, ...]:
    """The per-level description of one grey image ``[H, W]``: a tuple, coarsest level first,
    of ``[h, w, 3]`` stacks (phi, d phi/dx, d phi/dy) with phi the locally normalised intensity
    (:func:`local_normalize`) of the image halved (:func:`downsample2`) level by level. An image
    plays both roles in a pair (image 2 of one direction, image 1 of the other), so a pair needs
    two pyramids, not four (:func:`refine_pair`). ``noisy``: None, or a bool scalar choosing
    ``cfg.noise_presmooth`` over ``cfg.presmooth`` as the pre-blur (:func:`pair_pyramids`;
    only the pre-blur is switched, so the rest is compiled once)."""
    levels = [jnp.asarray(g, jnp.float32)]
    for _ in range(cfg.levels - 1):
        levels.append(_half(levels[-1]))
    return tuple(image_stack(a, cfg, noisy) for a in levels[::-1])


def image_stack(g: jax.Array, cfg: RefineConfig = RefineConfig(), noisy=None) -> jax.Array:
    """One level of :func:`image_pyramid`: ``[H, W, 3]`` (phi, d phi/dx, d phi/dy) of a grey
    ``[H, W]`` at its own resolution (the pre-blur and the normalisation window in its pixels)."""
    g = jnp.asarray(g, jnp.float32)
    if noisy is None:
        pre = geometry.gaussian_blur(g, cfg.presmooth)
    else:
        pre = jax.lax.cond(noisy, lambda x: geometry.gaussian_blur(x, cfg.noise_presmooth),
                           lambda x: geometry.gaussian_blur(x, cfg.presmooth), g)
    phi = _normalize(pre, cfg.local_sigma, cfg.epsilon)
    return jnp.concatenate([phi[..., None], image_gradients(phi)], axis=-1)


def pair_pyramids(g1: jax.Array, g2: jax.Array, cfg: RefineConfig = RefineConfig()):
    """The two grey images' :func:`image_pyramid` s with the pair's pre-blur: ``cfg.presmooth``,
    or ``cfg.noise_presmooth`` when either image's :func:`noise_ratio` (on the image halved to
    at most :data:`NOISE_SIZE` px) exceeds ``cfg.noise_ratio``. Returns (pyramid 1, pyramid 2,
    noisy: a bool scalar). Both images get the same pre-blur (their normalised intensities are
    compared); only the chosen pre-blur is computed (``lax.cond``). Images too small for one
    block (under ``NOISE_BLOCK + 2`` px a side) are not tested (never noisy)."""
    g1, g2 = jnp.asarray(g1, jnp.float32), jnp.asarray(g2, jnp.float32)
    a, b = g1, g2
    smallest = NOISE_BLOCK + 2  # noise_ratio's minimum
    while max(a.shape) > NOISE_SIZE and min(a.shape) >= 2 * smallest:
        a, b = _half(a), _half(b)
    if cfg.noise_presmooth is None or cfg.noise_presmooth == cfg.presmooth or min(a.shape) < smallest:
        # no test (off, or an image too small for 8x8 blocks)
        return image_pyramid(g1, cfg), image_pyramid(g2, cfg), jnp.asarray(False)
    noisy = jnp.maximum(noise_ratio(a), noise_ratio(b)) > cfg.noise_ratio
    return image_pyramid(g1, cfg, noisy), image_pyramid(g2, cfg, noisy), noisy


def _level_data(phi1, stack2, bu, bv, stride: int):
    """The arrays a level's iterations read, at every ``stride``-th pixel: phi1 there, the
    (phi2, grad phi2) stack, the pixels' coordinates ``[2, P]`` and the bases' u and v there
    ``[N, P]`` (given already sampled: :class:`BasisPyramid`)."""
    h, w = phi1.shape
    ys, xs = jnp.meshgrid(jnp.arange(0, h, stride, dtype=jnp.float32),
                          jnp.arange(0, w, stride, dtype=jnp.float32), indexing="ij")
    return (phi1[::stride, ::stride].reshape(-1), stack2, jnp.stack([xs.reshape(-1), ys.reshape(-1)]), bu, bv)


def _detail_bases(full, size_hw, stride: int):
    """The working-size bases ``full`` (:attr:`BasisPyramid.full`) at every ``stride``-th pixel
    of a detail grid ``size_hw`` = (H', W'): ``(u [N, Py, Px], v [N, Py, Px])``, interpolated bilinearly
    (half-pixel centres, border clamped, values scaled to the detail grid's pixels), exactly as
    the output flow is enlarged (:func:`camflow_jax.geometry_np.resize_flow`)."""
    H, W = size_hw
    h, w = full[0][0].shape[1:]

    def axis(size_d, scale, size):  # detail pixel -> its two working neighbours and the weight of the second
        t = np.clip((np.arange(0, size_d, stride, dtype=np.float64) + 0.5) * scale - 0.5, 0.0, size - 1.0)
        i0 = np.clip(np.floor(t).astype(np.int32), 0, size - 1)
        return i0, np.minimum(i0 + 1, size - 1), jnp.asarray(t - i0, jnp.float32)

    y0, y1, fy = axis(H, h / H, h)
    x0, x1, fx = axis(W, w / W, w)

    def at_samples(b):  # [N, h, w] -> [N, Py, Px], separably (rows, then columns); static indices
        r = b[:, y0] * (1.0 - fy)[None, :, None] + b[:, y1] * fy[None, :, None]
        return r[:, :, x0] * (1.0 - fx) + r[:, :, x1] * fx

    return (jnp.concatenate([at_samples(u) for u, _ in full]) * (W / w),
            jnp.concatenate([at_samples(v) for _, v in full]) * (H / h))


def _detail_data(stack1, stack2, bp, stride: int):
    """The level data (:func:`_level_data`) and grad phi(I_1) of a detail level: the images'
    stacks at a resolution above the working size's, sampled at every ``stride``-th pixel, and
    the bases there (:attr:`BasisPyramid.detail` when it holds them, else
    :func:`_detail_bases` of the working-size ones), so the level refines the flow the caller gets."""
    H, W = stack2.shape[:2]
    ys = jnp.arange(0, H, stride, dtype=jnp.float32)
    xs = jnp.arange(0, W, stride, dtype=jnp.float32)
    if bp.detail is None:
        bu, bv = _detail_bases(bp.full, (H, W), stride)
    else:
        bu, bv = bp.detail
        if bu.shape[1:] != (ys.shape[0], xs.shape[0]):
            raise ValueError(f"the basis pyramid's detail samples ({bu.shape[1]}x{bu.shape[2]} pixels) are "
                             f"not those of a {H}x{W} detail level at stride {stride} "
                             f"({ys.shape[0]}x{xs.shape[0]}): build them with with_detail(bases, ({H}, {W}), {stride})")
    bu, bv = bu.reshape(bu.shape[0], -1), bv.reshape(bv.shape[0], -1)
    gy, gx = jnp.meshgrid(ys, xs, indexing="ij")
    sub = stack1[::stride, ::stride]
    data = (sub[..., 0].reshape(-1), stack2, jnp.stack([gx.reshape(-1), gy.reshape(-1)]), bu, bv)
    return data, sub[..., 1:].reshape(-1, 2)


class BasisPyramid(NamedTuple):
    """A basis set prepared for :func:`refine_with_pyramids` (:func:`basis_pyramid`).

    full: groups of components ``(u [N_g, H, W], v [N_g, H, W])`` at the working size, in
      basis order (the set is their concatenation along N; kept apart so a group can be shared
      without a copy, e.g. the static bases of every pair of one size).
    levels: per pyramid level, coarsest first, ``(u [N, P_l], v [N, P_l])`` at that level's
      sampled pixels (every ``cfg.strides[l]``-th pixel of the bases halved level by level).
    detail: None, or ``(u [N, Py, Px], v [N, Py, Px])`` at the pixels of one detail level
      (:func:`with_detail`): built once and reused when many pairs share the bases and the
      detail size (the Predictor's static bases); None: built from ``full`` when needed."""

    full: tuple
    levels: tuple
    detail: tuple | None = None


def basis_pyramid(bases, cfg: RefineConfig = RefineConfig()) -> BasisPyramid:
    """The :class:`BasisPyramid` of bases ``[N, H, W, 2]`` or components ``(u, v)`` ``[N, H, W]``
    for ``cfg``'s levels and strides (one group). Join groups with :func:`join_basis_pyramids`."""
    if isinstance(bases, (tuple, list)):
        u, v = (jnp.asarray(b, jnp.float32) for b in bases)
    else:
        bases = jnp.asarray(bases, jnp.float32)
        u, v = bases[..., 0], bases[..., 1]
    levels = []
    halved = (u, v)
    for li in range(cfg.levels - 1, -1, -1):  # finest first: each level halves the previous
        k = cfg.strides[li]
        levels.append(tuple(x[:, ::k, ::k].reshape(x.shape[0], -1) for x in halved))
        if li:
            halved = tuple(_half(x) * 0.5 for x in halved)
    return BasisPyramid(full=((u, v),), levels=tuple(levels[::-1]))


def with_detail(bp: BasisPyramid, size_hw: tuple[int, int], stride: int) -> BasisPyramid:
    """``bp`` with its bases at the pixels of a detail level (:attr:`BasisPyramid.detail`): every
    ``stride``-th pixel (``cfg.detail_stride``) of the detail resolution ``size_hw`` = (H', W'),
    the working-size bases enlarged bilinearly there (:func:`refine_motion`'s ``detail``). Use
    it only with detail stacks of that size: a grid of another shape is refused, but one of the
    same sampled shape from a size a few pixels off is not detected."""
    return bp._replace(detail=_detail_bases(bp.full, tuple(int(x) for x in size_hw), int(stride)))


def join_basis_pyramids(*parts: BasisPyramid) -> BasisPyramid:
    """One basis set from several (bases in argument order); its detail samples are joined when
    every part has them (else None: built from the full bases when needed)."""
    levels = tuple((jnp.concatenate([p.levels[li][0] for p in parts]),
                    jnp.concatenate([p.levels[li][1] for p in parts])) for li in range(len(parts[0].levels)))
    detail = None
    if all(p.detail is not None for p in parts):
        detail = (jnp.concatenate([p.detail[0] for p in parts]), jnp.concatenate([p.detail[1] for p in parts]))
    return BasisPyramid(full=sum((tuple(p.full) for p in parts), ()), levels=levels, detail=detail)


def _robust_sigma(r, inside, cfg):
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
    return jnp.einsum("np,mp->nm", Jw, Jt) / p, Jw @ r / p


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
        # The normal equations only for an accepted step (a rejected one retries the same
        # system with more damping): rejected trials cost a residual, not a Jacobian.
        A, g = jax.lax.cond(ok, lambda: _normal_equations(data, pixels, grad1), lambda: (s["A"], s["g"]))
        # the largest flow change at the level's pixels
        change = jnp.maximum(jnp.max(jnp.abs(delta @ data[3])), jnp.max(jnp.abs(delta @ data[4])))
        new = {
            "w": jnp.where(ok, cand, s["w"]),
            "cost": jnp.where(ok, cost, s["cost"]),
            "A": A,
            "g": g,
            "lam": jnp.where(ok, jnp.maximum(s["lam"] / 3.0, 1e-7), s["lam"] * 4.0),
            "it": s["it"] + 1,
        }
        new["done"] = (ok & (change < cfg.tol)) | (new["lam"] > 1e6)
        return new

    state = {"w": coeffs0, "cost": cost0, "A": A0, "g": g0,
             "lam": jnp.asarray(cfg.damping, jnp.float32), "it": jnp.int32(0),
             "done": jnp.asarray(max_iters == 0)}
    state = jax.lax.while_loop(cond, body, state)
    return state["w"], state["cost"], state["it"]


# ----------------------------------------------------------------------------- public API
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
        :func:`camflow_jax.geometry_np.resize_flow` enlarges the flow). The flow, weights and
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


def detail_stacks(g1: jax.Array, g2: jax.Array, cfg: RefineConfig = RefineConfig(), noisy=None):
    """The :func:`image_stack` s of two grey images at the detail resolution, with the pair's
    pre-blur choice ``noisy`` (from :func:`pair_pyramids` at the working size)."""
    return image_stack(g1, cfg, noisy), image_stack(g2, cfg, noisy)


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
        data = _level_data(pyr1[li][..., 0], pyr2[li], u, v, k)
        grad1 = pyr1[li][::k, ::k, 1:].reshape(-1, 2) if cfg.esm else None
        levels.append((data, active_stages(cfg.active[li], groups), grad1))
    iterations = list(cfg.iterations)
    if detail is not None:
        s1, s2 = (jnp.asarray(x, jnp.float32) for x in detail)
        if s1.shape != s2.shape or s1.ndim != 3 or s1.shape[2] != 3 or s1.shape[0] < H or s1.shape[1] < W:
            raise ValueError(f"detail stacks must be two [H', W', 3] of one size at least the working "
                             f"size {H}x{W}, got {s1.shape} and {s2.shape}")
        data, grad1 = _detail_data(s1, s2, bp, cfg.detail_stride)
        levels.append((data, active_stages("all", groups), grad1 if cfg.esm else None))
        iterations.append(cfg.detail_iterations)
    num_levels = len(levels)
    full = _level_data(pyr1[-1][..., 0], pyr2[-1], None, None, 1)[:3]  # the finest level's every pixel

    def coarse_to_fine(coeffs, first=0, last=num_levels):
        its = []
        for li in range(first, last):
            data, stages, grad1 = levels[li]
            r0, _, in0 = residual(*data, coeffs)
            sigma = _robust_sigma(r0, in0, cfg)
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
                        pts = pts + jnp.stack([coeffs[fixed] @ u[fixed], coeffs[fixed] @ v[fixed]])
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
        scale = _robust_sigma(res[0][0], res[0][2], cfg)
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
        fu = fu + cands[:, lo:lo + m] @ gu.reshape(m, -1)
        fv = fv + cands[:, lo:lo + m] @ gv.reshape(m, -1)
        lo += m
    phi1_full, stack2_full, pts_full = full
    resid = [_residual_at(phi1_full, stack2_full, pts_full[0] + fu[i], pts_full[1] + fv[i], every_pixel=True)
             for i in range(cands.shape[0])]
    sigma = _robust_sigma(resid[0][0], resid[0][2], cfg)
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
