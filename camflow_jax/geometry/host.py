"""Host-side (numpy / OpenCV) geometry: the one place for warps, homography flows and flow
resizing outside JAX.

Same conventions as :mod:`camflow_jax.geometry.device` (docs/design.md, "Conventions"): flow
``[H, W, 2]`` holds (u, v) = (dx, dy) in pixels, pixel centres at integers, a homography maps
image-1 pixels to image-2 pixels and its flow is ``H(p) - p``; ``warp(img2, flow_f) ≈ img1``.

:func:`warp` and :func:`warp_validity` follow the JAX warp's rule exactly
(:func:`camflow_jax.geometry.device.sample_bilinear`, mode "zero"): a sample at (x, y) is defined iff
``0 <= x < W-1`` and ``0 <= y < H-1`` and is exactly 0 elsewhere — so the last row and column
are 0 even at integer coordinates. The rule lives in :func:`in_frame` (here; the JAX warp imports it)
alone (elementwise comparisons: it takes numpy arrays as well as jax ones).

:func:`resize_intrinsics` and :func:`crop_intrinsics` are the host-side updates of K that the
input pipeline's worker processes and read threads apply (they must never start a JAX
backend): the rules of :func:`camflow_jax.geometry.resize_intrinsics` and
:func:`camflow_jax.geometry.crop_intrinsics` (used inside jitted inference), both held to the
same closed forms by tests/geometry/test_geometry.py and to OpenCV's resize by tests/geometry/test_host.py.
"""

from __future__ import annotations

import functools

import cv2
import numpy as np

from camflow_jax.geometry import checks

__all__ = ["in_frame", "gray", "pixel_grid", "warp", "warp_validity", "homography_flow", "mean_homography", "resize_flow",
           "resize_intrinsics", "crop_intrinsics", "constant_value"]


def gray(img) -> np.ndarray:
    """float32 grey image: the mean over the channels of ``[H, W, C]`` (``[H, W]`` as it is),
    as :func:`camflow_jax.refine.gray` computes it in JAX. Three channels are summed in the
    order ``mean`` sums them (the same values), ~14x faster than ``mean(axis=-1)``."""
    img = np.asarray(img)
    if img.ndim == 3 and img.shape[-1] == 3 and img.dtype == np.uint8:
        # 8-bit: the sum in integers is exact, as float32's is (at most 765), and ~1.3x faster
        total = np.add(img[..., 0], img[..., 1], dtype=np.uint16)
        total += img[..., 2]
        return total.astype(np.float32) / np.float32(3)
    x = np.asarray(img, np.float32)
    if x.ndim != 3:
        return x
    if x.shape[-1] == 3:
        return (x[..., 0] + x[..., 1] + x[..., 2]) / np.float32(3)
    return x.mean(axis=-1)


def constant_value(*arrays) -> float | None:
    """The one finite value that every element of every array holds (e.g. a pair's depth maps
    without relief), or None. The rule for "a constant depth": such a depth's bases are the
    same for every pair of a size and intrinsics, so the Predictor and the refiner build them
    once and keep them."""
    first = np.asarray(arrays[0]).flat[0]
    if not np.isfinite(first) or not all(np.all(np.asarray(a) == first) for a in arrays):
        return None
    return float(first)


def in_frame(x, y, h: int, w: int):
    """The library's one validity rule for a bilinear sample at (x, y) of an ``h x w`` image:
    ``0 <= x < w-1`` and ``0 <= y < h-1`` (the reference semantics: the last row and column
    count as outside, so all four neighbours exist). Elementwise comparisons only, so it serves
    numpy arrays on the host and ``jax.Array``s in the JAX warp (:mod:`.device` imports it
    from here: host code never imports JAX)."""
    return (x >= 0) & (x < w - 1) & (y >= 0) & (y < h - 1)


def _inside(x: np.ndarray, y: np.ndarray, h: int, w: int) -> np.ndarray:
    """Where bilinear samples at (x, y) are defined: the library's one rule, on numpy arrays."""
    return np.asarray(in_frame(np.asarray(x), np.asarray(y), h, w))


@functools.lru_cache(maxsize=8)
def pixel_grid(h: int, w: int, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates (xs, ys) ``[h, w]`` of ``dtype`` (read-only arrays shared between
    calls: made once per size)."""
    ys, xs = np.mgrid[0:h, 0:w].astype(dtype)
    xs.flags.writeable = ys.flags.writeable = False
    return xs, ys


def _real_array(fn: str, name: str, x, booleans: bool = False) -> np.ndarray:
    """``x`` as a numpy array of real numbers (booleans too where ``booleans``: an image may be a
    mask) by :func:`camflow_jax.geometry.checks.real_array` (lists converted; ragged lists,
    strings, objects, complex numbers are a ValueError naming ``fn`` and the argument); bfloat16
    as float32 (OpenCV has no bfloat16)."""
    a = np.asarray(checks.real_array(fn, name, x, booleans=booleans))
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


def _check_flow(fn: str, flow) -> np.ndarray:
    """``flow`` as a numpy array ``[H, W, 2]``, or a ValueError naming ``fn`` and its shape."""
    flow = _real_array(fn, "flow", flow)
    if flow.ndim != 3 or flow.shape[-1] != 2:
        raise ValueError(f"{fn}: flow has shape {flow.shape}; expected [H, W, 2] (one flow, (u, v) per pixel)")
    return flow


def _targets(flow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sample coordinates ``p + flow(p)`` (float64) of a checked flow ``[H, W, 2]``."""
    xs, ys = pixel_grid(*flow.shape[:2])
    return xs + flow[..., 0], ys + flow[..., 1]


def warp_validity(flow: np.ndarray) -> np.ndarray:
    """``[H, W]`` float32: 1 where :func:`warp` samples inside the image, else 0."""
    flow = _check_flow("warp_validity", flow)
    x, y = _targets(flow)
    return _inside(x, y, *flow.shape[:2]).astype(np.float32)


def warp(image: np.ndarray, flow: np.ndarray, *, exact: bool = True) -> np.ndarray:
    """Backward bilinear warp ``out(p) = image(p + flow(p))`` (float32, exactly 0 outside).

    ``image`` is ``[H, W]`` or ``[H, W, C]`` on the flow's grid ``[H, W, 2]``; the result has its
    shape (other shapes, and arrays that are not real numbers, are a ValueError naming the
    argument, its shape and the expected one; Python lists are converted).
    Non-finite flow values give 0. ``exact=False``: OpenCV's ``cv2.remap`` does the
    interpolation, with its weights rounded to 1/32 pixel (so a value can differ from the exact
    one by up to 1/64 of the largest difference between its four neighbours), under the same
    validity rule; 10-40x faster, for measurements that need no more (the plausibility checks).
    """
    flow = _check_flow("warp", flow)
    image = _real_array("warp", "image", image, booleans=True)
    h, w = flow.shape[:2]
    if image.ndim not in (2, 3) or image.shape[:2] != (h, w):
        raise ValueError(f"warp: image has shape {image.shape} but flow has shape {flow.shape}; expected image "
                         f"({h}, {w}) or ({h}, {w}, C): image and flow sizes must match")
    if not exact:
        return _remap(image, flow)
    x, y = _targets(flow)
    inside = _inside(x, y, h, w)
    x = np.where(inside, x, 0.0)
    y = np.where(inside, y, 0.0)
    x0 = np.minimum(x.astype(np.intp), max(w - 2, 0))  # x >= 0 here: truncation is the floor
    y0 = np.minimum(y.astype(np.intp), max(h - 2, 0))
    # The four neighbours by flat row index (np.take: numpy's fastest gather); x0 + 1 and
    # y0 + 1 stay inside except on a one-pixel-wide (tall) image, where they are x0 (y0).
    src = image.reshape(h * w, -1).astype(np.float32)
    i = y0 * w + x0
    dx, dy = (1 if w > 1 else 0), (w if h > 1 else 0)
    fx = (x - x0)[..., None]
    fy = (y - y0)[..., None]
    top = np.take(src, i, axis=0) * (1 - fx) + np.take(src, i + dx, axis=0) * fx
    bot = np.take(src, i + dy, axis=0) * (1 - fx) + np.take(src, i + dy + dx, axis=0) * fx
    out = np.where(inside[..., None], top * (1 - fy) + bot * fy, 0.0)
    return out.astype(np.float32).reshape(image.shape)


def _remap(image: np.ndarray, flow: np.ndarray) -> np.ndarray:
    """:func:`warp` with ``exact=False``."""
    h, w = flow.shape[:2]
    xs, ys = pixel_grid(h, w, np.float32)
    mx = cv2.add(xs, np.ascontiguousarray(flow[..., 0], np.float32))
    my = cv2.add(ys, np.ascontiguousarray(flow[..., 1], np.float32))
    inside = _inside(mx, my, h, w)  # non-finite targets compare False: outside
    src = image.reshape(h, w, -1).astype(np.float32)
    out = np.empty(src.shape, np.float32)
    for c0 in range(0, src.shape[-1], 4):  # remap takes at most 4 channels
        part = cv2.remap(np.ascontiguousarray(src[..., c0:c0 + 4]), mx, my, cv2.INTER_LINEAR,
                         borderMode=cv2.BORDER_REPLICATE)
        out[..., c0:c0 + 4] = part.reshape(h, w, -1)
    out[~inside] = 0.0
    return out.reshape(image.shape)


def homography_flow(H: np.ndarray, h: int, w: int) -> np.ndarray:
    """Dense flow ``H(p) - p`` on the ``h x w`` pixel grid, float32 ``[h, w, 2]`` (computed in
    float64)."""
    H = np.asarray(H, np.float64)
    if H.shape != (3, 3):
        raise ValueError(f"homography must be [3, 3], got shape {H.shape}")
    xs, ys = pixel_grid(h, w)
    den = H[2, 0] * xs + H[2, 1] * ys + H[2, 2]
    out = np.empty((h, w, 2), np.float32)
    out[..., 0] = (H[0, 0] * xs + H[0, 1] * ys + H[0, 2]) / den - xs
    out[..., 1] = (H[1, 0] * xs + H[1, 1] * ys + H[1, 2]) / den - ys
    return out


def mean_homography(homographies, h: int, w: int) -> np.ndarray:
    """The homography that takes the four corner pixels of an ``h x w`` frame ((0, 0), (w-1, 0),
    (w-1, h-1), (0, h-1)) to the mean of where ``homographies`` ``[K, 3, 3]`` take them, scaled
    so ``H[2, 2] = 1`` (the four-point system solved in float64): the mean of K estimates of one
    motion, exact at the corners (the mean of their flows, which is not itself a homography,
    differs from it inside the frame by the order of the square of their differences)."""
    Hs = np.asarray(homographies, np.float64)
    if Hs.ndim != 3 or Hs.shape[1:] != (3, 3) or len(Hs) == 0:
        raise ValueError(f"homographies must be [K, 3, 3] with K >= 1, got shape {Hs.shape}")
    if not np.all(np.isfinite(Hs)):
        raise ValueError("homographies must be finite")
    x = np.array([0.0, w - 1, w - 1, 0.0])
    y = np.array([0.0, 0.0, h - 1, h - 1])
    p = np.stack([x, y, np.ones(4)])                        # [3, 4]
    q = Hs @ p                                              # [K, 3, 4]
    u, v = (q[:, :2] / q[:, 2:]).mean(0)                    # the corners' mean images
    zero, one = np.zeros(4), np.ones(4)
    A = np.concatenate([np.stack([x, y, one, zero, zero, zero, -u * x, -u * y], 1),
                        np.stack([zero, zero, zero, x, y, one, -v * x, -v * y], 1)])
    H = np.append(np.linalg.solve(A, np.concatenate([u, v])), 1.0).reshape(3, 3)
    return H


def resize_flow(flow: np.ndarray, h: int, w: int) -> np.ndarray:
    """Resamples a flow ``[H0, W0, 2]`` to ``h x w`` and rescales its values (u by w/W0, v by h/H0).

    Half-pixel-centre convention (as ``cv2.resize``): area averaging when shrinking, bilinear
    when enlarging; a uniform translation of t pixels becomes exactly t * w / W0. (The network's
    flows are resized with the align-corners :func:`camflow_jax.geometry.device.resize_flow` instead.)
    """
    flow = np.asarray(flow, np.float32)
    h0, w0 = flow.shape[:2]
    if (h0, w0) == (h, w):
        return flow.copy()
    interp = cv2.INTER_AREA if (h < h0 and w < w0) else cv2.INTER_LINEAR
    # Channel by channel (OpenCV's two-channel float resize is ~8x slower than two one-channel
    # ones), split and merged by OpenCV (~2x faster than strided numpy copies at 320x576).
    u, v = (cv2.resize(c, (w, h), interpolation=interp) for c in cv2.split(np.ascontiguousarray(flow)))
    u *= np.float32(w / w0)
    v *= np.float32(h / h0)
    return cv2.merge([u, v])


def resize_intrinsics(K, old_hw: tuple[int, int], new_hw: tuple[int, int]) -> np.ndarray:
    """float32 intrinsics (fx, fy, cx, cy) ``[..., 4]`` of an image resized from ``old_hw`` to
    ``new_hw`` with half-pixel centres (``cv2.resize``): x_new = (x_old + 0.5) s - 0.5, so
    fx' = s_x fx and cx' = (cx + 0.5) s_x - 0.5 (likewise for y)."""
    K = np.asarray(K, np.float32)
    sy, sx = new_hw[0] / old_hw[0], new_hw[1] / old_hw[1]
    fx, fy, cx, cy = K[..., 0], K[..., 1], K[..., 2], K[..., 3]
    return np.stack([fx * sx, fy * sy, (cx + 0.5) * sx - 0.5, (cy + 0.5) * sy - 0.5], axis=-1).astype(np.float32)


def crop_intrinsics(K, top: int, left: int) -> np.ndarray:
    """float32 intrinsics ``[..., 4]`` after cropping an image at offset (top, left): the
    principal point shifts by (-left, -top)."""
    return np.asarray(K, np.float32) - np.array([0, 0, left, top], np.float32)
