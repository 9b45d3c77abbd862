"""Pixel grids, homographies, dense-flow warping and composition.

Conventions (docs/design.md, "Conventions"): channel-last arrays, flow ``[..., H, W, 2]``
holds (u, v) = (dx, dy) in pixels; x is the column, y the row, pixel centres at integers. A
homography maps image-1 pixel coordinates to image-2 pixel coordinates and its flow is
``H(p) - p``.

Every function is pure ``jax.numpy``: jit-, vmap- and grad-friendly. Functions documented as
taking "an optional leading batch dimension" accept both ``[H, W, C]`` and ``[B, H, W, C]``.
Every product here is float32 at :data:`HIGHEST` precision, on every backend.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax.geometry import checks
from camflow_jax.geometry.host import in_frame

__all__ = [
    "pixel_grid",
    "normalized_grid",
    "apply_homography",
    "homography_to_flow",
    "fit_homography",
    "fit_homography_strided",
    "homography_stride",
    "warp",
    "warp_validity",
    "in_frame",
    "sample_bilinear",
    "compose_flows",
    "resize_flow",
    "resize_bilinear_align_corners",
    "resize_image",
    "channel_mean",
    "gaussian_blur",
    "resize_intrinsics",
    "crop_intrinsics",
    "HIGHEST",
]

#: The precision of every dot in the geometry, the bases and the refinement: true float32 on
#: every backend. XLA's default runs float32 dots as TF32 on recent NVIDIA GPUs and as bfloat16
#: passes on TPUs (10 and 8 mantissa bits), which homography fits, normal equations and blurs
#: must not get; these products are small next to the network's. (The network's own precision
#: is its model config's policy: camflow_jax.models.precision.)
HIGHEST = jax.lax.Precision.HIGHEST


def pixel_grid(h: int, w: int, dtype=jnp.float32) -> jax.Array:
    """``[h, w, 2]`` grid whose entry (y, x) is the pixel coordinate (x, y)."""
    ys, xs = jnp.meshgrid(jnp.arange(h, dtype=dtype), jnp.arange(w, dtype=dtype), indexing="ij")
    return jnp.stack([xs, ys], axis=-1)


def normalized_grid(h: int, w: int, dtype=jnp.float32) -> jax.Array:
    """``[h, w, 2]`` grid in normalized coordinates x_n = 2x/(w-1) - 1, y_n = 2y/(h-1) - 1."""
    g = pixel_grid(h, w, dtype)
    scale = jnp.array([2.0 / max(w - 1, 1), 2.0 / max(h - 1, 1)], dtype)
    return g * scale - 1.0


def apply_homography(H: jax.Array, points: jax.Array) -> jax.Array:
    """Maps points ``[..., 2]`` by ``H`` ``[3, 3]`` (or batched ``[B, 3, 3]`` with points ``[B, ..., 2]``).

    p' = (H [x, y, 1]^T)_{1,2} / (H [x, y, 1]^T)_3.
    """
    H = jnp.asarray(H, points.dtype)
    ones = jnp.ones(points.shape[:-1] + (1,), points.dtype)
    ph = jnp.concatenate([points, ones], axis=-1)
    if H.ndim == 2:
        q = jnp.einsum("ij,...j->...i", H, ph, precision=HIGHEST)
    else:  # [B, 3, 3] against [B, ..., 3]
        q = jnp.einsum("bij,b...j->b...i", H, ph, precision=HIGHEST)
    return q[..., :2] / q[..., 2:3]


def homography_to_flow(H: jax.Array, h: int, w: int) -> jax.Array:
    """Dense flow ``H(p) - p`` on the ``h x w`` pixel grid; ``H`` is ``[3, 3]`` or ``[B, 3, 3]``."""
    grid = pixel_grid(h, w)
    H = jnp.asarray(H, jnp.float32)
    if H.ndim == 3:
        grid = jnp.broadcast_to(grid, (H.shape[0], h, w, 2))
    return apply_homography(H, grid) - grid


def _normalizer(h: int, w: int) -> jax.Array:
    """Similarity T taking pixel coords to normalized coords (centre 0, corners ±1)."""
    sx, sy = 2.0 / max(w - 1, 1), 2.0 / max(h - 1, 1)
    return jnp.array([[sx, 0.0, -1.0], [0.0, sy, -1.0], [0.0, 0.0, 1.0]], jnp.float32)


def _fit_homography_single(flow: jax.Array, weight: jax.Array) -> jax.Array:
    h, w = flow.shape[:2]
    T = _normalizer(h, w)
    p = pixel_grid(h, w).reshape(-1, 2)
    q = p + flow.reshape(-1, 2).astype(jnp.float32)
    wgt = weight.reshape(-1).astype(jnp.float32)
    # Non-finite flow must not poison the normal equations: drop those correspondences.
    finite = jnp.all(jnp.isfinite(q), axis=-1)
    wgt = jnp.where(finite, wgt, 0.0)
    q = jnp.where(finite[:, None], q, 0.0)
    # Both point sets in the same normalized frame (conditioning; Hartley-style).
    mm = functools.partial(jnp.matmul, precision=HIGHEST)
    pn = mm(p, T[:2, :2].T) + T[:2, 2]
    qn = mm(q, T[:2, :2].T) + T[:2, 2]
    x, y = pn[:, 0], pn[:, 1]
    xp, yp = qn[:, 0], qn[:, 1]
    zero, one = jnp.zeros_like(x), jnp.ones_like(x)
    # h9 = 1 parametrisation; camera-motion homographies never send the centre to infinity.
    rows_u = jnp.stack([x, y, one, zero, zero, zero, -x * xp, -y * xp], axis=-1)
    rows_v = jnp.stack([zero, zero, zero, x, y, one, -x * yp, -y * yp], axis=-1)
    A = jnp.concatenate([rows_u, rows_v], axis=0)
    b = jnp.concatenate([xp, yp], axis=0)
    ww = jnp.concatenate([wgt, wgt], axis=0)
    ata = mm((A * ww[:, None]).T, A)
    atb = mm((A * ww[:, None]).T, b)
    # Tiny ridge keeps the solve finite when the mask is (nearly) empty; it is 1e-9 of the
    # typical diagonal, so it does not bias well-posed fits.
    ata = ata + 1e-9 * jnp.trace(ata) / 8.0 * jnp.eye(8) + 1e-12 * jnp.eye(8)
    hvec = jnp.linalg.solve(ata, atb)
    Hn = jnp.concatenate([hvec, jnp.ones((1,), hvec.dtype)]).reshape(3, 3)
    H = mm(mm(jnp.linalg.inv(T), Hn), T)
    H = H / H[2, 2]
    # Usable: >= 4 weighted finite correspondences, a finite result and a non-singular affine
    # part. Otherwise the ridge's answer (every pixel sent to the image centre) is not a fit:
    # NaN says so instead of passing as one.
    valid = (jnp.sum(wgt > 0) >= 4) & jnp.all(jnp.isfinite(H)) & (jnp.abs(jnp.linalg.det(Hn[:2, :2])) > 1e-6)
    return jnp.where(valid, H, jnp.nan), valid


def fit_homography(flow: jax.Array, mask: jax.Array | None = None, *,
                   return_valid: bool = False):
    """Least-squares (algebraic DLT) homography explaining a dense flow.

    Args:
      flow: ``[H, W, 2]`` or ``[B, H, W, 2]``; correspondences p -> p + flow(p).
      mask: optional weights ``[H, W]`` / ``[H, W, 1]`` (or batched); 0 excludes a pixel.
        Non-finite flow values are always excluded.
      return_valid: also return a bool (``[B]`` when batched) saying whether the fit is usable.
    Returns:
      ``[3, 3]`` (or ``[B, 3, 3]``) with H[2, 2] = 1. Exact for a noise-free homography flow.
      When there is no usable data (fewer than 4 finite, non-zero-weight pixels) or the fit is
      singular, the matrix is all NaN (never a silent degenerate matrix); with
      ``return_valid`` the result is ``(H, valid)``. Works under ``jit`` (no exception).
    """
    flow = jnp.asarray(flow)
    if mask is None:
        mask = jnp.ones(flow.shape[:-1], jnp.float32)
    mask = jnp.asarray(mask, jnp.float32)
    if mask.ndim == flow.ndim:  # trailing channel of size 1
        mask = mask[..., 0]
    if flow.ndim == 4:
        H, valid = jax.vmap(_fit_homography_single)(flow, mask)
    else:
        H, valid = _fit_homography_single(flow, mask)
    return (H, valid) if return_valid else H


def fit_homography_strided(flow: jax.Array, stride: int) -> jax.Array:
    """:func:`fit_homography` of a flow ``[H, W, 2]`` fitted at every ``stride``-th pixel of each
    row and column: ``stride**2`` times less of the DLT's work, and exact for a homography flow.
    Pixel (s i, s j) is (i, j) of the subgrid, where the flow is s times shorter, so
    H = S H_sub S^-1 with S = diag(s, s, 1). All NaN when no homography can be fitted."""
    stride = int(stride)
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    if stride == 1:
        return fit_homography(flow)
    mm = functools.partial(jnp.matmul, precision=HIGHEST)
    Hs = fit_homography(flow[::stride, ::stride] / stride)
    S = jnp.diag(jnp.array([stride, stride, 1.0], jnp.float32))
    return mm(mm(S, Hs), jnp.diag(jnp.array([1.0 / stride, 1.0 / stride, 1.0], jnp.float32)))


def homography_stride(size_hw: tuple[int, int], grid_hw: tuple[int, int]) -> int:
    """The largest stride at which a flow of ``size_hw``, resized from a field of ``grid_hw``
    (the network's output), still has at least as many points as the field: the field's own
    density, at a fraction of the fit's cost on large inputs (a 360x480 flow of the 128x256
    network: stride 2, the fit 34 -> 5 ms on a 2-core CPU; 480x640: stride 3, 65 -> 8 ms)."""
    return max(1, math.isqrt((size_hw[0] * size_hw[1]) // (grid_hw[0] * grid_hw[1])))


def sample_bilinear(image: jax.Array, x: jax.Array, y: jax.Array, mode: str = "zero") -> jax.Array:
    """Bilinear samples of ``image`` ``[H, W, C]`` at pixel coordinates ``x``, ``y`` (same shape S).

    mode="zero": the reference semantics — a sample is exactly 0 unless
      0 <= x < W-1 and 0 <= y < H-1 (so the last row/column is 0 even at integer coords).
    mode="edge": coordinates are clamped to the image (border replication).
    Returns ``S + [C]``.
    """
    h, w = image.shape[:2]
    x = x.astype(jnp.float32)
    y = y.astype(jnp.float32)
    if mode == "edge":
        x = jnp.clip(x, 0.0, w - 1.0)
        y = jnp.clip(y, 0.0, h - 1.0)
    elif mode != "zero":
        raise ValueError(f"sample_bilinear: mode must be 'zero' or 'edge', got {mode!r}")
    x0 = jnp.floor(x)
    y0 = jnp.floor(y)
    fx = (x - x0)[..., None]
    fy = (y - y0)[..., None]
    x0i = jnp.clip(x0.astype(jnp.int32), 0, w - 1)
    y0i = jnp.clip(y0.astype(jnp.int32), 0, h - 1)
    x1i = jnp.clip(x0i + 1, 0, w - 1)
    y1i = jnp.clip(y0i + 1, 0, h - 1)
    flat = image.reshape(h * w, -1)

    def gather(yi, xi):
        return jnp.take(flat, (yi * w + xi).reshape(-1), axis=0).reshape(x.shape + (flat.shape[-1],))

    top = gather(y0i, x0i) * (1 - fx) + gather(y0i, x1i) * fx
    bot = gather(y1i, x0i) * (1 - fx) + gather(y1i, x1i) * fx
    out = top * (1 - fy) + bot * fy
    if mode == "zero":
        inside = in_frame(x, y, h, w)
        out = jnp.where(inside[..., None], out, jnp.zeros((), out.dtype))
    return out.astype(image.dtype)


def _array(fn: str, name: str, x, booleans: bool = False) -> jax.Array:
    """``x`` as a JAX array of real numbers (booleans too where ``booleans``), traced ones as they
    are: :func:`camflow_jax.geometry.checks.real_array`'s rule, a ValueError naming ``fn`` and
    the argument."""
    return jnp.asarray(checks.real_array(fn, name, x, booleans=booleans))


def _check_flow(fn: str, flow, name: str = "flow", any_batch: bool = False) -> jax.Array:
    """``flow`` as an array ``[H, W, 2]`` or ``[B, H, W, 2]`` (``any_batch``: ``[..., H, W, 2]``),
    or a ValueError naming ``fn``, the argument and its shape (static: checked when the call is
    traced)."""
    flow = _array(fn, name, flow)
    if not (flow.ndim >= 3 if any_batch else flow.ndim in (3, 4)) or flow.shape[-1] != 2:
        want = "[..., H, W, 2]" if any_batch else "[H, W, 2] or [B, H, W, 2]"
        raise ValueError(f"{fn}: {name} has shape {tuple(flow.shape)}; expected {want} ((u, v) per pixel)")
    return flow


def warp_validity(flow: jax.Array) -> jax.Array:
    """``[..., H, W, 1]`` float mask: 1 where ``warp`` samples inside the image, else 0."""
    flow = _check_flow("warp_validity", flow, any_batch=True)
    h, w = flow.shape[-3:-1]
    g = pixel_grid(h, w)
    inside = in_frame(g[..., 0] + flow[..., 0], g[..., 1] + flow[..., 1], h, w)
    return inside[..., None].astype(jnp.float32)


def _warp_single(image, flow, mode):
    h, w = flow.shape[:2]
    g = pixel_grid(h, w)
    return sample_bilinear(image, g[..., 0] + flow[..., 0], g[..., 1] + flow[..., 1], mode)


def warp(image: jax.Array, flow: jax.Array, mode: str = "zero") -> jax.Array:
    """Backward warp ``out(p) = image(p + flow(p))`` (bilinear).

    With the forward flow of a pair, ``warp(img2, flow_f) ≈ img1``. Accepts ``[H, W, C]`` (or a
    grey ``[H, W]``) with ``[H, W, 2]``, or batched ``[B, H, W, C]`` (``[B, H, W]``) with
    ``[B, H, W, 2]``; the result has the image's shape. Python lists are converted. ``mode`` as
    in :func:`sample_bilinear` ("zero" = reference semantics used by the network). Shapes that
    do not fit are a ValueError naming the argument, its shape and the expected one, raised
    when the call is traced (static shapes: free under ``jax.jit``).
    """
    flow = _check_flow("warp", flow)
    image = _array("warp", "image", image, booleans=True)
    lead, (h, w) = flow.shape[:-3], flow.shape[-3:-1]
    grey = image.ndim == flow.ndim - 1
    if image.ndim not in (flow.ndim, flow.ndim - 1) or image.shape[:-1 if not grey else None] != lead + (h, w):
        want = ", ".join(str(v) for v in lead + (h, w))
        raise ValueError(f"warp: image has shape {tuple(image.shape)} but flow has shape {tuple(flow.shape)}; "
                         f"expected image ({want}, C) or ({want}): image and flow sizes must match")
    img = image[..., None] if grey else image
    if flow.ndim == 4:
        out = jax.vmap(lambda i, f: _warp_single(i, f, mode))(img, flow)
    else:
        out = _warp_single(img, flow, mode)
    return out[..., 0] if grey else out


def compose_flows(f12: jax.Array, f23: jax.Array) -> jax.Array:
    """Exact composition f13(x) = f12(x) + f23(x + f12(x)).

    f23 is read bilinearly with border replication where x + f12(x) leaves the image (there
    the composition is an extrapolation). Batched inputs ``[B, H, W, 2]`` are supported; the
    two flows must have one shape (a ValueError naming both otherwise).
    """
    f12, f23 = _check_flow("compose_flows", f12, "f12"), _check_flow("compose_flows", f23, "f23")
    if f12.shape != f23.shape:
        raise ValueError(f"compose_flows: f12 has shape {tuple(f12.shape)} but f23 has shape {tuple(f23.shape)}; "
                         "expected one shape (flows on the same grid)")
    return f12 + warp(f23, f12, mode="edge")


def _two_tap(x: jax.Array, y0, y1, fy, x0, x1, fx) -> jax.Array:
    """Bilinear interpolation of ``[..., H, W, C]`` at separable taps: output row i reads input
    rows ``y0[i]``, ``y1[i]`` with weights ``1 - fy[i]``, ``fy[i]`` (likewise for columns). Four
    row and column gathers, no matrix product: memory-bound, a few hundred microseconds for a
    video frame on one CPU core."""
    fy = jnp.asarray(fy)[:, None, None].astype(x.dtype)
    fx = jnp.asarray(fx)[None, :, None].astype(x.dtype)
    rows0 = jnp.take(x, y0, axis=-3)
    rows1 = jnp.take(x, y1, axis=-3)
    top = jnp.take(rows0, x0, axis=-2) * (1 - fx) + jnp.take(rows0, x1, axis=-2) * fx
    bot = jnp.take(rows1, x0, axis=-2) * (1 - fx) + jnp.take(rows1, x1, axis=-2) * fx
    return top * (1 - fy) + bot * fy


def resize_bilinear_align_corners(x: jax.Array, h: int, w: int) -> jax.Array:
    """Align-corners bilinear resize of ``[..., H, W, C]`` (PyTorch ``align_corners=True``)."""
    hi, wi = x.shape[-3], x.shape[-2]
    ys = jnp.linspace(0.0, hi - 1.0, h) if h > 1 else jnp.zeros((1,))
    xs = jnp.linspace(0.0, wi - 1.0, w) if w > 1 else jnp.zeros((1,))
    y0 = jnp.clip(jnp.floor(ys).astype(jnp.int32), 0, max(hi - 2, 0))
    x0 = jnp.clip(jnp.floor(xs).astype(jnp.int32), 0, max(wi - 2, 0))
    return _two_tap(x, y0, jnp.minimum(y0 + 1, hi - 1), ys - y0, x0, jnp.minimum(x0 + 1, wi - 1), xs - x0)


def resize_flow(flow: jax.Array, h: int, w: int) -> jax.Array:
    """Resizes a flow ``[..., H, W, 2]`` to ``h x w`` (align-corners bilinear) and rescales it:
    u by w/W and v by h/H, so the flow stays in pixels of the new grid."""
    hi, wi = flow.shape[-3], flow.shape[-2]
    out = resize_bilinear_align_corners(flow, h, w)
    return out * jnp.array([w / wi, h / hi], out.dtype)


@functools.lru_cache(maxsize=64)
def _half_pixel_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i0, i1, f) of a half-pixel-centre linear resize of an axis from ``n_in`` to ``n_out``
    samples: output i sits at ``(i + 0.5) n_in / n_out - 0.5``, clamped to ``[0, n_in - 1]``
    (the edge pixel's value beyond the outer centres), between inputs i0 and i1 = i0 + 1 at
    fraction f (computed in float64)."""
    src = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0.0, n_in - 1.0)
    i0 = np.minimum(np.floor(src).astype(np.int32), max(n_in - 2, 0))
    return i0, np.minimum(i0 + 1, n_in - 1), (src - i0).astype(np.float32)


def resize_image(image: jax.Array, h: int, w: int) -> jax.Array:
    """Bilinear resize ``[..., H, W, C]`` with half-pixel centres and no antialiasing
    (PyTorch ``F.interpolate(mode='bilinear', align_corners=False)``, OpenCV's
    ``INTER_LINEAR``). Two taps per axis, gathered (:func:`_two_tap`): ``jax.image.resize``
    computes the same as dense weight-matrix products, 8-50x slower on a CPU (a 1080x1920 frame
    shrunk to 128x256: 15.7 against 0.31 ms; docs/performance.md, "Preprocessing, and the constant depth")."""
    H, W = image.shape[-3], image.shape[-2]
    if (H, W) == (int(h), int(w)):
        return image
    return _two_tap(image, *_half_pixel_taps(H, int(h)), *_half_pixel_taps(W, int(w)))


def channel_mean(x: jax.Array) -> jax.Array:
    """The mean over the last axis of ``[..., C]``, kept as an axis of 1: the channels added one
    after the other, then divided by C (the order ``jnp.mean`` adds them: the same values).
    XLA:CPU reduces a short minor axis element by element; for a 360x480 RGB pair ``jnp.mean``
    took 10.5 ms, the chained adds 0.14 ms (docs/performance.md, "Preprocessing, and the constant depth")."""
    c = x.shape[-1]
    total = x[..., 0:1]
    for i in range(1, c):
        total = total + x[..., i:i + 1]
    return total / jnp.asarray(c, x.dtype)


def _gaussian_taps(sigma: float) -> np.ndarray:
    """The 1-D Gaussian's taps ``[2 r + 1]``, radius r = ceil(3 sigma), summing to 1 (float64)."""
    radius = int(np.ceil(3.0 * sigma))
    t = np.arange(-radius, radius + 1)
    k = np.exp(-0.5 * (t / sigma) ** 2)
    return k / k.sum()


@functools.lru_cache(maxsize=64)
def _gaussian_matrix(n: int, sigma: float) -> np.ndarray:
    """``[n, n]`` matrix of a 1-D Gaussian blur (radius ceil(3 sigma)) with edge replication."""
    k = _gaussian_taps(sigma)
    radius = k.size // 2
    m = np.zeros((n, n), np.float64)
    rows = np.repeat(np.arange(n), k.size)
    cols = np.clip(np.arange(n)[:, None] + np.arange(-radius, radius + 1)[None, :], 0, n - 1).reshape(-1)
    np.add.at(m, (rows, cols), np.tile(k, n))
    m = m.astype(np.float32)
    m.flags.writeable = False
    return m


# Along an axis of n pixels, the blur is a matrix product when n <= GAUSSIAN_MATRIX_TAPS x the
# number of taps (n^2 per line, but one dot), else a sum of 2 r + 1 shifted copies (memory-bound,
# independent of n). Measured on a 2-core CPU (docs/refinement.md, "Cost", fifth round): the
# matrix product wins up to ~80 pixels at sigma 4 (25 taps) and the shifted sums beyond ~150; at
# 576 pixels the shifted sums take a third of the product's time.
GAUSSIAN_MATRIX_TAPS = 4


def _blur_axis(x: jax.Array, sigma: float, axis: int) -> jax.Array:
    """The 1-D blur of :func:`gaussian_blur` along ``axis``, one of the last two of ``x``."""
    if axis not in (x.ndim - 2, x.ndim - 1):
        raise ValueError(f"_blur_axis blurs one of the last two axes, got axis {axis} of {x.ndim}")
    k = _gaussian_taps(sigma).astype(np.float32)
    n, r = x.shape[axis], k.size // 2
    if n <= GAUSSIAN_MATRIX_TAPS * k.size:
        m = _gaussian_matrix(n, sigma)
        return jnp.matmul(m, x, precision=HIGHEST) if axis == x.ndim - 2 else jnp.matmul(x, m.T, precision=HIGHEST)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (r, r)
    xp = jnp.pad(x, pad, mode="edge")
    return sum(float(k[i]) * jax.lax.slice_in_dim(xp, i, i + n, axis=axis) for i in range(k.size))


def gaussian_blur(image: jax.Array, sigma: float) -> jax.Array:
    """Separable Gaussian blur of ``[..., H, W]`` (radius ceil(3 sigma), edge replication:
    OpenCV's ``GaussianBlur`` with ``BORDER_REPLICATE`` and that radius; ``sigma`` static, in
    pixels; 0 returns the input). Along each axis either a matrix product (short axes) or a sum
    of shifted copies (long ones): on CPU both are far faster than a one-channel convolution."""
    sigma = float(sigma)
    if sigma <= 0:
        return image
    return _blur_axis(_blur_axis(image, sigma, image.ndim - 2), sigma, image.ndim - 1)


def resize_intrinsics(K, old_hw: tuple[int, int], new_hw: tuple[int, int]):
    """Intrinsics (fx, fy, cx, cy) of an image resized from ``old_hw`` to ``new_hw``.

    Matches :func:`resize_image` (half-pixel centres): x_new = (x_old + 0.5) * s - 0.5, so
    fx' = s_x fx and cx' = (cx + 0.5) s_x - 0.5 (likewise for y). ``K`` is ``[..., 4]``.
    """
    K = jnp.asarray(K, jnp.float32)
    sy, sx = new_hw[0] / old_hw[0], new_hw[1] / old_hw[1]
    fx, fy, cx, cy = K[..., 0], K[..., 1], K[..., 2], K[..., 3]
    return jnp.stack([fx * sx, fy * sy, (cx + 0.5) * sx - 0.5, (cy + 0.5) * sy - 0.5], axis=-1)


def crop_intrinsics(K, top: int, left: int):
    """Intrinsics after cropping an image at offset (top, left): the principal point shifts."""
    K = jnp.asarray(K, jnp.float32)
    zero = jnp.zeros((), jnp.float32)
    return K - jnp.stack([zero, zero, jnp.asarray(left, jnp.float32), jnp.asarray(top, jnp.float32)])
