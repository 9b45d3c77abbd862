"""Pixel motion profiles and their smoothing (SteadyFlow; docs/design.md, "Stabilization").

Given the per-frame forward flows F_t (frame t -> t+1, on frame t's grid, t = 0..T-2) at the
working resolution, the *motion profile* at a FIXED pixel location x is

    C_0(x) = 0,   C_t(x) = sum_{tau < t} F_tau(x)                                      (1)

(SteadyFlow does not follow the pixel: camera flow is spatially smooth enough). The smoothed
profile P minimizes, independently per pixel and per component,

    E(P) = sum_t |P_t - C_t|^2 + lambda sum_t sum_{r in Omega_t, r != t} w_tr |P_t - P_r|^2,
    w_tr = exp(-(r - t)^2 / (Omega_t / 3)^2),   |r - t| <= Omega_t,                    (2)

and is computed, as in SteadyFlow, with a fixed number of Jacobi iterations started at P = C:

    P_t <- (C_t + lambda sum_r w_tr P_r) / (1 + lambda sum_r w_tr).                     (3)

Stacking all profiles as the columns of a ``[T, M]`` matrix turns (3) into one banded
``T x T`` matrix product per iteration; we evaluate it block-wise (row blocks of ``block``
frames against the ``block + 2 R`` frames they can reach), so memory is linear in T, and over
chunks of columns, so memory stays bounded on long clips. As (3) is linear in C, the whole
iteration is one ``T x T`` operator M (P = M C); up to :data:`OPERATOR_MAX_FRAMES` frames we
build M by iterating on the identity and apply it once, which costs several times fewer
operations than iterating on the profiles (the pipeline smooths segments of at most ~1400
frames). numpy: the stabilizer's default path imports no JAX.

Adaptive window (our statement of SteadyFlow's rule): the radius Omega_t is the largest
r <= max_radius such that the motion traced inside the window stays below a threshold,

    D(t, s) = mean_x |C_s(x) - C_t(x)|  <=  threshold   for all |s - t| <= r,

with the mean over a fixed sub-grid of pixels; Omega_t is then clamped to >= min_radius. Fast
intentional motion (pans) therefore gets short windows (the output follows it instead of
lagging behind and needing a large crop), while jitter on a still camera gets the full window.

Clip ends: truncated windows bend a pan towards its end points (with the defaults, by ~19
frames' worth of motion at the first frame). We therefore extend the profiles by ``3 R`` frames
at each end with the least-squares line fitted to the first / last ``R + 1`` frames, run (3) on
the extended sequence, and drop the extension. A linear ramp is then preserved up to the ends,
while jitter at the ends is still smoothed (the line averages it; unlike a point reflection,
which would pin the end frames to their shaky positions).

A constant profile is a fixed point of (3); a linear ramp is one wherever the window is
symmetric (and, with the extension, everywhere); high temporal frequencies are attenuated
(with the defaults, at full windows: periods <= 16 frames to ~0.3 %, 32 frames to ~0.5 %, 64
frames to ~9 %, 128 frames to ~53 %). The default lambda, 20 (5 until 28 Nov 2026), was chosen
on development clips (seeds 1 and 2 of shaken vtest and the synthetic clips with and without a
moving object): against 5 it leaves 30-65 % less high-frequency shake (the floor of the
response was 1.1 %) for 0.2-0.8 % more zoom, and slow motion is followed as before (128
frames: 53 % against 55 %); docs/stabilization.md, "Smoothing strength".
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["SmoothingParams", "accumulate_profiles", "subgrid", "adaptive_radii",
           "smooth_profiles"]


@dataclasses.dataclass(frozen=True)
class SmoothingParams:
    """Smoothing parameters; the same values are used for every estimator.

    Attributes:
      max_radius: largest temporal window radius Omega (frames); the CLI's ``--smoothing``.
      min_radius: smallest radius the adaptive rule may choose (frames).
      motion_threshold: adaptive-window threshold on the traced motion, as a fraction of the
        frame diagonal (resolution independent).
      strength: lambda in (2)/(3).
      iterations: number of Jacobi iterations (3).
    """

    max_radius: int = 30
    min_radius: int = 3
    motion_threshold: float = 0.1
    strength: float = 20.0
    iterations: int = 10

    def __post_init__(self):
        if not (isinstance(self.max_radius, (int, np.integer)) and self.max_radius >= 1):
            raise ValueError(f"max_radius must be an integer >= 1, got {self.max_radius!r}")
        if not 0 <= self.min_radius <= self.max_radius:
            raise ValueError(f"min_radius must be in [0, max_radius={self.max_radius}], got "
                             f"{self.min_radius!r}")
        if not (self.motion_threshold > 0 and self.strength >= 0 and self.iterations >= 0):
            raise ValueError("motion_threshold must be > 0, strength >= 0, iterations >= 0; got "
                             f"{self.motion_threshold}, {self.strength}, {self.iterations}")


def accumulate_profiles(flows) -> np.ndarray:
    """Profiles (1) from forward flows ``[T-1, h, w, 2]`` -> ``[T, h, w, 2]`` float32 (C_0 = 0)."""
    flows = np.asarray(flows)
    if flows.ndim != 4 or flows.shape[-1] != 2:
        raise ValueError(f"flows must be [T-1, h, w, 2], got shape {flows.shape}")
    if not np.all(np.isfinite(flows)):
        raise ValueError("flows contain non-finite values")
    c = np.cumsum(flows.astype(np.float64), axis=0)
    return np.concatenate([np.zeros((1,) + flows.shape[1:]), c]).astype(np.float32)


def subgrid(h: int, w: int, num_points: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of the ``num_points x num_points`` sub-grid used to trace motion."""
    ys = np.unique(np.linspace(0, h - 1, min(h, num_points)).round().astype(int))
    xs = np.unique(np.linspace(0, w - 1, min(w, num_points)).round().astype(int))
    return ys, xs


def adaptive_radii(profiles, max_radius: int, min_radius: int, threshold: float,
                   num_points: int | None = 16) -> np.ndarray:
    """Per-frame window radius Omega_t (int32 ``[T]``) by the adaptive rule in the module doc.

    ``threshold`` is in the profiles' pixel units; the traced motion is averaged over the
    :func:`subgrid` of ``num_points x num_points`` pixels (``num_points=None``: all pixels).
    """
    profiles = np.asarray(profiles, np.float64)
    if profiles.ndim != 4 or profiles.shape[-1] != 2:
        raise ValueError(f"profiles must be [T, h, w, 2], got shape {profiles.shape}")
    t_len, h, w = profiles.shape[:3]
    if num_points is not None:
        ys, xs = subgrid(h, w, num_points)
        profiles = profiles[:, ys][:, :, xs]
    sub = profiles.reshape(t_len, -1, 2)
    exceeded = np.zeros(t_len, bool)
    radii = np.full(t_len, max_radius, np.int64)
    for k in range(1, max_radius + 1):
        d = np.zeros(t_len)
        if k < t_len:
            step = np.linalg.norm(sub[k:] - sub[:-k], axis=-1).mean(axis=-1)  # D(t, t+k)
            d[:-k] = np.maximum(d[:-k], step)
            d[k:] = np.maximum(d[k:], step)  # D(t, t-k)
        newly = (~exceeded) & (d > threshold)
        radii[newly] = k - 1
        exceeded |= newly
    return np.clip(radii, min_radius, max_radius).astype(np.int32)


def _block_weights(radii, t_len, radius, block, n_blocks):
    """Row blocks of the banded weight matrix: ``[n_blocks, block, block + 2 radius]`` float64."""
    rows = np.arange(n_blocks * block).reshape(n_blocks, block, 1)
    cols = (np.arange(n_blocks)[:, None, None] * block
            + np.arange(block + 2 * radius)[None, None, :] - radius)
    rad = np.pad(np.asarray(radii, np.float64), (0, n_blocks * block - t_len),
                 constant_values=1.0)[rows]
    d = (cols - rows).astype(np.float64)
    w = np.exp(-(d ** 2) / (np.maximum(rad, 1e-6) / 3.0) ** 2)
    valid = (d != 0) & (np.abs(d) <= rad) & (cols >= 0) & (cols < t_len) & (rows < t_len)
    return np.where(valid, w, 0.0)


def _jacobi(c, radii, strength, radius, block, iterations):
    """Jacobi iterations (3) on ``c`` ``[T, M]`` with per-frame radii ``[T]``, in ``c``'s dtype:
    per iteration, each row block of the banded weights times the ``block + 2 radius`` frames
    it reaches (a slice of the zero-padded iterate, so no copies)."""
    t_len, m = c.shape
    n_blocks = -(-t_len // block)
    wb = _block_weights(radii, t_len, radius, block, n_blocks)
    denom = (1.0 + strength * wb.sum(axis=-1).reshape(-1)[:t_len])[:, None].astype(c.dtype)
    wb = wb.astype(c.dtype)
    padded = np.zeros((n_blocks * block + 2 * radius, m), c.dtype)
    s = np.empty((n_blocks * block, m), c.dtype)
    p = c
    for _ in range(iterations):
        padded[radius:radius + t_len] = p
        for k in range(n_blocks):
            np.matmul(wb[k], padded[k * block:k * block + block + 2 * radius],
                      out=s[k * block:(k + 1) * block])
        p = (c + c.dtype.type(strength) * s[:t_len]) / denom
    return p


#: Up to this many frames (the clip and its end extensions), :func:`smooth_profiles` applies
#: the iterations as one ``T x T`` operator (module doc); longer, it iterates the banded product.
OPERATOR_MAX_FRAMES = 2048


def _extend_linearly(flat: np.ndarray, fit_len: int, pad_head: int,
                     pad_tail: int) -> np.ndarray:
    """Prepends ``pad_head`` / appends ``pad_tail`` rows continuing the least-squares line of
    the first / last ``fit_len`` rows (per column)."""
    t_len = flat.shape[0]
    fit_len = max(2, min(fit_len, t_len))
    x = np.arange(fit_len, dtype=np.float64)
    xc = x - x.mean()

    def line(seg):  # seg [fit_len, M] -> (value at x = 0, slope)
        slope = (xc @ (seg - seg.mean(axis=0))) / (xc @ xc)
        return seg.mean(axis=0) - slope * x.mean(), slope

    a0, s0 = line(flat[:fit_len].astype(np.float64))
    a1, s1 = line(flat[-fit_len:].astype(np.float64))
    kh = np.arange(1, pad_head + 1, dtype=np.float64)[:, None]
    kt = np.arange(1, pad_tail + 1, dtype=np.float64)[:, None]
    head = (a0 - s0 * kh)[::-1]
    tail = a1 + s1 * (fit_len - 1 + kt)
    return np.concatenate([head, flat, tail]).astype(np.float32)


def smooth_profiles(profiles, radii, strength: float = SmoothingParams.strength, iterations: int = 10,
                    extrapolate_ends: bool | tuple[bool, bool] = True,
                    max_radius: int | None = None, block: int = 128,
                    column_chunk: int = 16384) -> np.ndarray:
    """Smoothed profiles P (3) for profiles ``[T, ...]`` (any trailing shape) and radii ``[T]``.

    ``extrapolate_ends``: extend the clip linearly before smoothing (module doc), at both ends
    or per end as ``(head, tail)``; False gives plain truncated windows. Returns float32 numpy
    of the profiles' shape. Columns are processed in chunks of ``column_chunk``. ``max_radius``
    (default: the largest radius) sets the band width and the end extension's fit length and
    size, so results do not depend on which radii a segment happens to contain.

    Locality: after n iterations P_t depends only on C within n * max(radii) frames of t (plus
    the end extensions), which lets the pipeline smooth long clips in overlapping temporal
    segments with the same result.
    """
    c = np.asarray(profiles, np.float32)
    radii = np.asarray(radii)
    t_len = c.shape[0]
    if radii.shape != (t_len,):
        raise ValueError(f"radii must be [T={t_len}], got shape {radii.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError("profiles contain non-finite values")
    if t_len < 2 or iterations == 0 or strength == 0:
        return c.copy()
    radius = int(max(1, int(radii.max() if max_radius is None else max_radius)))
    flat = c.reshape(t_len, -1)
    head, tail = ((extrapolate_ends, extrapolate_ends) if isinstance(extrapolate_ends, bool)
                  else tuple(bool(v) for v in extrapolate_ends))
    pad, pad_tail = 3 * radius * head, 3 * radius * tail
    if pad or pad_tail:
        flat = _extend_linearly(flat, radius + 1, pad, pad_tail)
        radii = np.concatenate([np.full(pad, radii[0]), radii, np.full(pad_tail, radii[-1])])
    total = flat.shape[0]
    radius = min(radius, total - 1)
    radii = np.minimum(radii, radius)
    block = int(min(block, total))
    m = flat.shape[1]
    chunk = int(min(column_chunk, m))
    if total <= OPERATOR_MAX_FRAMES:
        # (3) is linear in C, P = M C: M is (3) run on the identity (float64), and the kept rows
        # of M times C is one matrix product, several times fewer operations than iterating
        op = _jacobi(np.eye(total), radii, float(strength), radius, block, int(iterations))
        op = op[pad:pad + t_len].astype(np.float32)
        return np.concatenate([op @ flat[:, start:start + chunk] for start in range(0, m, chunk)],
                              axis=1).reshape(c.shape)
    out = np.empty((t_len, m), np.float32)
    for start in range(0, m, chunk):
        part = np.ascontiguousarray(flat[:, start:start + chunk])
        out[:, start:start + part.shape[1]] = _jacobi(part, radii, float(strength), radius, block,
                                                      int(iterations))[pad:pad + t_len]
    return out.reshape(c.shape)
