"""Rendering a stabilized frame from its update field, and the crop/zoom that hides borders.

Update field (docs/design.md, "Stabilization"): B_t = P_t - C_t on the working grid (h x w, working pixels). A scene
point seen at x in input frame t is shown at y = x + B_t(x) in output frame t. Rendering is an
inverse warp: output pixel y samples the input at the x solving x + B_t(x) = y, found with the
fixed-point iteration x <- y - B_t(x) started at x = y (each step contracts the error by the
Lipschitz constant of B, which is small for camera motion; 4 steps by default).

Crop/zoom: a zoom z >= 1 about the image centre c = ((W-1)/2, (H-1)/2) maps output pixel q to
y = c + (q - c) / z before the inverse warp, then the frame keeps its size. The automatic zoom
is the smallest z (one per clip, so it does not pump) such that every output pixel of every
frame samples inside the input, capped at ``max_zoom`` (beyond the cap borders stay visible and
are reported).

Resolution: the fixed point and the zoom are solved on the working grid (extended by one
pixel on each side), and the resulting source-offset field is upsampled with half-pixel-centre
bilinear interpolation (full pixel X = (x + 0.5) s - 0.5, s = W / w; offsets scale by s). Only
the final sampling of the frame runs at full resolution (``cv2.remap``; frames stay on the
host, no device round trip). ``cv2.remap`` quantizes interpolation positions to 1/32 pixel.
"""

from __future__ import annotations

import functools

import cv2
import numpy as np

from camflow_jax.geometry.host import pixel_grid

__all__ = ["BORDERS", "sample_field", "solve_inverse", "source_offsets", "source_map",
           "render_frame", "forward_points", "border_fraction", "required_zoom", "required_zooms", "fits",
           "auto_zoom", "fit_updates_to_zoom"]

BORDERS = {"black": cv2.BORDER_CONSTANT, "replicate": cv2.BORDER_REPLICATE,
           "reflect": cv2.BORDER_REFLECT101}


def _check_update(update) -> np.ndarray:
    update = np.asarray(update, np.float32)
    if update.ndim != 3 or update.shape[-1] != 2:
        raise ValueError(f"update field must be [h, w, 2], got shape {update.shape}")
    if not np.all(np.isfinite(update)):
        raise ValueError("update field contains non-finite values")
    return update


def sample_field(field: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Bilinear samples of ``field`` ``[h, w, C]`` at (x, y), edge-clamped -> ``x.shape + [C]``."""
    h, w, ch = np.shape(field)
    x = np.asarray(x, np.float64)
    return _bilinear(np.asarray(field, np.float64).reshape(h * w, ch), h, w, x,
                     np.asarray(y, np.float64), 0).reshape(x.shape + (ch,))


def _bilinear(flat: np.ndarray, h: int, w: int, x: np.ndarray, y: np.ndarray, base) -> np.ndarray:
    """Bilinear, edge-clamped samples of fields stored as rows ``flat`` ``[N, C]``: the field
    starting at row ``base`` (an int or an array broadcasting with ``x``), ``h x w`` rows in
    row-major order, read at (x, y) -> ``x.shape + [C]`` (float64). The four neighbours are
    gathered with flat row indices (``np.take``), the fastest numpy gather."""
    x = np.clip(x, 0.0, w - 1.0)
    y = np.clip(y, 0.0, h - 1.0)
    x0 = np.minimum(x.astype(np.int64), max(w - 2, 0))  # x >= 0: truncation is the floor
    y0 = np.minimum(y.astype(np.int64), max(h - 2, 0))
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    i = base + y0 * w + x0
    dx, dy = (1 if w > 1 else 0), (w if h > 1 else 0)
    f00, f01 = np.take(flat, i, axis=0), np.take(flat, i + dx, axis=0)
    f10, f11 = np.take(flat, i + dy, axis=0), np.take(flat, i + dy + dx, axis=0)
    top = f00 + (f01 - f00) * fx
    return top + (f10 + (f11 - f10) * fx - top) * fy


def solve_inverse(update, y: np.ndarray, iterations: int = 4) -> np.ndarray:
    """Solves x + B(x) = y for points ``y`` ``[..., 2]`` (working pixels); returns x."""
    update = _check_update(update)
    y = np.asarray(y, np.float64)
    x = y.copy()
    for _ in range(max(1, iterations)):
        x = y - sample_field(update, x[..., 0], x[..., 1])
    return x


def _low_grid(h, w, pad=0):
    ys, xs = np.mgrid[-pad:h + pad, -pad:w + pad].astype(np.float64)
    return np.stack([xs, ys], axis=-1)


def source_offsets(update, zoom: float = 1.0, iterations: int = 4, pad: int = 1) -> np.ndarray:
    """Offsets S (working pixels) on the working grid extended by ``pad`` pixels on every side
    (``[h + 2 pad, w + 2 pad, 2]``; entry (i, j) is working pixel (j - pad, i - pad)): output
    pixel q samples the input at q + S(q).

    The extension lets the full-resolution map be interpolated, never clamped, out to the
    frame's edge (the zoom part of S is affine and must not be flattened there); beyond the
    working grid B itself is continued by its edge values.
    """
    update = _check_update(update)
    h, w = update.shape[:2]
    q = _low_grid(h, w, pad)
    c = np.array([(w - 1) / 2.0, (h - 1) / 2.0])
    y = c + (q - c) / float(zoom)
    return (solve_inverse(update, y, iterations) - q).astype(np.float32)


@functools.lru_cache(maxsize=8)
def _upsampling_maps(height, width, h, w):
    """Where each full-resolution pixel reads the 1-pixel-padded working grid (half-pixel
    centres: working x = (X + 0.5) w / W - 0.5, plus the pad)."""
    lx = (np.arange(width, dtype=np.float64) + 0.5) * (w / width) - 0.5 + 1.0
    ly = (np.arange(height, dtype=np.float64) + 0.5) * (h / height) - 0.5 + 1.0
    mx = np.broadcast_to(lx[None, :], (height, width)).astype(np.float32)
    my = np.broadcast_to(ly[:, None], (height, width)).astype(np.float32)
    return mx, my


def source_map(update, height: int, width: int, zoom: float = 1.0,
               iterations: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Full-resolution sampling maps (map_x, map_y) ``[H, W]`` float32 for ``cv2.remap``."""
    update = _check_update(update)
    h, w = update.shape[:2]
    s = source_offsets(update, zoom, iterations, pad=1)
    mx, my = _upsampling_maps(height, width, h, w)
    sx, sy = cv2.split(cv2.remap(s, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE))
    xs, ys = pixel_grid(height, width, np.float32)
    return cv2.scaleAdd(sx, width / w, xs), cv2.scaleAdd(sy, height / h, ys)


def render_frame(frame, update, zoom: float = 1.0, iterations: int = 4,
                 border: str = "black") -> np.ndarray:
    """Stabilized frame: input ``[H, W, C]`` warped by the update field ``[h, w, 2]`` and zoomed.

    ``border``: how pixels that sample outside the input are filled (:data:`BORDERS`).
    """
    frame = np.asarray(frame)
    if frame.ndim not in (2, 3):
        raise ValueError(f"frame must be [H, W] or [H, W, C], got shape {frame.shape}")
    if border not in BORDERS:
        raise ValueError(f"border must be one of {sorted(BORDERS)}, got {border!r}")
    map_x, map_y = source_map(update, frame.shape[0], frame.shape[1], zoom, iterations)
    return cv2.remap(frame, map_x, map_y, cv2.INTER_LINEAR, borderMode=BORDERS[border],
                     borderValue=0)


def forward_points(points, update, height: int, width: int, zoom: float = 1.0) -> np.ndarray:
    """Where input-frame points ``[N, 2]`` (full pixels) appear in the output frame.

    q = c + zoom (x + B(x) - c), with B read bilinearly on the working grid and scaled to full
    pixels (the forward map that rendering inverts).
    """
    update = _check_update(update)
    pts = np.asarray(points, np.float64).reshape(-1, 2)
    h, w = update.shape[:2]
    sx, sy = width / w, height / h
    b = sample_field(update, (pts[:, 0] + 0.5) / sx - 0.5, (pts[:, 1] + 0.5) / sy - 0.5)
    c = np.array([(width - 1) / 2.0, (height - 1) / 2.0])
    return c + zoom * (pts + b * np.array([sx, sy]) - c)


def border_fraction(map_x: np.ndarray, map_y: np.ndarray) -> float:
    """Fraction of output pixels whose sample lies outside the input ``[0, W-1] x [0, H-1]``."""
    h, w = map_x.shape
    tol = 1e-3
    outside = ((map_x < -tol) | (map_x > w - 1 + tol) | (map_y < -tol) | (map_y > h - 1 + tol))
    return float(outside.mean())


def _check_updates(updates) -> np.ndarray:
    """``updates`` as an array ``[T, h, w, 2]`` (a memmap stays on disk); ValueError for another
    shape."""
    if not isinstance(updates, np.ndarray):
        updates = np.asarray(updates)
    if updates.ndim != 4 or updates.shape[-1] != 2:
        raise ValueError(f"updates must be [T, h, w, 2], got shape {updates.shape}")
    return updates


def _chunks(updates, size: int = 256):
    """``(start, u)``: checked ``updates`` read ``size`` frames at a time (bounded memory on long
    clips) as float64; ValueError for non-finite values."""
    for start in range(0, updates.shape[0], size):
        u = np.asarray(updates[start:start + size], np.float64)
        if not np.all(np.isfinite(u)):
            raise ValueError("update fields contain non-finite values")
        yield start, u


#: Rounds of :func:`required_zooms` that follow the margin's line before plain halvings.
_LINE_ROUNDS = 4


def _outline_margin(h: int, w: int, height: int, width: int, iterations: int, tol: float):
    """``margin(u, a)``: for update fields ``u`` ``[t, h, w, 2]`` and 1 / zoom ``a`` ``[t]``, the
    least distance (pixels) inside the input's edges, plus ``tol``, of the samples that the
    output frame's outline reads in :func:`render_frame` -> ``[t]``; >= 0 where the crop fits
    (:func:`required_zooms`)."""
    sx, sy = width / w, height / h
    # Along an edge of the frame the upsampled offsets are linear between the working-grid
    # columns (rows), so the sampled position is too: checking the edge at those breakpoints
    # and at the corners checks all of it.
    bx = np.unique(np.clip(np.r_[0.0, width - 1.0, (np.arange(w) + 0.5) * sx - 0.5],
                           0.0, width - 1.0))
    by = np.unique(np.clip(np.r_[0.0, height - 1.0, (np.arange(h) + 0.5) * sy - 0.5],
                           0.0, height - 1.0))
    outline = np.concatenate([np.stack([bx, np.zeros_like(bx)], -1),
                              np.stack([bx, np.full_like(bx, height - 1.0)], -1),
                              np.stack([np.zeros_like(by), by], -1),
                              np.stack([np.full_like(by, width - 1.0), by], -1)])
    # The outline's position on the padded working grid, where the renderer's upsampling reads
    # the offsets: it only touches the two outer rings of that grid, so only those are solved.
    lx = (outline[:, 0] + 0.5) / sx - 0.5 + 1.0
    ly = (outline[:, 1] + 0.5) / sy - 0.5 + 1.0
    ring = np.zeros((h + 2, w + 2), bool)
    ring[[0, 1, -2, -1], :] = True
    ring[:, [0, 1, -2, -1]] = True
    q = _low_grid(h, w, pad=1)[ring]  # [R, 2]
    c_low = np.array([(w - 1) / 2.0, (h - 1) / 2.0])

    # The outline's bilinear reads of the padded grid, as _bilinear makes them (the same points
    # for every frame): the four neighbours, as positions in the ring, and the weights.
    wp = w + 2
    ring_pos = np.full((h + 2) * wp, -1)
    ring_pos[np.flatnonzero(ring.ravel())] = np.arange(q.shape[0])
    gx, gy = np.clip(lx, 0.0, w + 1.0), np.clip(ly, 0.0, h + 1.0)
    x0, y0 = np.minimum(gx.astype(np.int64), w), np.minimum(gy.astype(np.int64), h)
    fx, fy = (gx - x0)[:, None], (gy - y0)[:, None]
    i = y0 * wp + x0
    reads = [ring_pos[j] for j in (i, i + 1, i + wp, i + wp + 1)]
    assert all((r >= 0).all() for r in reads), "the outline reads outside the ring"
    scale = np.array([sx, sy])

    def margin(u, a, frames=None):
        """u [t, h, w, 2]; a [n]; frames [n] (which of u's frames; default all) -> [n]: >= 0
        where the crop at 1 / a fits."""
        frames = np.arange(u.shape[0]) if frames is None else np.asarray(frames)
        base = (frames * (h * w))[:, None]
        flat = u.reshape(-1, 2)
        y = c_low + a[:, None, None] * (q - c_low)  # [n, R, 2]
        x = y.copy()
        for _ in range(max(1, iterations)):
            x = y - _bilinear(flat, h, w, x[..., 0], x[..., 1], base)
        d = x - q  # the offsets on the ring
        f00, f01, f10, f11 = (d[:, r] for r in reads)
        top = f00 + (f01 - f00) * fx
        src = outline + (top + (f10 + (f11 - f10) * fx - top) * fy) * scale
        inside = np.minimum(np.minimum(src[..., 0], width - 1.0 - src[..., 0]),
                            np.minimum(src[..., 1], height - 1.0 - src[..., 1]))
        return inside.min(axis=1) + tol

    return margin


def required_zooms(updates, height: int, width: int, max_zoom: float = 1.5,
                   iterations: int = 4, steps: int = 14, tol: float = 1e-3) -> np.ndarray:
    """Per frame, the smallest zoom in [1, max_zoom] whose centred crop samples only inside the
    input (``updates`` ``[T, h, w, 2]`` -> ``[T]``), to ``2**-steps`` of the range of 1 / zoom
    and on the safe side (the crop at the returned zoom samples inside).

    Evaluates exactly the sampling map :func:`render_frame` uses (the upsampled source
    offsets) along the output frame's outline (at the breakpoints of its piecewise-linear
    interpolation, up to cv2.remap's 1/32-pixel weights); the region that samples
    outside the input is connected to the outside for camera-motion warps, so a valid outline
    means a valid frame. The search over a = 1 / zoom, vectorized over frames, keeps a bracket
    (``lo`` fits, ``hi`` does not) of the outline's inside margin (the least distance, in
    pixels, of a sample inside the input's edges, less ``tol``), which is nearly linear in a:
    each round evaluates two points, a hair on either side of the root of the margin's line
    (through the bracket's ends, then through the last round's two points), so a linear margin
    is bracketed in one round; after :data:`_LINE_ROUNDS` rounds (or where the line does not
    fall) the rounds halve the bracket, so the search always ends. Frames for which even
    ``max_zoom`` shows borders get ``max_zoom``.
    """
    updates = _check_updates(updates)
    margin = _outline_margin(*updates.shape[1:3], height, width, iterations, tol)
    eps = (1.0 - 1.0 / float(max_zoom)) * 2.0 ** -steps  # the bracket's final width
    out = np.empty(updates.shape[0])
    for start, u in _chunks(updates):
        n = u.shape[0]
        m_hi = margin(u, np.ones(n))
        lo = np.full(n, 1.0 / float(max_zoom))
        m_lo = margin(u, lo)
        hi = np.ones(n)
        one, at_cap = m_hi >= 0, m_lo >= 0
        todo = np.flatnonzero(~one & at_cap)  # frames that need a zoom below the cap
        # the first guess: the root of the line through the bracket's ends
        guess = lo + (hi - lo) * m_lo / np.where(m_lo > m_hi, m_lo - m_hi, 1.0)
        rounds = 0
        while todo.size:  # invariant: margin(lo) >= 0 > margin(hi)
            a0, a1 = lo[todo], hi[todo]
            root = guess[todo]
            ok = (root > a0) & (root < a1) & (rounds < _LINE_ROUNDS)
            root = np.where(ok, root, 0.5 * (a0 + a1))
            below = np.clip(root - 0.25 * eps, a0, a1)
            above = np.clip(root + 0.25 * eps, a0, a1)
            m = margin(u, np.r_[below, above], np.r_[todo, todo])
            k = todo.size
            mb, ma = m[:k], m[k:]
            for at, mv in ((below, mb), (above, ma)):
                good = mv >= 0
                lo[todo] = np.where(good & (at > lo[todo]), at, lo[todo])
                hi[todo] = np.where(~good & (at < hi[todo]), at, hi[todo])
            # next: the root of the margin's local line through its two new points (a halving
            # where that line does not fall or its root leaves the bracket)
            slope = (ma - mb) / np.maximum(above - below, 1e-300)
            nxt = np.where(slope < 0, below - mb / np.where(slope < 0, slope, -1.0), np.nan)
            guess[todo] = nxt
            todo = todo[hi[todo] - lo[todo] > eps]
            rounds += 1
        z = 1.0 / lo
        z = np.where(one, 1.0, np.where(at_cap, z, float(max_zoom)))
        out[start:start + n] = z
    return out


def fits(updates, height: int, width: int, zoom: float, iterations: int = 4,
         tol: float = 1e-3) -> np.ndarray:
    """Per frame, whether the centred crop at ``zoom`` samples only inside the input (bool
    ``[T]``; the test of :func:`required_zooms` at one zoom)."""
    updates = _check_updates(updates)
    margin = _outline_margin(*updates.shape[1:3], height, width, iterations, tol)
    out = np.empty(updates.shape[0], bool)
    for start, u in _chunks(updates):
        out[start:start + u.shape[0]] = margin(u, np.full(u.shape[0], 1.0 / zoom)) >= 0
    return out


def required_zoom(update, height: int, width: int, max_zoom: float = 1.5,
                  iterations: int = 4, steps: int = 14) -> float:
    """:func:`required_zooms` for one update field ``[h, w, 2]``."""
    update = _check_update(update)
    return float(required_zooms(update[None], height, width, max_zoom, iterations, steps)[0])


def auto_zoom(updates, height: int, width: int, max_zoom: float = 1.5,
              iterations: int = 4) -> tuple[float, np.ndarray]:
    """Clip-wide zoom (the max of the per-frame :func:`required_zooms`) and the per-frame values."""
    if max_zoom < 1.0:
        raise ValueError(f"max_zoom must be >= 1, got {max_zoom}")
    per_frame = required_zooms(updates, height, width, max_zoom, iterations)
    return float(per_frame.max()) if per_frame.size else 1.0, per_frame


def fit_updates_to_zoom(updates, height: int, width: int, zoom: float, iterations: int = 4,
                        steps: int = 8, radius: int = 5, need=None) -> np.ndarray:
    """Scales update fields in place so that ``zoom`` hides every border; returns the factors.

    Per frame, the largest a in [0, 1] (bisection, ``steps`` halvings, kept on the safe side)
    such that a B_t needs at most ``zoom`` (:func:`required_zooms`); the factors are then made
    smooth over time without exceeding any frame's own (a min filter then a mean, both over
    +-``radius`` frames: each mean averages values no larger than the centre frame's), so the
    smoothing is relaxed gradually around the frames that needed it. Frames that already fit
    keep a = 1 unless a neighbour's relaxation reaches them. a = 0 (no stabilization of that
    frame) always fits zoom >= 1. ``updates`` ``[T, h, w, 2]`` (array or writable memmap).
    ``need``: the frames' :func:`required_zooms` when already known (capped at ``max_zoom``
    >= ``zoom``: only whether each exceeds ``zoom`` is read). Returns ``[T]`` factors.
    """
    if zoom < 1.0:
        raise ValueError(f"zoom must be >= 1, got {zoom}")
    t_len = updates.shape[0]
    if need is None:
        bad = np.flatnonzero(~fits(updates, height, width, zoom * (1 + 1e-6), iterations))
    else:
        bad = np.flatnonzero(np.asarray(need, np.float64) > zoom * (1 + 1e-6))
    alpha = np.ones(t_len)
    if bad.size == 0:
        return alpha
    base = np.asarray(updates[bad], np.float64)
    lo, hi = np.zeros(bad.size), np.ones(bad.size)
    for _ in range(steps):  # invariant: lo fits, hi does not
        mid = 0.5 * (lo + hi)
        good = fits((base * mid[:, None, None, None]).astype(np.float32), height, width,
                    zoom * (1 + 1e-6), iterations)
        lo, hi = np.where(good, mid, lo), np.where(good, hi, mid)
    alpha[bad] = lo
    r = max(0, int(radius))
    pad = np.pad(alpha, r, mode="edge")
    mins = np.array([pad[t:t + 2 * r + 1].min() for t in range(t_len)])
    pad = np.pad(mins, r, mode="edge")
    smooth = np.array([pad[t:t + 2 * r + 1].mean() for t in range(t_len)])
    smooth = np.minimum(smooth, alpha)  # edge padding can exceed a frame's own factor
    for t in np.flatnonzero(smooth < 1.0):
        updates[t] = (np.asarray(updates[t], np.float64) * smooth[t]).astype(updates.dtype)
    if isinstance(updates, np.memmap):
        updates.flush()
    return smooth
