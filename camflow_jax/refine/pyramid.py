"""What the refinement compares: locally normalised grey images (:func:`gray`,
:func:`local_normalize`, :func:`noise_ratio`), their pyramids and detail stacks
(:func:`image_pyramid`, :func:`pair_pyramids`, :func:`detail_stacks`), and the bases resampled
per level (:class:`BasisPyramid`, :func:`basis_pyramid`, :func:`with_detail`). Pure ``jax.numpy``
with static shapes."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax.geometry import device
from camflow_jax.refine.config import NOISE_BLOCK, NOISE_SIZE, RefineConfig

__all__ = ['gray', 'local_normalize', 'noise_ratio', 'image_gradients', 'pyramid_sizes', 'downsample2',
           'resample_bases', 'image_pyramid', 'image_stack', 'pair_pyramids', 'detail_stacks', 'BasisPyramid',
           'basis_pyramid', 'with_detail', 'join_basis_pyramids']


def gray(image: jax.Array) -> jax.Array:
    """``[H, W]`` float32 grey (mean over channels) of ``[H, W]``, ``[H, W, 1]`` or ``[H, W, 3]``."""
    x = jnp.asarray(image, jnp.float32)
    return device.channel_mean(x)[..., 0] if x.ndim == 3 else x


def local_normalize(g: jax.Array, sigma: float = 4.0, epsilon: float = 2.0, presmooth: float = 1.0) -> jax.Array:
    """Locally normalised intensity ``(I - G*I) / sqrt(G*(I - G*I)^2 + eps^2)`` of a grey ``[H, W]``.

    A gain a and bias b (``a I + b``, a > 0) leave it unchanged up to the ``epsilon`` floor
    (relative to a); so do gain and bias fields that vary slowly across the ``sigma`` window.
    """
    return _normalize(device.gaussian_blur(jnp.asarray(g, jnp.float32), presmooth), sigma, epsilon)


def _normalize(g, sigma, epsilon):
    """:func:`local_normalize` of an image already pre-blurred."""
    d = g - device.gaussian_blur(g, sigma)
    return d / jnp.sqrt(device.gaussian_blur(d * d, sigma) + epsilon ** 2)


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
    out = device.resize_image(bases, h, w)
    return out * jnp.array([w / W, h / H], out.dtype)


def image_pyramid(g: jax.Array, cfg: RefineConfig = RefineConfig(), noisy=None) -> tuple[jax.Array, ...]:
    """The per-level description of one grey image ``[H, W]``: a tuple, coarsest level first,
    of ``[h, w, 3]`` stacks (phi, d phi/dx, d phi/dy) with phi the locally normalised intensity
    (:func:`local_normalize`) of the image halved (:func:`downsample2`) level by level. An image
    plays both roles in a pair (image 2 of one direction, image 1 of the other), so a pair needs
    two pyramids, not four (:func:`refine_pair`). ``noisy``: None, or a bool scalar choosing
    ``cfg.noise_presmooth`` over ``cfg.presmooth`` as the pre-blur (:func:`pair_pyramids`;
    only the pre-blur is switched, so the rest is compiled once; ignored when the config has
    no second pre-blur). An image whose coarsest level would be under 2 px on a side (nothing to
    take a gradient of) is a ValueError naming its size and the levels: the caller gives fewer
    (:meth:`RefineConfig.fit_to`, what the Predictor's refiner does)."""
    h, w = jnp.shape(g)[:2]
    ch, cw = pyramid_sizes(h, w, cfg.levels)[-1]
    if min(ch, cw) < 2:
        raise ValueError(f"refinement: a {w}x{h} image halved {cfg.levels - 1} times (RefineConfig levels="
                         f"{cfg.levels}) is {cw}x{ch} px at its coarsest level, under 2 px a side: give fewer levels "
                         f"(RefineConfig.fit_to({max(h, w)}) gives {cfg.fit_to(max(h, w)).levels})")
    levels = [jnp.asarray(g, jnp.float32)]
    for _ in range(cfg.levels - 1):
        levels.append(_half(levels[-1]))
    return tuple(image_stack(a, cfg, noisy) for a in levels[::-1])


def _one_preblur(cfg: RefineConfig) -> bool:
    """Whether ``cfg`` has a single pre-blur (no noise test): ``noise_presmooth`` off or equal to
    ``presmooth``."""
    return cfg.noise_presmooth is None or cfg.noise_presmooth == cfg.presmooth


def image_stack(g: jax.Array, cfg: RefineConfig = RefineConfig(), noisy=None) -> jax.Array:
    """One level of :func:`image_pyramid`: ``[H, W, 3]`` (phi, d phi/dx, d phi/dy) of a grey
    ``[H, W]`` at its own resolution (the pre-blur and the normalisation window in its pixels)."""
    g = jnp.asarray(g, jnp.float32)
    if noisy is None or _one_preblur(cfg):
        pre = device.gaussian_blur(g, cfg.presmooth)
    else:
        pre = jax.lax.cond(noisy, lambda x: device.gaussian_blur(x, cfg.noise_presmooth),
                           lambda x: device.gaussian_blur(x, cfg.presmooth), g)
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
    if _one_preblur(cfg) or min(a.shape) < smallest:
        # no test (off, or an image too small for 8x8 blocks)
        return image_pyramid(g1, cfg), image_pyramid(g2, cfg), jnp.asarray(False)
    noisy = jnp.maximum(noise_ratio(a), noise_ratio(b)) > cfg.noise_ratio
    return image_pyramid(g1, cfg, noisy), image_pyramid(g2, cfg, noisy), noisy


def level_data(phi1, stack2, bu, bv, stride: int):
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
    the output flow is enlarged (:func:`camflow_jax.geometry.host.resize_flow`)."""
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


def detail_data(stack1, stack2, bp, stride: int):
    """The level data (:func:`level_data`) and grad phi(I_1) of a detail level: the images'
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


# A result of the refinement's jitted pieces: jax.export must know how to serialize it
# (camflow_jax.compilation.exported keeps those pieces on disk).
try:
    jax.export.register_namedtuple_serialization(BasisPyramid, serialized_name="camflow_jax.refine.BasisPyramid")
except ValueError:  # registered already (the module was reloaded)
    pass


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


def detail_stacks(g1: jax.Array, g2: jax.Array, cfg: RefineConfig = RefineConfig(), noisy=None):
    """The :func:`image_stack` s of two grey images at the detail resolution, with the pair's
    pre-blur choice ``noisy`` (from :func:`pair_pyramids` at the working size)."""
    return image_stack(g1, cfg, noisy), image_stack(g2, cfg, noisy)
