"""Checks of the numeric inputs and results every surface shares: camera intrinsics, depth maps,
flows and homographies (plain numpy; each raises ``ValueError`` with the reason, or the
``*_problem`` form returns it). One rule per quantity: the command lines, the Predictor and the
data readers all call these.
"""

from __future__ import annotations

import math

import numpy as np

#: Focal lengths accepted, as multiples of the image's longer side (fisheye ~0.2, long tele ~30).
FOCAL_RANGE = (0.05, 100.0)
#: The principal point may lie at most this many image sizes outside the image (crops move it).
PRINCIPAL_POINT_MARGIN = 1.0
#: Loose bounds (the Predictor: intrinsics from datasets, possibly of another resolution than
#: test images): only numerically absurd values are refused.
LOOSE_FOCAL_RANGE = (1e-3, 1e4)
LOOSE_PRINCIPAL_POINT_MARGIN = 100.0
#: Pixels of a depth map that must be valid (finite, > 0).
MIN_VALID_DEPTH_FRACTION = 0.01
#: |det| of a homography's affine part in normalized coordinates: area change allowed (each way).
MAX_AREA_CHANGE = 1e3
#: The projective denominator at the image corners (normalized coordinates, H[2,2] = 1) must
#: stay above this: below it the image corners approach the horizon (the image folds).
MIN_CORNER_DENOMINATOR = 0.05


def as_array(fn: str, name: str, x):
    """``x`` as an array: numpy and JAX arrays (traced ones too) as they are, anything else (lists,
    scalars) converted by numpy; ragged nested lists are a ValueError naming ``fn`` and the
    argument."""
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        return x
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{fn}: {name} must be an array of numbers (nested lists of different lengths?)") from e


def real_array(fn: str, name: str, x, *, booleans: bool = False):
    """``x`` as an array of real numbers (:func:`as_array`): integer and floating dtypes, bfloat16
    included, and booleans where ``booleans`` (a mask warped as an image). Strings, Python
    objects and complex numbers are a ValueError naming ``fn`` and the argument. The dtype alone
    decides: free under ``jax.jit``. The one rule of the library's array arguments."""
    x = as_array(fn, name, x)
    dt = np.dtype(x.dtype)
    if not (dt.kind in "iuf" or dt.name == "bfloat16" or (booleans and dt.kind == "b")):
        raise ValueError(f"{fn}: {name} must hold real numbers, got dtype {x.dtype} (shape {tuple(x.shape)})")
    return x


def check_number(name: str, value, lo: float | None = None, hi: float | None = None,
                 lo_open: bool = False) -> float:
    """``value`` as a finite float within ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    bad = (not math.isfinite(v) or (lo is not None and (v <= lo if lo_open else v < lo))
           or (hi is not None and v > hi))
    if bad:
        lo_s = "-inf" if lo is None else f"{lo:g}"
        hi_s = "inf" if hi is None else f"{hi:g}"
        raise ValueError(f"{name} must be a finite number in {'(' if lo_open else '['}{lo_s}, {hi_s}], "
                         f"got {value!r}")
    return v


# ----------------------------------------------------------------------------- camera inputs
def intrinsics_problem(K, height: int | None = None, width: int | None = None, *,
                       loose: bool = False) -> str | None:
    """Why ``K = (fx, fy, cx, cy)`` (pixels of an ``height x width`` image) is unusable, or None.

    Always: four finite numbers with fx, fy > 0. With the image size: fx, fy within
    :data:`FOCAL_RANGE` x the longer side and the principal point at most
    :data:`PRINCIPAL_POINT_MARGIN` image sizes outside the image (``loose``: the
    ``LOOSE_*`` bounds, which only refuse numerically absurd values such as 1e30).
    """
    try:
        k = np.asarray(K, np.float64).reshape(-1)
    except (TypeError, ValueError):
        return f"intrinsics must be 4 numbers fx,fy,cx,cy, got {K!r}"
    if k.shape != (4,):
        return f"intrinsics must be 4 numbers fx,fy,cx,cy, got {k.size}"
    if not np.all(np.isfinite(k)):
        return f"intrinsics must be finite, got {tuple(float(v) for v in k)}"
    fx, fy, cx, cy = (float(v) for v in k)
    if fx <= 0 or fy <= 0:
        return f"focal lengths must be > 0, got fx={fx:g}, fy={fy:g}"
    if height is None or width is None:
        return None
    side = float(max(height, width))
    focal_range = LOOSE_FOCAL_RANGE if loose else FOCAL_RANGE
    lo, hi = focal_range[0] * side, focal_range[1] * side
    for name, f in (("fx", fx), ("fy", fy)):
        if not lo <= f <= hi:
            return (f"{name}={f:g} px is implausible for a {width}x{height} image (expected "
                    f"{lo:g}..{hi:g} px); intrinsics are in pixels of the input image")
    m = LOOSE_PRINCIPAL_POINT_MARGIN if loose else PRINCIPAL_POINT_MARGIN
    if not (-m * width <= cx <= (1 + m) * width and -m * height <= cy <= (1 + m) * height):
        return (f"principal point ({cx:g}, {cy:g}) lies far outside the {width}x{height} image; "
                "intrinsics are in pixels of the input image")
    return None


def check_intrinsics(K, height: int | None = None, width: int | None = None) -> np.ndarray:
    """float32 ``[4]`` intrinsics, or ValueError with :func:`intrinsics_problem`'s reason."""
    why = intrinsics_problem(K, height, width)
    if why:
        raise ValueError(why)
    return np.asarray(K, np.float32).reshape(4)


def check_depth(depth, name: str = "depth", hw: tuple[int, int] | None = None,
                min_valid_fraction: float = MIN_VALID_DEPTH_FRACTION) -> np.ndarray:
    """float32 ``[H, W]`` depth with at least ``min_valid_fraction`` valid (finite, > 0) pixels.

    ``hw``: the image size the depth must match. Invalid pixels are kept (the Predictor and the
    bases fill them); huge finite values are fine (the depth bases normalize by the median).
    """
    try:
        d = np.asarray(depth)
    except (ValueError, TypeError) as e:  # ragged nested lists: numpy's words name no argument
        raise ValueError(f"{name} is not an [H, W] array of numbers (rows of different lengths?): "
                         "give depth as a numpy array of one float per pixel") from e
    if d.dtype.kind not in "uif":
        what = {"b": "a boolean array (a mask, not depth)", "c": "a complex array",
                "O": "an array of Python objects"}.get(d.dtype.kind, f"a {d.dtype} array")
        raise ValueError(f"{name} is {what}: depth must be an [H, W] map of real numbers "
                         "(integers or floats, one per pixel)")
    d = d.astype(np.float32)
    if d.ndim == 3 and d.shape[-1] == 1:
        d = d[..., 0]
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"{name} must be a non-empty [H, W] map, got shape {np.shape(depth)}")
    if hw is not None and d.shape != tuple(hw):
        raise ValueError(f"{name} is {d.shape[1]}x{d.shape[0]} but its image is {hw[1]}x{hw[0]}; "
                         "depth must be aligned with its image")
    ok = np.isfinite(d) & (d > 0)
    frac = float(ok.mean())
    if frac < min_valid_fraction:
        need = f"at least {100 * min_valid_fraction:g}% needed" if min_valid_fraction >= 1e-6 else "at least one needed"
        raise ValueError(f"{name}: only {100 * frac:.2f}% of the pixels hold a finite positive depth "
                         f"({'all NaN, inf or <= 0; ' if frac == 0 else ''}{need})")
    return d


# ----------------------------------------------------------------------------- results
def flow_problem(flow, name: str = "flow") -> str | None:
    """Why a flow ``[H, W, 2]`` must not be written (non-finite values), or None."""
    f = np.asarray(flow)
    if f.ndim != 3 or f.shape[-1] != 2:
        return f"{name} has shape {f.shape}, expected [H, W, 2]"
    bad = ~np.isfinite(f)
    if bad.any():
        return f"{name} has {int(bad.sum())} non-finite values (NaN/inf) out of {f.size}"
    return None


def check_flow(flow, name: str = "flow", hint: str = "") -> None:
    why = flow_problem(flow, name)
    if why:
        raise ValueError(why + (f"; {hint}" if hint else ""))


def homography_problem(H, height: int, width: int) -> str | None:
    """Why a 3x3 homography (image-1 pixels -> image-2 pixels) is degenerate, or None.

    In normalized coordinates (image centre 0, corners +-1), scaled so H[2,2] = 1, a camera
    motion homography must be finite, change areas by at most :data:`MAX_AREA_CHANGE` either
    way (|det| of the 2x2 part) and keep every image corner in front of the horizon (projective
    denominator > :data:`MIN_CORNER_DENOMINATOR`). The fit of an empty or all-NaN flow, which
    sends every pixel to the image centre, fails the area test.
    """
    H = np.asarray(H, np.float64)
    if H.shape != (3, 3):
        return f"homography has shape {H.shape}, expected (3, 3)"
    if not np.all(np.isfinite(H)):
        return "homography has non-finite entries"
    sx, sy = 2.0 / max(width - 1, 1), 2.0 / max(height - 1, 1)
    T = np.array([[sx, 0.0, -1.0], [0.0, sy, -1.0], [0.0, 0.0, 1.0]])
    Hn = T @ H @ np.linalg.inv(T)
    if not abs(Hn[2, 2]) > 1e-9 * np.abs(Hn).max(initial=0.0):
        return "homography sends the image centre to infinity"
    Hn = Hn / Hn[2, 2]
    det = float(np.linalg.det(Hn[:2, :2]))
    if not 1.0 / MAX_AREA_CHANGE <= abs(det) <= MAX_AREA_CHANGE:
        return (f"homography is degenerate (area change |det| = {abs(det):.3g} in normalized "
                "coordinates: it collapses or blows up the image)")
    corners = np.array([[-1, -1, 1], [1, -1, 1], [-1, 1, 1], [1, 1, 1]], np.float64)
    den = corners @ Hn[2]
    if den.min() <= MIN_CORNER_DENOMINATOR:
        return "homography folds the image (a corner maps through the horizon)"
    return None


def check_homography(H, height: int, width: int, hint: str = "") -> np.ndarray:
    why = homography_problem(H, height, width)
    if why:
        raise ValueError(why + (f"; {hint}" if hint else ""))
    H = np.asarray(H, np.float64)
    return H / H[2, 2]
