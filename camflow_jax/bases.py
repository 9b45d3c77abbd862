"""Motion bases of CamFlow / CamFlow+ (docs/design.md, "Motion bases"; paper §3.1).

A basis is a pixel-displacement field ``[h, w, 2]`` (u, v) on the network grid; a basis set is
``[N, h, w, 2]``; a motion is a linear combination ``m = sum_k w_k b_k`` (:func:`combine`).

Families, in the order :func:`hybrid_bases` stacks them:

* **homography** (12): second-order Taylor expansion of a homography's flow around the image
  centre in normalized coordinates (x, y in [-1, 1]). With b = [1, x, y, xy, x^2, y^2] the fields
  are (b_i, 0) and (0, b_i). They are Gram-Schmidt orthogonalized in that order, scaled to
  max |value| = 1 px, and signed so that each correlates positively with its monomial.
  :func:`homography_bases_first_order` gives the 8-field BasesHomo set (translation, affine,
  (x^2, xy), (xy, y^2)) for the 8-vs-12 ablation.
* **stochastic** (n): flows of random homographies H (h1..h8 ~ N(0, 1), h9 = 1, normalized
  coordinates), reduced by SVD to their top-n left singular vectors. See
  :func:`stochastic_bases` for our documented departures (rejection of unbounded draws,
  projection off the homography span).
* **depth-translational** (3 per depth level): for depth D and intrinsics K = (fx, fy, cx, cy),
  f^x = (fx / D, 0), f^y = (0, fy / D), f^z = -((u - cx) / D, (v - cy) / D): the flows of small
  lateral, vertical and forward camera translations. Computed on a Gaussian depth pyramid
  D_s = G_{sigma_s} * D_0.

Everything here is pure: homography and depth bases are ``jax.numpy`` (jit/vmap-friendly with
static sizes); stochastic bases are float64 numpy from a seeded ``numpy`` Generator so the same
seed regenerates the same set on any machine.
"""

from __future__ import annotations

import functools
import numbers
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax.geometry import checks, device

__all__ = [
    "homography_bases",
    "depth_translational_components",
    "homography_bases_first_order",
    "stochastic_bases",
    "default_depth_sigmas",
    "check_depth_sigmas",
    "depth_translational_bases",
    "static_bases",
    "hybrid_bases",
    "combine",
    "least_squares_coeffs",
    "quantile_nonneg",
]


def _is_whole(v) -> bool:
    """A Python or numpy integer (not a bool, not a float even when integral)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _check_size(fn: str, h, w) -> tuple[int, int]:
    """``(h, w)`` as ints: whole numbers >= 2 (a grid of one row or column has no extent to
    normalise); Python and numpy integers are accepted, floats (even ``8.0``), bools and
    strings are not. Anything else is a ValueError naming ``fn`` and the values."""
    ok = all(_is_whole(v) and v >= 2 for v in (h, w))
    if not ok:
        raise ValueError(f"{fn}: h and w must be whole numbers >= 2, got h={h!r}, w={w!r}")
    return int(h), int(w)


def _check_intrinsics(fn: str, K) -> None:
    """ValueError unless concrete intrinsics ``K`` pass the package's one rule
    (:func:`camflow_jax.geometry.checks.intrinsics_problem`: 4 finite numbers, fx, fy > 0); traced
    ones, under jit or vmap, are the caller's to check."""
    try:
        k = np.asarray(K, np.float64)
    except jax.errors.TracerArrayConversionError:
        return
    why = checks.intrinsics_problem(k)
    if why:
        raise ValueError(f"{fn}: K must be 4 finite numbers (fx, fy, cx, cy) with fx, fy > 0 ({why})")


def _orthonormalize_and_scale(fields: jax.Array, reference: jax.Array) -> jax.Array:
    """QR (Gram-Schmidt in the given order) of ``[N, h, w, 2]`` fields, then max|.| = 1 each.

    ``reference`` (same shape) fixes the sign: each output correlates positively with it.
    """
    n = fields.shape[0]
    flat = fields.reshape(n, -1).astype(jnp.float32)
    q, _ = jnp.linalg.qr(flat.T)  # columns span the same nested subspaces as Gram-Schmidt
    q = q.T
    sign = jnp.sign(jnp.sum(q * reference.reshape(n, -1), axis=1))
    q = q * jnp.where(sign == 0, 1.0, sign)[:, None]
    q = q / jnp.max(jnp.abs(q), axis=1, keepdims=True)
    return q.reshape(fields.shape)


def _monomial_fields(h: int, w: int, monomials_u, monomials_v) -> jax.Array:
    g = device.normalized_grid(h, w)
    x, y = g[..., 0], g[..., 1]
    terms = {"1": jnp.ones_like(x), "x": x, "y": y, "xy": x * y, "xx": x * x, "yy": y * y}
    zero = jnp.zeros_like(x)
    fields = []
    for mu, mv in zip(monomials_u, monomials_v):
        u = terms[mu] if mu else zero
        v = terms[mv] if mv else zero
        fields.append(jnp.stack([u, v], axis=-1))
    return jnp.stack(fields)


@functools.partial(jax.jit, static_argnums=(0, 1))
def homography_bases(h: int, w: int) -> jax.Array:
    """The 12 second-order homography bases ``[12, h, w, 2]`` (orthogonal, max |value| = 1).

    Order: (1,0) (x,0) (y,0) (xy,0) (x^2,0) (y^2,0) then the same six monomials in v.
    ``h``, ``w``: whole numbers >= 2 (Python or numpy integers; floats, bools and smaller sizes
    are a ValueError naming the function and the values).
    """
    h, w = _check_size("homography_bases", h, w)
    mono = ["1", "x", "y", "xy", "xx", "yy"]
    fields = _monomial_fields(h, w, mono + [None] * 6, [None] * 6 + mono)
    return _orthonormalize_and_scale(fields, fields)


@functools.partial(jax.jit, static_argnums=(0, 1))
def homography_bases_first_order(h: int, w: int) -> jax.Array:
    """The 8 BasesHomo-style bases ``[8, h, w, 2]``: translations, the 4 affine fields and the
    two projective fields (x^2, xy), (xy, y^2) (first-order perspective terms)."""
    h, w = _check_size("homography_bases_first_order", h, w)
    g = device.normalized_grid(h, w)
    x, y = g[..., 0], g[..., 1]
    one, zero = jnp.ones_like(x), jnp.zeros_like(x)
    comps = [(one, zero), (zero, one), (x, zero), (y, zero), (zero, x), (zero, y),
             (x * x, x * y), (x * y, y * y)]
    fields = jnp.stack([jnp.stack(c, axis=-1) for c in comps])
    return _orthonormalize_and_scale(fields, fields)


def _random_homography_flows(rng: np.random.Generator, count: int, xs: np.ndarray, ys: np.ndarray,
                             min_denominator: float) -> np.ndarray:
    """``count`` flows (flattened u then v, float64) of N(0,1) homographies in normalized coords."""
    out = []
    corners = np.array([[-1, -1], [1, -1], [-1, 1], [1, 1]], np.float64)
    while len(out) < count:
        hv = rng.standard_normal(8)
        # The denominator h7 x + h8 y + 1 is affine, so its extremes on the image are at corners.
        den_c = corners @ hv[6:8] + 1.0
        if min_denominator > 0 and den_c.min() < min_denominator:
            continue  # unbounded (or sign-flipping) flow on the image: reject
        den = hv[6] * xs + hv[7] * ys + 1.0
        u = (hv[0] * xs + hv[1] * ys + hv[2]) / den - xs
        v = (hv[3] * xs + hv[4] * ys + hv[5]) / den - ys
        out.append(np.concatenate([u.ravel(), v.ravel()]))
    return np.stack(out, axis=1)  # [2hw, count]


@functools.lru_cache(maxsize=8)
def _stochastic_bases_cached(h, w, n, seed, draws_per_basis, orthogonal_to_homography,
                             min_denominator):
    rng = np.random.default_rng(seed)
    xs = np.linspace(-1.0, 1.0, w)[None, :].repeat(h, 0)
    ys = np.linspace(-1.0, 1.0, h)[:, None].repeat(w, 1)
    A = _random_homography_flows(rng, n * draws_per_basis, xs, ys, min_denominator)
    # Each draw gets unit energy so a few extreme homographies cannot dominate the SVD.
    A /= np.linalg.norm(A, axis=0, keepdims=True)
    if orthogonal_to_homography:
        Q = np.asarray(homography_bases(h, w), np.float64).reshape(12, h * w, 2)
        Q = Q.transpose(0, 2, 1).reshape(12, -1).T  # [2hw, 12], u plane then v plane
        Q, _ = np.linalg.qr(Q)
        A -= Q @ (Q.T @ A)
    # Top-n left singular vectors via the small Gram matrix (A is tall: 2hw x n*draws).
    evals, V = np.linalg.eigh(A.T @ A)
    order = np.argsort(evals)[::-1][:n]
    U = A @ V[:, order] / np.sqrt(np.maximum(evals[order], 1e-300))
    U = U.T.reshape(n, 2, h, w).transpose(0, 2, 3, 1)  # [n, h, w, 2]
    flat = U.reshape(n, -1)
    # Deterministic sign: the strongest value of each basis is positive.
    idx = np.argmax(np.abs(flat), axis=1)
    flat = flat * np.sign(flat[np.arange(n), idx])[:, None]
    flat = flat / np.max(np.abs(flat), axis=1, keepdims=True)
    return flat.reshape(n, h, w, 2).astype(np.float32)


def stochastic_bases(h: int, w: int, n: int = 12, seed: int = 0, *, draws_per_basis: int = 20,
                     orthogonal_to_homography: bool = True, min_denominator: float = 0.2) -> np.ndarray:
    """Stochastic bases ``[n, h, w, 2]`` (float32 numpy; same arguments -> identical arrays).

    Recipe (paper §3.1.3): draw ``n * draws_per_basis`` random homographies with h1..h8 ~ N(0, 1)
    and h9 = 1 in normalized coordinates, rasterize their flows, take the top-n left singular
    vectors, scale each to max |value| = 1 with the strongest value positive.

    Our documented choices:
      * ``min_denominator``: draws whose denominator h7 x + h8 y + 1 falls below this anywhere
        on the image are rejected (their flow is unbounded or folds); 0 disables it.
      * each draw's flow is scaled to unit L2 norm before the SVD;
      * ``orthogonal_to_homography`` (default True): the draws are projected onto the orthogonal
        complement of the 12 homography bases first, so the stochastic set adds new directions
        instead of re-spanning the physical ones. ``False`` (with ``min_denominator=0``)
        reproduces the raw paper recipe.

    ``h``, ``w`` (>= 2), ``n``, ``draws_per_basis`` (>= 1) and ``seed`` must be whole numbers
    (Python or numpy integers): floats, even integral ones like ``2.0``, and bools are a
    ValueError, never truncated.
    """
    h, w = _check_size("stochastic_bases", h, w)
    counts = (n, draws_per_basis, seed)
    if not all(_is_whole(v) for v in counts) or n < 1 \
            or draws_per_basis < 1:
        raise ValueError(f"stochastic_bases: need whole numbers n >= 1, draws_per_basis >= 1 and seed, got "
                         f"n={n!r}, draws_per_basis={draws_per_basis!r}, seed={seed!r}")
    return _stochastic_bases_cached(int(h), int(w), int(n), int(seed), int(draws_per_basis),
                                    bool(orthogonal_to_homography), float(min_denominator)).copy()


def default_depth_sigmas(width: int) -> tuple[float, ...]:
    """Depth-pyramid blur sigmas (pixels): (0, 2, 8, 32) at 576 px wide, scaled with the width
    (a number > 0; anything else is a ValueError)."""
    if isinstance(width, bool) or not isinstance(width, numbers.Real) or not (0 < float(width) < float("inf")):
        raise ValueError(f"default_depth_sigmas: width must be a number of pixels > 0, got {width!r}")
    s = width / 576.0
    return (0.0, 2.0 * s, 8.0 * s, 32.0 * s)


#: A depth blur may be at most this many times the depth map's longer side: wider, the blurred
#: depth is constant to a few percent, and its taps (radius 3 sigma) only cost memory.
MAX_SIGMA_RATIO = 4.0


def check_depth_sigmas(sigmas, name: str = "sigmas", longest: int | None = None) -> tuple[float, ...]:
    """``sigmas`` as a tuple of floats: a non-empty sequence of the depth pyramid's blurs in
    pixels, each a finite number >= 0 (0: no blur), and, given ``longest`` (the depth map's longer
    side), at most :data:`MAX_SIGMA_RATIO` times it. Anything else (a single number, a string,
    NaN, a negative blur, ``True``) is a ValueError naming ``name`` and the value; the values are
    static Python numbers, so the check is free under ``jax.jit``."""
    if isinstance(sigmas, (str, bytes)) or not hasattr(sigmas, "__len__") or np.ndim(sigmas) != 1 or not len(sigmas):
        raise ValueError(f"{name} must be a non-empty sequence of blurs in pixels (numbers >= 0, e.g. (0, 2, 8, 32)), "
                         f"got {sigmas!r}")
    out = []
    for i, v in enumerate(sigmas):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) or not (0 <= float(v) < float("inf")):
            raise ValueError(f"{name}[{i}] must be a finite number of pixels >= 0 (0: no blur), got {v!r} "
                             f"(in {tuple(sigmas)!r})")
        if longest is not None and float(v) > MAX_SIGMA_RATIO * longest:
            raise ValueError(f"{name}[{i}] = {float(v):g} px is more than {MAX_SIGMA_RATIO:g}x the depth map's longer "
                             f"side ({longest} px): a blur that wide leaves a constant depth")
        out.append(float(v))
    return tuple(out)


def _kth_smallest_nonneg(x: jax.Array, k: jax.Array, valid: jax.Array) -> jax.Array:
    """Exact k-th smallest (0-based) of the valid entries of a non-negative 1-D array.

    Bisection on the float32 bit pattern (monotonic for x >= 0): 31 counting passes instead of
    a sort, which XLA's CPU backend runs slowly; ``k`` may be traced (e.g. from a valid count).
    """
    bits = jax.lax.bitcast_convert_type(jnp.where(valid, x, 0.0).astype(jnp.float32), jnp.int32)

    def body(_, lo_hi):
        lo, hi = lo_hi  # invariant: count(bits <= hi) > k, count(bits <= lo - 1) <= k
        mid = lo + (hi - lo) // 2
        enough = jnp.sum(valid & (bits <= mid)) > k
        return jnp.where(enough, lo, mid + 1), jnp.where(enough, mid, hi)

    _, hi = jax.lax.fori_loop(0, 31, body, (jnp.int32(0), jnp.int32(0x7F800000)))
    return jax.lax.bitcast_convert_type(hi, jnp.float32)


def quantile_nonneg(x: jax.Array, q: float, valid: jax.Array | None = None) -> jax.Array:
    """``np.quantile(x[valid], q)`` (linear interpolation) of non-negative values, without a sort."""
    x = jnp.ravel(x).astype(jnp.float32)
    if valid is None and x.size > 1:
        # Every entry counts, so the order statistics' ranks are static: near either end
        # (e.g. the 99th percentile) a partial sort of the few largest (or smallest) entries is
        # exact and cheaper than the counting passes (2.6x at 46k entries on a 2-core CPU).
        size = x.size
        pos = np.float32(q) * np.float32(size - 1)  # float32, as the general path below
        i = int(np.floor(pos))  # static
        if size - i <= size // 16:  # ranks i, i + 1 among the largest size - i
            top = jax.lax.top_k(x, size - i)[0]  # descending: top[j] is rank size - 1 - j
            # The barrier keeps XLA's CPU backend from rewriting top_k + indexing into a full
            # sort (30x slower at 46k entries).
            top = jax.lax.optimization_barrier(top)
            lo, hi = top[size - 1 - i], top[max(size - 2 - i, 0)]
            return lo + (pos - np.float32(i)) * (hi - lo)
    valid = jnp.ones(x.shape, bool) if valid is None else jnp.ravel(valid)
    n = jnp.sum(valid)
    pos = q * (jnp.maximum(n, 1) - 1).astype(jnp.float32)
    i = jnp.floor(pos).astype(jnp.int32)
    lo = _kth_smallest_nonneg(x, i, valid)
    # The next order statistic: lo again if it is repeated, else the smallest valid value above it.
    above = jnp.min(jnp.where(valid & (x > lo), x, jnp.inf))
    hi = jnp.where((jnp.sum(valid & (x <= lo)) > i + 1) | ~jnp.isfinite(above), lo, above)
    return lo + (pos - i) * (hi - lo)


#: Depth relative to its median is clamped above here (1/D stays a normal float32).
_MAX_DEPTH_RATIO = 1e30


def _clean_depth(depth: jax.Array, min_depth_ratio: float) -> jax.Array:
    """Depth relative to the median of the valid depth: non-finite / non-positive depth
    becomes 1 (the median), and the ratio is clamped to ``[min_depth_ratio, 1e30]`` (so near
    outliers cannot explode 1/D). The bases are scale-free (each is normalized by a percentile),
    so dividing by the median changes nothing but keeps 1/D representable for depth in any
    unit: at 1e38 the raw 1/D underflows float32 and the bases silently became zero."""
    valid = jnp.isfinite(depth) & (depth > 0)
    med = quantile_nonneg(depth, 0.5, valid)
    med = jnp.where(jnp.any(valid) & (med > 0), med, 1.0)  # no valid depth at all: constant depth
    # Two multiplications by 1/sqrt(med): 1/med itself is subnormal (flushed to 0 by XLA) for
    # med > ~1e38, and XLA rewrites chained divisions into one.
    inv_sqrt = 1.0 / jnp.sqrt(med)
    d = jnp.where(valid, (depth * inv_sqrt) * inv_sqrt, 1.0)
    return jnp.clip(d, min_depth_ratio, _MAX_DEPTH_RATIO)


def _check_depth_dtype(fn: str, depth) -> None:
    """ValueError in our words unless ``depth`` holds real numbers (static: free under jit)."""
    kind = np.dtype(depth.dtype).kind
    if kind not in "iuf" and str(depth.dtype) != "bfloat16":
        what = {"b": "a boolean array (a mask, not depth)", "c": "a complex array",
                "O": "an array of Python objects", "U": "an array of strings", "S": "an array of strings"
                }.get(kind, f"an array of {depth.dtype}")
        raise ValueError(f"{fn}: depth is {what}: depth must be an [H, W] map of real numbers (one per pixel)")


def _depth_map(fn: str, depth):
    """``depth`` as a float32 ``[H, W]`` array (JAX, traced or not), or a ValueError in our words
    naming ``fn``: ragged lists, strings, Python objects, booleans (a mask), complex numbers,
    another rank, an empty map. Static properties only (dtype, shape): free under ``jax.jit``."""
    depth = checks.as_array(fn, "depth", depth)
    _check_depth_dtype(fn, depth)
    if depth.ndim != 2 or 0 in depth.shape:
        raise ValueError(f"{fn}: depth has shape {tuple(depth.shape)}; expected [H, W] (one depth per pixel; "
                         "several maps: jax.vmap, or hybrid_bases with [B, H, W])")
    return jnp.asarray(depth, jnp.float32)


def depth_translational_bases(depth, K, sigmas: Sequence[float] | None = None, *,
                              min_depth_ratio: float = 0.05, percentile: float = 99.0) -> jax.Array:
    """Depth-translational bases ``[3 * len(sigmas), H, W, 2]`` (paper §3.1.2).

    For every pyramid level s (depth D_s = G_{sigma_s} * D_0, sigma 0 = no blur):
      f^x = (fx / D_s, 0),  f^y = (0, fy / D_s),  f^z = -((u - cx) / D_s, (v - cy) / D_s),
    in that order, with pixel coords (u, v) of the depth map's grid and K = (fx, fy, cx, cy) in
    that grid's pixels (see :func:`camflow_jax.geometry.device.resize_intrinsics`). Sign and global
    scale are left to the learned weights; each basis is scaled so that the ``percentile``-th
    percentile of its magnitude is 1 px (robust to a few very near pixels).

    Invalid depth (NaN, inf, <= 0) is replaced by the median valid depth and depth is clamped
    below at ``min_depth_ratio`` x median, so the output is always finite; a map with no valid
    pixel at all is a constant depth. Depth is divided by its median first, so any global scale
    (1e-30 .. 1e38) gives the same bases. With constant depth the bases are a translation and a
    radial (affine) field: inside the homography span.

    A depth that is not an ``[H, W]`` map of real numbers (a boolean mask, complex numbers,
    ragged lists, another rank), ``K`` that is not 4 finite numbers with fx, fy > 0 (checked
    where it is not traced) and ``sigmas`` that are not blurs (:func:`check_depth_sigmas`) are a
    ValueError naming the argument.

    Args:
      depth: ``[H, W]`` depth of the image the bases are for (any global scale).
      K: ``[4]`` intrinsics. sigmas: blur per level in pixels (default
        :func:`default_depth_sigmas`). Batched use: ``jax.vmap`` over depth and K.
    """
    u, v = depth_translational_components(depth, K, sigmas, min_depth_ratio=min_depth_ratio,
                                          percentile=percentile)
    return jnp.stack([u, v], axis=-1)


def depth_translational_components(depth, K, sigmas: Sequence[float] | None = None, *,
                                   min_depth_ratio: float = 0.05, percentile: float = 99.0,
                                   percentile_stride: int = 1):
    """:func:`depth_translational_bases` as its components ``(u, v)``, each ``[3 * len(sigmas), H, W]``
    (what the refinement reads; building them apart saves a copy of the stacked bases).

    The percentiles of all levels are found in one batched pass (one counting loop instead of
    one per basis). ``percentile_stride`` k > 1 takes them over every k-th pixel in x and y
    only (k^2 times fewer values; the scales then differ slightly from the exact ones: what the
    test-time refinement uses, which refines the coefficients anyway; the network's bases keep
    the exact scales)."""
    depth = _depth_map("depth_translational_bases", depth)
    K = checks.real_array("depth_translational_bases", "K", K)
    if tuple(K.shape) != (4,):
        raise ValueError(f"depth_translational_bases: K has shape {tuple(K.shape)}; expected (4,): (fx, fy, cx, cy)")
    K = jnp.asarray(K, jnp.float32)
    _check_intrinsics("depth_translational_bases", K)
    h, w = depth.shape
    sigmas = check_depth_sigmas(default_depth_sigmas(w) if sigmas is None else sigmas,
                                "depth_translational_bases: sigmas", max(h, w))
    d0 = _clean_depth(depth, min_depth_ratio)
    g = device.pixel_grid(h, w)
    fx, fy, cx, cy = K[0], K[1], K[2], K[3]
    dx, dy = g[..., 0] - cx, g[..., 1] - cy
    radius = jnp.sqrt(dx ** 2 + dy ** 2)
    inv = jnp.stack([1.0 / device.gaussian_blur(d0, float(sigma)) for sigma in sigmas])  # [S, H, W]
    # |f^x| = |fx| inv and |f^y| = |fy| inv share one percentile (it commutes with scaling).
    k = int(percentile_stride)
    if k < 1:
        raise ValueError(f"percentile_stride must be >= 1, got {percentile_stride}")
    q = jax.vmap(lambda x: quantile_nonneg(x, percentile / 100.0))(
        jnp.concatenate([inv[:, ::k, ::k], (radius * inv)[:, ::k, ::k]]))
    s = len(sigmas)
    p_inv, p_z = q[:s, None, None], q[s:, None, None]
    zero = jnp.zeros_like(inv)
    fx_n = (fx * inv) / jnp.maximum(jnp.abs(fx) * p_inv, 1e-12)
    fy_n = (fy * inv) / jnp.maximum(jnp.abs(fy) * p_inv, 1e-12)
    z_scale = jnp.maximum(p_z, 1e-12)
    zu, zv = -(dx * inv) / z_scale, -(dy * inv) / z_scale
    # per level: f^x, f^y, f^z
    u = jnp.stack([fx_n, zero, zu], axis=1).reshape(3 * s, h, w)
    v = jnp.stack([zero, fy_n, zv], axis=1).reshape(3 * s, h, w)
    return u, v


def static_bases(h: int, w: int, num_homography: int = 12, num_stochastic: int = 12,
                 seed: int = 0, **stochastic_kwargs) -> jax.Array:
    """The depth-independent part of a basis set: [homography | stochastic] ``[N, h, w, 2]``.

    ``num_homography`` is 12 (second order), 8 (first order) or 0; ``num_stochastic`` >= 0;
    both whole numbers (Python or numpy integers; floats and bools are a ValueError).
    """
    if not (_is_whole(num_homography) and num_homography in (0, 8, 12)):
        raise ValueError(f"num_homography must be 0, 8 or 12, got {num_homography!r}")
    if not (_is_whole(num_stochastic) and num_stochastic >= 0):
        raise ValueError(f"static_bases: num_stochastic must be a whole number >= 0, got "
                         f"{num_stochastic!r}")
    parts = []
    if num_homography == 12:
        parts.append(homography_bases(h, w))
    elif num_homography == 8:
        parts.append(homography_bases_first_order(h, w))
    elif num_homography != 0:
        raise ValueError(f"num_homography must be 0, 8 or 12, got {num_homography}")
    if num_stochastic:
        parts.append(jnp.asarray(stochastic_bases(h, w, num_stochastic, seed, **stochastic_kwargs)))
    if not parts:
        raise ValueError("static_bases: the basis set is empty")
    return jnp.concatenate(parts, axis=0)


def hybrid_bases(h: int, w: int, depth=None, K=None, *, num_homography: int = 12,
                 num_stochastic: int = 12, seed: int = 0, sigmas: Sequence[float] | None = None,
                 **stochastic_kwargs) -> jax.Array:
    """[homography | stochastic | depth-translational] bases.

    Without ``depth``: ``[num_homography + num_stochastic, h, w, 2]`` (24 = CamFlow). With
    ``depth`` ``[h, w]`` and ``K``: 12 depth bases are appended (36 = CamFlow+); with a batch
    ``[B, h, w]`` / ``[B, 4]`` (or one ``K`` ``[4]`` for every map) the result is
    ``[B, N, h, w, 2]`` (static part broadcast). Depth, ``K`` and ``sigmas`` are checked as in
    :func:`depth_translational_bases` (a ValueError naming the argument).
    """
    static = static_bases(h, w, num_homography, num_stochastic, seed, **stochastic_kwargs)
    if depth is None:
        return static
    if K is None:
        raise ValueError("hybrid_bases: depth bases need intrinsics K = (fx, fy, cx, cy)")
    depth = checks.as_array("hybrid_bases", "depth", depth)
    _check_depth_dtype("hybrid_bases", depth)
    if depth.ndim not in (2, 3) or tuple(depth.shape[-2:]) != (h, w):
        raise ValueError(f"hybrid_bases: depth has shape {tuple(depth.shape)}; expected ({h}, {w}) or (B, {h}, {w}) "
                         "(resize depth, and K, to the bases' grid first)")
    sigmas = check_depth_sigmas(default_depth_sigmas(w) if sigmas is None else sigmas, "hybrid_bases: sigmas",
                                max(h, w))
    if depth.ndim == 3:
        K = checks.real_array("hybrid_bases", "K", K)
        if tuple(K.shape) == (4,):  # one camera for every map
            K = jnp.broadcast_to(jnp.asarray(K), (depth.shape[0], 4))
        if tuple(K.shape) != (depth.shape[0], 4):
            raise ValueError(f"hybrid_bases: K has shape {tuple(K.shape)} for {depth.shape[0]} depth maps; expected "
                             f"({depth.shape[0]}, 4) or (4,)")
        dep = jax.vmap(lambda d, k: depth_translational_bases(d, k, sigmas))(jnp.asarray(depth, jnp.float32),
                                                                              jnp.asarray(K, jnp.float32))
        return jnp.concatenate([jnp.broadcast_to(static, (depth.shape[0],) + static.shape), dep], axis=1)
    return jnp.concatenate([static, depth_translational_bases(depth, K, sigmas)], axis=0)


def combine(coeffs: jax.Array, bases: jax.Array) -> jax.Array:
    """Motion ``sum_k coeffs[..., k] * bases[k]``.

    Shapes: coeffs ``[..., N]`` with bases ``[N, h, w, 2]`` -> ``[..., h, w, 2]`` (``[B, N]`` ->
    ``[B, h, w, 2]``; one motion ``[N]`` -> ``[h, w, 2]``); or coeffs ``[B, N]`` with a basis set
    per sample ``[B, N, h, w, 2]`` (or one shared ``[1, N, h, w, 2]``) -> ``[B, h, w, 2]``.
    Python lists are converted; integer coefficients compute in the bases' float type. Shapes
    that do not fit are a ValueError naming the argument, its shape and the expected one,
    raised when the call is traced (static shapes: free under ``jax.jit``)."""
    coeffs = checks.real_array("combine", "coefficients", coeffs)
    bases = checks.real_array("combine", "bases", bases)
    if bases.ndim not in (4, 5) or bases.shape[-1] != 2:
        raise ValueError(f"combine: bases has shape {tuple(bases.shape)}; expected [N, h, w, 2] (N basis fields of "
                         "(u, v) per pixel) or a basis set per sample [B, N, h, w, 2]")
    n = bases.shape[-4]
    if bases.ndim == 4:
        if coeffs.ndim < 1 or coeffs.shape[-1] != n:
            raise ValueError(f"combine: coefficients have shape {tuple(coeffs.shape)} but bases has {n} basis fields "
                             f"(shape {tuple(bases.shape)}); expected (..., {n})")
    else:
        b = bases.shape[0]
        if coeffs.ndim != 2 or coeffs.shape[1] != n or (b != 1 and coeffs.shape[0] != b):
            batch = "B" if b == 1 else str(b)
            raise ValueError(f"combine: coefficients have shape {tuple(coeffs.shape)} but bases holds {b} set(s) of "
                             f"{n} basis fields (shape {tuple(bases.shape)}); expected ({batch}, {n})")
    coeffs, bases = jnp.asarray(coeffs), jnp.asarray(bases)  # float64 numpy: JAX's float type
    if not jnp.issubdtype(coeffs.dtype, jnp.floating):  # integer weights: not truncated bases
        coeffs = coeffs.astype(bases.dtype if jnp.issubdtype(bases.dtype, jnp.floating) else jnp.float32)
    bases = bases.astype(coeffs.dtype)
    if bases.ndim == 4 or bases.shape[0] == 1:  # one basis set, shared by every motion
        return jnp.einsum("...n,nhwc->...hwc", coeffs, bases.reshape(bases.shape[-4:]), precision=device.HIGHEST)
    return jnp.einsum("bn,bnhwc->bhwc", coeffs, bases, precision=device.HIGHEST)


def least_squares_coeffs(flow: jax.Array, bases: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Coefficients ``[N]`` of the best (masked) least-squares fit of ``flow`` ``[h, w, 2]`` by
    ``bases`` ``[N, h, w, 2]`` — the best a model restricted to this basis set can do."""
    n = bases.shape[0]
    A = bases.reshape(n, -1).T
    b = flow.reshape(-1)
    if mask is not None:
        wgt = jnp.repeat(jnp.asarray(mask, jnp.float32).reshape(-1), 2)
        A = A * wgt[:, None]
        b = b * wgt
    coeffs, *_ = jnp.linalg.lstsq(A, b)
    return coeffs
