"""Input checks and safe output writing shared by the command-line tools (and the Predictor).

One policy for every tool (``estimate``, ``evaluate``, ``stabilize``,
``tools/import_official_checkpoint.py``; see docs/what_the_tools_refuse.md):

* bad input or arguments: a one-line ``error: ...`` naming the cause and exit code
  :data:`EXIT_BAD_INPUT` (2), before any output is touched where it can be known up front;
* an existing output file is never replaced without ``-y/--overwrite``; files a tool did not
  write are never deleted, even with ``-y``;
* an output is never the input: identity is decided by the file system (``os.path.samefile``:
  symlinks and hard links included), not by comparing path strings;
* outputs are written to a hidden temporary file or folder next to their destination and moved
  into place only when complete, so an interrupted or failed run never leaves half a result and
  never damages the previous one; without ``-y`` the move fails if the destination appeared in
  the meantime (another run), instead of replacing it; outputs follow the umask;
* failures: :func:`run_cli` turns every expected failure (:data:`EXPECTED_ERRORS`) into one line
  (:func:`describe_error`), exit 2, and SIGINT/SIGTERM into a clean stop (temporaries removed),
  exit 130/143; a traceback only with ``--verbose`` (:func:`add_verbose_flag`);
* results are checked before they are written: finite flows, a non-degenerate homography,
  strict JSON (no ``NaN`` tokens).

Numeric checks (:func:`check_intrinsics`, :func:`check_depth`, :func:`flow_problem`,
:func:`homography_problem`) are plain numpy and raise ``ValueError`` with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator

import numpy as np

__all__ = ["EXIT_BAD_INPUT", "finite_float", "check_number", "intrinsics_problem", "check_intrinsics",
           "check_depth", "flow_problem", "check_flow", "homography_problem", "check_homography",
           "strict_json", "same_file", "check_not_inputs", "existing_outputs", "check_output_dir",
           "check_output_file", "check_writable", "atomic_file", "atomic_dir", "write_text_atomic",
           "describe_error", "EXPECTED_ERRORS", "Interrupted", "signals_as_interrupts", "run_cli",
           "add_verbose_flag", "reading", "AtomicOutputs", "camflow_only_flags"]

#: Exit code of every CLI for bad input, bad arguments or a refused output.
EXIT_BAD_INPUT = 2

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


# ----------------------------------------------------------------------------- errors
#: Failures a CLI reports as one line (exit :data:`EXIT_BAD_INPUT`) instead of a traceback:
#: bad values, missing or unreadable files, damaged files of any format (numpy headers raise
#: ``tokenize.TokenError``/``SyntaxError``, truncated archives ``zipfile.BadZipFile``, which
#: are ``Exception`` subclasses outside ``ValueError``/``OSError``), and OS errors.
def _expected_errors() -> tuple[type[BaseException], ...]:
    import tokenize
    import zipfile

    return (ValueError, OSError, EOFError, tokenize.TokenError, SyntaxError, zipfile.BadZipFile)


EXPECTED_ERRORS = _expected_errors()

_ERRNO_WORDS = {
    "ENOSPC": "disk full", "EDQUOT": "disk quota exceeded", "EROFS": "read-only file system",
    "EACCES": "permission denied", "EPERM": "operation not permitted", "ENOENT": "no such file or directory",
    "ENOTDIR": "not a directory", "EISDIR": "is a directory", "EEXIST": "already exists",
    "EFBIG": "file too large", "EMFILE": "too many open files", "EIO": "input/output error",
}


def describe_error(e: BaseException, context: str | None = None) -> str:
    """One line for an expected failure: OS errors in plain words with the path (``disk full:
    out/flow_f.npy``), others as their message, prefixed by ``context`` (e.g. the file being
    read) when given. Never more than one line and never empty."""
    import errno as _errno

    if isinstance(e, OSError) and e.errno is not None:
        words = _ERRNO_WORDS.get(_errno.errorcode.get(e.errno, ""), e.strerror or type(e).__name__)
        paths = [p for p in (e.filename, e.filename2) if p not in (None, "")]
        msg = f"{words}: {' -> '.join(map(str, paths))}" if paths else words
    else:
        msg = " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, (SyntaxError,)) or type(e).__module__ in ("tokenize", "zipfile"):
            msg = f"damaged or unreadable file ({type(e).__name__}: {msg})"
    if context:
        msg = f"{context}: {msg}"
    return msg[:500]


#: Exit status after SIGINT / SIGTERM (128 + the signal number, as a shell reports a signal).
EXIT_INTERRUPTED = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised in the main thread like Ctrl-C so that every ``finally`` block
    and context manager on the way out runs (temporary files and folders are removed)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


@contextlib.contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread (the
    default SIGTERM action would kill the process without any cleanup). Once one arrived,
    further ones are ignored so the cleanup itself is not cut short. Previous handlers are
    restored on exit. Outside the main thread: a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM)

    def handler(signum, frame):
        for s in sigs:
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in sigs}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def add_verbose_flag(parser) -> None:
    """``--verbose``: on an error, print the traceback too (the one-line message stays last)."""
    parser.add_argument("--verbose", action="store_true",
                        help="on an error, also print the full traceback (for bug reports)")


def add_refine_size_flag(parser) -> None:
    """``--refine-size N`` (estimate, stabilize, evaluate): the refined camflow refines at
    :meth:`camflow_jax.refine.RefineConfig.at_size` ``(N)``; checked by :func:`check_refine_size`."""
    parser.add_argument("--refine-size", type=int, default=None, metavar="N",
                        help="refined camflow: refine at N px on the longer side instead of 288 "
                             "(RefineConfig.at_size(N); N >= 288): more precise on finely textured "
                             "images, not on average; slower (~3x the refinement's time at 576)")


def run_cli(body: Callable[[], int | None], verbose: bool = False) -> int:
    """Runs a CLI's work with the shared failure policy; returns the exit status.

    * an expected failure (:data:`EXPECTED_ERRORS`) prints ``error: <one line>``
      (:func:`describe_error`) and returns :data:`EXIT_BAD_INPUT`; the traceback goes first
      only with ``verbose``;
    * SIGINT / SIGTERM (and Ctrl-C) stop the work like an exception, so partial outputs and
      temporaries are removed by the writers' own cleanup and previous outputs stay; returns
      130 / 143;
    * anything else is a bug: it propagates with its traceback.
    """
    try:
        with signals_as_interrupts():
            return int(body() or 0)
    except KeyboardInterrupt as e:  # Interrupted included
        signum = getattr(e, "signum", signal.SIGINT)
        if verbose:
            traceback.print_exc()
        print(f"error: interrupted by {signal.Signals(signum).name}: nothing was written or "
              "replaced (partial outputs removed)", file=sys.stderr)
        return EXIT_INTERRUPTED.get(signum, 128 + int(signum))
    except EXPECTED_ERRORS as e:
        if verbose:
            traceback.print_exc()
        print(f"error: {describe_error(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT


@contextlib.contextmanager
def reading(path, what: str = "file") -> Iterator[None]:
    """Names ``path`` in an expected failure raised while reading it (damaged numpy headers and
    archives raise errors that do not say which file): re-raised as ValueError ``cannot read
    <what> PATH: <cause>`` unless the message already names the file."""
    try:
        yield
    except EXPECTED_ERRORS as e:
        if path is None:
            raise
        p = os.fspath(path)
        named = isinstance(e, OSError) and e.filename not in (None, "")
        if named or p in str(e):
            raise
        raise ValueError(describe_error(e, f"cannot read {what} {p}")) from e


def check_refine_size(size: int | None, no_refine: bool) -> None:
    """``--refine-size N`` of the CLIs: at least the default working size, and not together with
    ``--no-refine`` (ValueError: one line, exit 2)."""
    if size is None:
        return
    if no_refine:
        raise ValueError("--refine-size needs refinement: do not also give --no-refine")
    from camflow_jax.refine import RefineConfig

    try:
        RefineConfig.at_size(size)  # the one rule for a working size
    except ValueError:
        raise ValueError(f"--refine-size must be at least {RefineConfig().max_size} (the default "
                         f"working size), got {size}") from None


def camflow_only_flags(method: str, **given) -> None:
    """The one rule for depth and intrinsics flags: they feed CamFlow's depth bases only, so a
    classical estimator (sift_ransac, orb, dis, ecc, identity...) given any of them is refused
    (ValueError naming the flags) instead of ignoring them silently. ``given``: flag -> value
    (``None``/``False`` = not given)."""
    from camflow_jax import estimators

    used = [flag for flag, v in given.items() if v is not None and v is not False]
    if used and not estimators.is_camflow(method):
        raise ValueError(f"{', '.join(used)} only apply to camflow estimators (CamFlow+'s depth "
                         f"bases); {method} does not use them: drop them or choose camflow")


# ----------------------------------------------------------------------------- numbers
def finite_float(text: str) -> float:
    """argparse ``type=``: a finite float (``nan``/``inf`` refused with the flag's usage error)."""
    import argparse

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return v


def int_at_least(lo: int, unit: str = "", why: str = ""):
    """argparse ``type=``: a whole number >= ``lo`` (``unit`` names what it counts, ``why``
    says why smaller ones are refused), e.g. ``int_at_least(1, "frames")``."""
    import argparse

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number{' of ' + unit if unit else ''}, "
                                             f"got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be at least {lo}{' (' + why + ')' if why else ''}, got {text!r}")
        return v

    return parse


def intrinsics_arg(text: str) -> tuple[float, ...]:
    """argparse ``type=``: ``fx,fy,cx,cy``, four finite numbers (checked against the image size
    later, by :func:`check_intrinsics`)."""
    import argparse

    try:
        vals = tuple(float(v) for v in text.split(","))
    except ValueError:
        vals = ()
    if len(vals) != 4 or not all(math.isfinite(v) for v in vals):
        raise argparse.ArgumentTypeError(f"must be 4 finite numbers fx,fy,cx,cy; got {text!r}")
    return vals


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
    d = np.asarray(depth)
    if d.dtype.kind not in "uif":
        raise ValueError(f"{name} must be numeric, got dtype {d.dtype}")
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
        raise ValueError(f"{name}: only {100 * frac:.2f}% of the pixels hold a finite positive depth "
                         f"(at least {100 * min_valid_fraction:g}% needed)")
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


def strict_json(obj, *, nonfinite: str = "refuse", **kwargs) -> str:
    """The one JSON writer of the package: valid JSON text (no ``NaN``/``Infinity`` tokens).

    numpy arrays and scalars become lists and Python numbers, tuples become lists and dict keys
    strings. Non-finite floats, which JSON cannot hold, follow ``nonfinite``:

    * ``"refuse"`` (default): ValueError (results that must be finite, e.g. a homography);
    * ``"mark"``: NaN (undefined) -> ``null``, +-inf -> the strings ``"inf"`` / ``"-inf"``
      (result tables, where an infinite PSNR of identical images is a value).
    """
    if nonfinite not in ("refuse", "mark"):
        raise ValueError(f"nonfinite must be 'refuse' or 'mark', got {nonfinite!r}")
    try:
        return json.dumps(_json_value(obj, nonfinite == "mark"), allow_nan=False, **kwargs)
    except ValueError as e:
        raise ValueError(f"refusing to write invalid JSON (a value is NaN or infinite): {e}") from None


def _json_value(x, mark: bool):
    if isinstance(x, dict):
        return {str(k): _json_value(v, mark) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_value(v, mark) for v in x]
    if isinstance(x, np.ndarray):
        return _json_value(x.tolist(), mark)
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if mark and not math.isfinite(v):
            return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
        return v
    return x


# ----------------------------------------------------------------------------- identity
def same_file(a, b) -> bool:
    """True when ``a`` and ``b`` exist and are the same file or folder (symlinks followed,
    hard links detected by inode)."""
    if a is None or b is None:
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:  # either does not exist (or cannot be inspected)
        return False


def _inside(path, folder) -> bool:
    """True when ``path``'s parent folder is ``folder`` (by identity)."""
    parent = os.path.dirname(os.path.abspath(os.fspath(path))) or "."
    return same_file(parent, folder)


def check_not_inputs(outputs: Iterable, inputs: Iterable,
                     input_folder_exts: tuple[str, ...] = ()) -> None:
    """ValueError if an output path is (by file identity) one of the inputs, or, for input
    folders, would add a file with one of ``input_folder_exts`` to them."""
    inputs = [os.fspath(p) for p in inputs if p]
    for out in (os.fspath(p) for p in outputs if p):
        for inp in inputs:
            if same_file(out, inp):
                how = "" if os.path.abspath(out) == os.path.abspath(inp) else " (a link to it)"
                raise ValueError(f"output {out} is the input {inp}{how}; choose another output")
            if (input_folder_exts and os.path.isdir(inp) and _inside(out, inp)
                    and os.path.splitext(out)[1].lower() in input_folder_exts):
                raise ValueError(f"output {out} would be written into the input folder {inp} "
                                 "and become one of its frames; choose another output")


# ----------------------------------------------------------------------------- overwrite policy
def existing_outputs(path, owned: Callable[[str], bool] | Iterable[str] | None = None) -> list[str]:
    """Existing files a run writing ``path`` would replace.

    A file (or link) path: ``[path]`` if it exists. A folder: the entries inside it that the tool
    writes (``owned``: a predicate on names or a collection of names; None = every entry).
    """
    path = os.fspath(path)
    if not os.path.lexists(path):
        return []
    if not os.path.isdir(path):
        return [path]
    pred = _owned(owned)
    return sorted(os.path.join(path, n) for n in os.listdir(path) if pred(n))


def _owned(owned) -> Callable[[str], bool]:
    if owned is None:
        return lambda n: True
    if callable(owned):
        return owned
    names = frozenset(owned)
    return names.__contains__


def _refuse_existing(existing: list[str], overwrite: bool) -> None:
    if existing and not overwrite:
        shown = ", ".join(existing[:3]) + (f" and {len(existing) - 3} more" if len(existing) > 3 else "")
        raise FileExistsError(f"refusing to overwrite {shown} (pass -y/--overwrite to replace)")


def check_writable(folder: str) -> None:
    """Creates ``folder`` (and parents) if needed and checks a file can be created in it."""
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=folder)
        os.close(fd)
        os.remove(probe)
    except OSError as e:  # the errno in plain words ("read-only file system", "disk full"...)
        why = describe_error(OSError(e.errno, e.strerror)) if e.errno else str(e)
        raise OSError(f"cannot write to {folder}: {why}") from None


def check_output_dir(path, owned, overwrite: bool, inputs: Iterable = ()) -> None:
    """Refuses (FileExistsError / ValueError / OSError) an output folder before any work:
    not a folder, one of the inputs, holding files the tool would replace without
    ``overwrite``, or not writable (it and its parent are probed)."""
    path = os.fspath(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise FileExistsError(f"output {path} exists and is not a folder")
    check_not_inputs([path], inputs)
    owned_pred = _owned(owned)
    if os.path.isdir(path):
        check_not_inputs([os.path.join(path, n) for n in os.listdir(path) if owned_pred(n)], inputs)
    _refuse_existing(existing_outputs(path, owned), overwrite)
    check_writable(os.path.dirname(os.path.abspath(path)))
    if os.path.isdir(path):
        check_writable(path)


def check_output_file(path, overwrite: bool, inputs: Iterable = ()) -> None:
    """Like :func:`check_output_dir` for a single output file."""
    if not path:
        return
    path = os.fspath(path)
    if os.path.isdir(path):
        raise FileExistsError(f"output {path} is a folder")
    check_not_inputs([path], inputs)
    _refuse_existing(existing_outputs(path), overwrite)
    check_writable(os.path.dirname(os.path.abspath(path)))


# ----------------------------------------------------------------------------- atomic writing
def _temp_name(path: str) -> tuple[str, str]:
    folder = os.path.dirname(os.path.abspath(path))
    stem = os.path.basename(os.path.normpath(path))
    return folder, f".{stem}.partial-"


#: OS failures of a write that say nothing about which file (the data, not the name, failed).
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS)


def _disk_full(folder: str) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (64 << 10)


def _at_destination(e: OSError, tmp: str, path: str) -> OSError:
    """``e`` (raised while writing ``tmp``) told in terms of the destination ``path``: OS errors
    name the temporary path or none at all (a full disk fails the write, not the open), and
    OpenCV writers return False without a reason (checked against the free space here)."""
    fn = e.filename
    if e.errno is not None:
        if fn not in (None, "") and not str(fn).startswith(tmp):
            return e  # about another file (e.g. an input read inside the block)
        if fn in (None, "") and e.errno not in _WRITE_ERRNOS:
            return e
        return type(e)(e.errno, e.strerror, path)
    # No errno (OpenCV's False, numpy's "6144 requested and 4064 written"): a full disk under
    # the destination explains it; otherwise at least name the destination, not the temporary.
    if _disk_full(os.path.dirname(os.path.abspath(path))):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    if tmp in str(e):
        return type(e)(str(e).replace(tmp, path))
    return e


def _raced(path: str) -> FileExistsError:
    return FileExistsError(f"refusing to overwrite {path}: it appeared while this run was writing "
                           "(another run writing the same output?); pass -y/--overwrite to replace")


def _link_exclusive(src: str, dst: str) -> None:
    """Puts the file ``src`` at ``dst`` only if ``dst`` does not exist (atomically: link(2)
    fails with EEXIST); falls back to an O_EXCL reservation where hard links are unsupported."""
    try:
        os.link(src, dst)
        return
    except FileExistsError:
        raise _raced(dst) from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
    try:
        fd = os.open(dst, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        raise _raced(dst) from None
    os.close(fd)
    os.replace(src, dst)  # onto our own reservation


class AtomicOutputs:
    """The outputs of one run, written to hidden temporaries next to their destinations and all
    moved into place when the ``with`` block succeeds, in the order they were added (put the
    main output first); on an exception (or SIGINT/SIGTERM, see :func:`run_cli`) every
    temporary is removed and no destination is touched.

    ``overwrite=False``: a destination is never replaced, not even one that appeared while the
    run was writing (another process): the move uses link(2) / rename(2) onto a missing path,
    which fails instead of replacing, so the check cannot race; the outputs already moved by
    this run are then taken back and the run fails with ``refusing to overwrite PATH``.
    ``overwrite=True``: destinations are replaced (``os.replace``). Files and folders get the
    permissions the umask gives (not mkstemp's 0600).
    """

    def __init__(self, overwrite: bool = True):
        self.overwrite = bool(overwrite)
        self._entries: list[tuple[str, str, str, Callable[[str], bool]]] = []  # kind, tmp, path, owned

    def file(self, path, suffix: str | None = None) -> str:
        """A temporary path for the file ``path`` (same extension unless ``suffix``, so writers
        that choose a format by extension still work)."""
        path = os.fspath(path)
        folder, prefix = _temp_name(path)
        os.makedirs(folder, exist_ok=True)
        ext = os.path.splitext(path)[1] if suffix is None else suffix
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=ext, dir=folder)
        os.close(fd)
        self._entries.append(("file", tmp, path, _owned(None)))
        return tmp

    def dir(self, path, owned=None) -> str:
        """A temporary folder whose files become ``path``'s (see :func:`atomic_dir`)."""
        path = os.fspath(path)
        folder, prefix = _temp_name(path)
        os.makedirs(folder, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=prefix, dir=folder)
        self._entries.append(("dir", tmp, path, _owned(owned)))
        return tmp

    def __enter__(self) -> "AtomicOutputs":
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self._commit()
            elif isinstance(exc, OSError):
                # A named temporary is mapped to its destination; an unnamed write failure
                # (ENOSPC...) to the output added last, the one being written.
                for _, tmp, path, _ in reversed(self._entries):
                    better = _at_destination(exc, tmp, path)
                    if better is not exc:
                        raise better from exc
        finally:
            self._cleanup()
        return False

    def _cleanup(self) -> None:
        for kind, tmp, _, _ in self._entries:
            if kind == "file" and os.path.lexists(tmp):
                os.remove(tmp)
            elif kind == "dir" and os.path.lexists(tmp):
                shutil.rmtree(tmp, ignore_errors=True)

    def _commit(self) -> None:
        done: list[tuple[str, list[str]]] = []  # kind, paths this run created (undone on a race)
        mode = 0o666 & ~_umask()
        try:
            for kind, tmp, path, owned in self._entries:
                try:
                    if kind == "file":
                        if not os.path.exists(tmp):
                            raise OSError(f"nothing was written for {path}")
                        os.chmod(tmp, mode)
                        if self.overwrite:
                            os.replace(tmp, path)  # a symlink at path is replaced, never its target
                        else:
                            _link_exclusive(tmp, path)
                            done.append(("file", [path]))
                    else:
                        created = _commit_dir(tmp, path, owned, self.overwrite)
                        done.append(("dir" if created is None else "files", [path] if created is None else created))
                except OSError as e:
                    raise _at_destination(e, tmp, path) from e
        except BaseException:
            if not self.overwrite:
                _undo(done)
            raise


def _undo(done) -> None:
    """Removes what an exclusive commit created before a later output of the run failed."""
    for kind, paths in reversed(done):
        for p in paths:
            with contextlib.suppress(OSError):
                if kind == "dir":
                    shutil.rmtree(p)
                else:
                    os.remove(p)


@contextlib.contextmanager
def atomic_file(path, suffix: str | None = None, *, overwrite: bool = True) -> Iterator[str]:
    """Yields a temporary path next to ``path`` (same extension, so writers that pick a format
    by extension still work); moved onto ``path`` when the block succeeds, removed when it
    fails. ``overwrite=False``: fails instead of replacing a ``path`` that exists by then
    (:class:`AtomicOutputs`). A symlink at ``path`` is replaced, never its target."""
    with AtomicOutputs(overwrite) as outs:
        yield outs.file(path, suffix)


def write_text_atomic(path, text: str, *, overwrite: bool = True) -> None:
    with atomic_file(path, overwrite=overwrite) as tmp:
        with open(tmp, "w") as fh:
            fh.write(text)


@contextlib.contextmanager
def atomic_dir(path, owned=None, *, overwrite: bool = True) -> Iterator[str]:
    """Yields a temporary folder next to ``path``; when the block succeeds its files become
    ``path``'s, otherwise it is deleted and ``path`` is untouched.

    ``path`` missing or empty: the folder is renamed into place (all or nothing). ``path``
    holding files: each new file replaces its namesake with ``os.replace`` and files the tool
    wrote before (``owned``, see :func:`existing_outputs`) that the new run did not write are
    removed; other files are left alone. Overwrite permission is the caller's check
    (:func:`check_output_dir`); ``overwrite=False`` also refuses, at the move, a result that
    appeared meanwhile (:class:`AtomicOutputs`).
    """
    with AtomicOutputs(overwrite) as outs:
        yield outs.dir(path, owned)


def _commit_dir(tmp: str, path: str, owned: Callable[[str], bool], overwrite: bool = True):
    """Moves ``tmp``'s files into ``path``. Returns None when ``tmp`` itself became ``path``,
    else the paths created (for :func:`_undo`; only tracked without ``overwrite``)."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise FileExistsError(f"output {path} exists and is not a folder")
    if not os.path.lexists(path) or (not os.path.islink(path) and not os.listdir(path)):
        os.chmod(tmp, 0o777 & ~_umask())
        try:
            os.rename(tmp, path)  # rename(2) replaces only a missing or empty folder, atomically
            return None
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not overwrite:  # another run filled it meanwhile
                raise _raced(path) from None
    new = os.listdir(tmp)
    if not overwrite:
        created = []
        try:
            for name in new:
                src, target = os.path.join(tmp, name), os.path.join(path, name)
                if os.path.isdir(src) and not os.path.islink(src):
                    try:
                        os.mkdir(target)  # an exclusive reservation...
                    except FileExistsError:
                        raise _raced(target) from None
                    created.append(target)
                    os.rename(src, target)  # ...that rename(2) may replace (it is empty)
                else:
                    _link_exclusive(src, target)
                    created.append(target)
        except BaseException:
            _undo([("file" if os.path.isfile(p) else "dir", [p]) for p in created])
            raise
        return created
    trash = None
    try:
        for name in new:
            target = os.path.join(path, name)
            if os.path.isdir(target) and not os.path.islink(target):
                # rename(2) cannot replace a non-empty folder: move the old one aside first.
                trash = trash or tempfile.mkdtemp(prefix=".replaced-", dir=path)
                os.rename(target, os.path.join(trash, name))
            os.replace(os.path.join(tmp, name), target)
    finally:
        if trash:
            shutil.rmtree(trash, ignore_errors=True)
    stale = set(n for n in os.listdir(path) if owned(n)) - set(new)
    for name in stale:
        target = os.path.join(path, name)
        if os.path.isfile(target) or os.path.islink(target):
            os.remove(target)
        elif os.path.isdir(target):
            shutil.rmtree(target)
    return []


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask would race with other threads)
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask
