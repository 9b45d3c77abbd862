"""The motion file: a clip's camera motion, path, smoothed path and applied correction, as
JSON, CSV or NPZ (one schema, three encodings; docs/stabilization.md, "Exporting the motion").

Written by ``--export-motion FILE`` (``--save-motion`` is the same flag), read back by ``--path
FILE`` (``--load-motion``). All homographies are 3x3, in input pixel coordinates (x right, y
down, pixel centres at integers), normalized so that entry [2][2] is 1:

* ``pair_homography`` (frames 0..T-2): maps a point of frame t to where it is in frame t+1 (the
  least-squares fit of the estimator's forward flow on the working grid;
  ``pair_fit_rms_px``: how far the flow is from it, in pixels).
* ``camera_path``: C_0 = I, C_{t+1} = H_t C_t (frame 0 -> frame t).
* ``smoothed_path``: S_t = Z^-1 W_t C_t, the path the output follows (frame 0 -> output frame
  t before the zoom); the one a user edits.
* ``correction``: W_t, input pixel of frame t -> output pixel (zoom included): the fit of the
  warp actually rendered, which is a dense field (``correction_fit_rms_px``: its distance from
  the fit, in pixels).
* ``coefficients`` (optional): the estimator's motion-basis coefficients per pair.
* ``source`` (header, optional): the fingerprint of the video the motion was measured on
  (:mod:`camflow_jax.stabilization.fingerprint`); ``--path`` refuses another video's file.

The NPZ encoding also holds ``flows``, the dense per-pair motion on the working grid
(``working_size``), so a re-run from it renders exactly what the original run rendered; an NPZ
written before this schema (``flows`` only, no version) reads as version 0: motion, no path.

Rendering with a path file (:func:`path_edits`): the dense correction the pipeline computes
from the motion, followed by the homography Z S'_t S_t^-1 Z^-1 that takes the path the motion
gives (S_t) to the file's (S'_t); frames whose path moves no frame corner by more than
:data:`EDIT_TOLERANCE_PX` are rendered unchanged.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os

import cv2
import numpy as np

from camflow_jax.geometry import checks
from camflow_jax.io.errors import EXPECTED_ERRORS, describe_error
from camflow_jax.stabilization import fingerprint
from camflow_jax.stabilization import render as render_lib

__all__ = ["VERSION", "FORMATS", "MotionRecord", "fit_homography_points", "pair_homography",
           "correction_homography", "homography_flows", "record_from_plan", "path_edits",
           "edit_problem", "pair_problem", "edited_source_map", "normalized", "check_extension", "write", "read"]

#: The schema version written; :func:`read` accepts it (and 0, the flows-only NPZ).
VERSION = 1
FORMAT_NAME = "camflow_jax motion"
FORMATS = (".json", ".csv", ".npz")
#: A path edit smaller than this (pixels, at the frame corners) is no edit.
EDIT_TOLERANCE_PX = 1e-6
#: An edited path must leave at least this fraction of each output frame showing the picture
#: (:func:`edit_problem`): below it the frame would be mostly black border.
MIN_EDIT_COVERAGE = 0.5
#: Fits use every STEP-th working-grid point in each direction (and the last row / column).
FIT_STEP = 2

_MATRICES = ("pair_homography", "camera_path", "smoothed_path", "correction")


@dataclasses.dataclass
class MotionRecord:
    """One motion file's content (module doc); arrays are float64 ``[T, 3, 3]`` except the
    pairs ``[T-1, ...]``. Only ``frame_size`` is required; ``smoothed_path`` is what ``--path``
    renders with, ``pair_homography`` / ``flows`` are the motion that skips estimation."""

    frame_size: tuple[int, int]
    num_frames: int
    fps: float = 30.0
    estimator: str = ""
    zoom: float | None = None
    pair_homography: np.ndarray | None = None
    camera_path: np.ndarray | None = None
    smoothed_path: np.ndarray | None = None
    correction: np.ndarray | None = None
    pair_fit_rms_px: np.ndarray | None = None
    correction_fit_rms_px: np.ndarray | None = None
    coefficients: np.ndarray | None = None
    timestamps: np.ndarray | None = None
    flows: np.ndarray | None = None   # [T-1, h, w, 2] working pixels (NPZ only)
    stats: dict = dataclasses.field(default_factory=dict)
    version: int = VERSION
    source: dict | None = None  # the source fingerprint (camflow_jax.stabilization.fingerprint)

    @property
    def has_motion(self) -> bool:
        return self.flows is not None or self.pair_homography is not None


# ----------------------------------------------------------------------------- geometry
def normalized(h: np.ndarray) -> np.ndarray:
    """``h`` scaled so that entry [2][2] is 1."""
    return h / h[..., 2:3, 2:3]


def _apply(h: np.ndarray, pts: np.ndarray) -> np.ndarray:
    p = pts @ h[:, :2].T + h[:, 2]
    return p[:, :2] / p[:, 2:3]


def fit_homography_points(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, float]:
    """Least-squares homography (all points, no outlier rejection) and its RMS error (px)."""
    src = np.asarray(src, np.float64).reshape(-1, 2)
    dst = np.asarray(dst, np.float64).reshape(-1, 2)
    h, _ = cv2.findHomography(src, dst, 0)
    if h is None or not np.all(np.isfinite(h)) or abs(h[2, 2]) < 1e-12:
        raise ValueError("cannot fit a homography to the motion (degenerate field)")
    h = normalized(h)
    rms = float(np.sqrt(np.mean(np.sum((_apply(h, src) - dst) ** 2, axis=1))))
    return h, rms


def _grid(h: int, w: int, step: int = FIT_STEP) -> tuple[np.ndarray, np.ndarray]:
    ys = np.unique(np.r_[np.arange(0, h, step), h - 1])
    xs = np.unique(np.r_[np.arange(0, w, step), w - 1])
    return ys, xs


def _full_pixels(xs, ys, height, width, h, w) -> np.ndarray:
    """Working-grid nodes in full pixels (half-pixel centres, as the renderer upsamples)."""
    gx, gy = np.meshgrid((xs + 0.5) * (width / w) - 0.5, (ys + 0.5) * (height / h) - 0.5)
    return np.stack([gx.ravel(), gy.ravel()], axis=-1)


def pair_homography(flow: np.ndarray, height: int, width: int) -> tuple[np.ndarray, float]:
    """Fit of a forward flow ``[h, w, 2]`` (working pixels) in full pixels of a ``height x
    width`` frame -> (H 3x3, RMS px)."""
    flow = np.asarray(flow, np.float64)
    h, w = flow.shape[:2]
    ys, xs = _grid(h, w)
    src = _full_pixels(xs, ys, height, width, h, w)
    f = flow[ys][:, xs].reshape(-1, 2) * np.array([width / w, height / h])
    return fit_homography_points(src, src + f)


def correction_homography(update: np.ndarray, height: int, width: int,
                          zoom: float) -> tuple[np.ndarray, float]:
    """Fit of the rendered warp (input pixel -> output pixel, zoom included) of an update
    field ``[h, w, 2]`` -> (W 3x3, RMS px)."""

    update = np.asarray(update, np.float32)
    h, w = update.shape[:2]
    ys, xs = _grid(h, w)
    src = _full_pixels(xs, ys, height, width, h, w)
    return fit_homography_points(src, render_lib.forward_points(src, update, height, width, zoom))


def _zoom_matrix(zoom: float, height: int, width: int) -> np.ndarray:
    c = np.array([(width - 1) / 2.0, (height - 1) / 2.0])
    z = np.eye(3)
    z[0, 0] = z[1, 1] = zoom
    z[:2, 2] = c * (1 - zoom)
    return z


def homography_flows(pairs: np.ndarray, height: int, width: int, h: int, w: int) -> np.ndarray:
    """Dense forward flows ``[T-1, h, w, 2]`` (working pixels) of per-pair homographies."""
    ys, xs = np.arange(h), np.arange(w)
    src = _full_pixels(xs, ys, height, width, h, w)
    scale = np.array([w / width, h / height])
    out = np.empty((len(pairs), h, w, 2), np.float32)
    for t, hm in enumerate(np.asarray(pairs, np.float64)):
        out[t] = ((_apply(hm, src) - src) * scale).reshape(h, w, 2)
    return out


def record_from_plan(motion, plan, timestamps=None) -> MotionRecord:
    """The motion file of a run: fits of its flows and update fields (module doc)."""
    H, W = plan.frame_size
    n = motion.num_frames
    pairs = np.empty((n - 1, 3, 3))
    pair_rms = np.empty(n - 1)
    for t in range(n - 1):
        pairs[t], pair_rms[t] = pair_homography(motion.flows[t], H, W)
    cam = np.empty((n, 3, 3))
    cam[0] = np.eye(3)
    for t in range(n - 1):
        cam[t + 1] = normalized(pairs[t] @ cam[t])
    corr = np.empty((n, 3, 3))
    corr_rms = np.empty(n)
    for t in range(n):
        corr[t], corr_rms[t] = correction_homography(plan.updates[t], H, W, plan.zoom)
    zinv = np.linalg.inv(_zoom_matrix(plan.zoom, H, W))
    smooth = normalized(zinv @ corr @ cam)
    coeffs = getattr(motion, "coefficients", None)
    return MotionRecord(
        frame_size=(int(H), int(W)), num_frames=n, fps=float(motion.fps),
        estimator=str(motion.estimator), zoom=float(plan.zoom), pair_homography=pairs,
        camera_path=cam, smoothed_path=smooth, correction=corr, pair_fit_rms_px=pair_rms,
        correction_fit_rms_px=corr_rms,
        coefficients=None if coeffs is None else np.asarray(coeffs, np.float64),
        timestamps=None if timestamps is None else np.asarray(timestamps, np.float64),
        flows=motion.flows, stats=dict(motion.stats or {}))


def path_edits(wanted: np.ndarray, current: np.ndarray, zoom: float, height: int,
               width: int) -> tuple[list[np.ndarray | None], np.ndarray]:
    """Per frame, the output-space homography Z S'_t S_t^-1 Z^-1 taking the path ``current``
    (S) to ``wanted`` (S'), or None where it moves no frame corner by more than
    :data:`EDIT_TOLERANCE_PX`; and how far it moves the corners (px, per frame)."""
    z = _zoom_matrix(zoom, height, width)
    zi = np.linalg.inv(z)
    corners = np.array([[0, 0], [width - 1, 0], [0, height - 1], [width - 1, height - 1]], float)
    out, shifts = [], []
    for s_new, s_old in zip(np.asarray(wanted, np.float64), np.asarray(current, np.float64)):
        d = normalized(z @ s_new @ np.linalg.inv(s_old) @ zi)
        moved = np.abs(_apply(d, corners) - corners).max()
        out.append(None if moved <= EDIT_TOLERANCE_PX else d)
        shifts.append(moved)
    return out, np.asarray(shifts)


def edit_coverage(delta: np.ndarray, height: int, width: int, samples: int = 33) -> float:
    """Fraction of an output frame (``samples`` x ``samples`` points) that the edit ``delta``
    (output pixel y shows what the unedited output shows at ``delta^-1 y``) still fills with
    the unedited frame; points that map through the horizon count as empty."""
    ys, xs = np.meshgrid(np.linspace(0, height - 1, samples), np.linspace(0, width - 1, samples),
                         indexing="ij")
    pts = np.stack([xs.ravel(), ys.ravel(), np.ones(xs.size)], axis=-1)
    with np.errstate(all="ignore"):
        p = pts @ np.linalg.inv(delta).T
        x, y = p[:, 0] / p[:, 2], p[:, 1] / p[:, 2]
        inside = ((p[:, 2] > 0) & (x >= -0.5) & (x <= width - 0.5) & (y >= -0.5)
                  & (y <= height - 0.5))
    return float(inside.mean())


def edit_problem(delta: np.ndarray, height: int, width: int) -> str | None:
    """Why the path edit ``delta`` (:func:`path_edits`) would render a broken frame, or None:
    a degenerate homography (:func:`camflow_jax.geometry.checks.homography_problem`: a
    (nearly) singular smoothed path, a corner through the horizon), or one that leaves less
    than :data:`MIN_EDIT_COVERAGE` of the frame showing the picture (e.g. a path moved by
    1e6 px): such frames would be written black."""
    why = checks.homography_problem(delta, height, width)
    if why:
        return f"is degenerate (the edit it makes: {why}): the frame would render black"
    cover = edit_coverage(delta, height, width)
    if cover < MIN_EDIT_COVERAGE:
        return (f"would show the picture in only {100 * cover:.0f}% of the output frame (at "
                f"least {100 * MIN_EDIT_COVERAGE:.0f}% needed), the rest black: its edit moves a "
                f"frame corner by up to {_corner_shift(delta, height, width):.3g} px")
    return None


def _corner_shift(h: np.ndarray, height: int, width: int) -> float:
    """How far (px) the homography ``h`` moves the frame's farthest-moved corner."""
    corners = np.array([[0, 0], [width - 1, 0], [0, height - 1], [width - 1, height - 1]], float)
    with np.errstate(all="ignore"):
        return float(np.abs(_apply(h, corners) - corners).max())


def pair_problem(h: np.ndarray, height: int, width: int) -> str | None:
    """Why a pair homography (frame t -> t+1) cannot be a measured camera motion, or None:
    degenerate (:func:`camflow_jax.geometry.checks.homography_problem`), or moving a frame
    corner by more than the frame's diagonal (the two frames would share nothing, so no
    estimator measured it; e.g. an edited 1e9 px)."""
    why = checks.homography_problem(h, height, width)
    if why:
        return why
    diagonal = float(np.hypot(height, width))
    moved = _corner_shift(h, height, width)
    if moved > diagonal:
        return (f"moves the frame by {moved:.3g} px, more than its diagonal ({diagonal:.0f} px): "
                "consecutive frames that far apart share nothing, so no estimator measured it")
    return None


def edited_source_map(update, height: int, width: int, zoom: float, iterations: int,
                      delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The renderer's sampling maps (:func:`render.source_map`) for output pixels moved by the
    homography ``delta``: output pixel y samples where the unedited output shows
    ``delta^-1 y``."""

    update = np.asarray(update, np.float32)
    h, w = update.shape[:2]
    s = render_lib.source_offsets(update, zoom, iterations, pad=1)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float64)
    inv = np.linalg.inv(delta)
    den = inv[2, 0] * xs + inv[2, 1] * ys + inv[2, 2]
    px = (inv[0, 0] * xs + inv[0, 1] * ys + inv[0, 2]) / den
    py = (inv[1, 0] * xs + inv[1, 1] * ys + inv[1, 2]) / den
    lx = ((px + 0.5) * (w / width) - 0.5 + 1.0).astype(np.float32)
    ly = ((py + 0.5) * (h / height) - 0.5 + 1.0).astype(np.float32)
    off = cv2.remap(s, lx, ly, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    off = off * np.array([width / w, height / h], np.float32)
    return (px + off[..., 0]).astype(np.float32), (py + off[..., 1]).astype(np.float32)


# ----------------------------------------------------------------------------- encodings
def check_extension(path: str) -> str:
    """The motion file's encoding by extension (:data:`FORMATS`); ValueError otherwise."""
    return _kind(path)


def _kind(path: str) -> str:
    ext = os.path.splitext(str(path))[1].lower()
    if ext not in FORMATS:
        raise ValueError(f"{path}: a motion file is {', '.join(FORMATS)} (by extension), got "
                         f"{ext or 'no extension'}")
    return ext


def _meta(rec: MotionRecord) -> dict:
    return {"format": FORMAT_NAME, "version": VERSION, "num_frames": rec.num_frames,
            "frame_size": list(rec.frame_size), "fps": rec.fps, "estimator": rec.estimator,
            "zoom": rec.zoom, **({"source": rec.source} if rec.source is not None else {})}


def _rows(a, n):
    return [None] * n if a is None else [np.asarray(v).tolist() for v in a]


def write(path: str, rec: MotionRecord) -> None:
    """Writes ``rec`` as JSON, CSV or NPZ (by extension; NPZ also holds the dense flows)."""
    kind = _kind(path)
    n = rec.num_frames
    if kind == ".npz":
        arrays = {k: np.asarray(getattr(rec, k), np.float64) for k in
                  _MATRICES + ("pair_fit_rms_px", "correction_fit_rms_px", "coefficients",
                               "timestamps") if getattr(rec, k) is not None}
        if rec.flows is not None:
            arrays["flows"] = np.asarray(rec.flows, np.float32)
        meta = dict(_meta(rec), stats=rec.stats)
        np.savez_compressed(path, meta=np.str_(json.dumps(meta)), **arrays)
        return
    pairs = _rows(rec.pair_homography, n - 1) + [None]
    prms = _rows(rec.pair_fit_rms_px, n - 1) + [None]
    coef = _rows(rec.coefficients, n - 1) + [None]
    cols = {"pair_homography": pairs, "camera_path": _rows(rec.camera_path, n),
            "smoothed_path": _rows(rec.smoothed_path, n), "correction": _rows(rec.correction, n),
            "pair_fit_rms_px": prms, "correction_fit_rms_px": _rows(rec.correction_fit_rms_px, n),
            "time": _rows(rec.timestamps, n), "coefficients": coef}
    if kind == ".json":
        frames = [{"index": t, **{k: v[t] for k, v in cols.items()}} for t in range(n)]
        head = json.dumps(dict(_meta(rec), stats=rec.stats), indent=1, allow_nan=False)
        lines = [json.dumps(fr, allow_nan=False) for fr in frames]  # one line per frame
        with open(path, "w") as f:
            f.write(head[:-1].rstrip() + ',\n "frames": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n")
        return
    k = 0 if rec.coefficients is None else np.asarray(rec.coefficients).shape[1]
    header = ["frame", "time"] + [f"{m}_{i}{j}" for m in _MATRICES for i in range(3)
                                  for j in range(3)]
    header += ["pair_fit_rms_px", "correction_fit_rms_px"] + [f"coefficient_{i}" for i in range(k)]
    with open(path, "w", newline="") as f:
        for key, value in dict(_meta(rec), stats=rec.stats).items():
            f.write(f"# {key}: {json.dumps(value)}\n")
        wr = csv.writer(f)
        wr.writerow(header)
        for t in range(n):
            row = [t, _cell(cols["time"][t])]
            for m in _MATRICES:
                v = cols[m][t]
                row += [""] * 9 if v is None else [repr(float(x)) for x in np.ravel(v)]
            row += [_cell(prms[t]), _cell(cols["correction_fit_rms_px"][t])]
            row += [""] * k if coef[t] is None else [repr(float(x)) for x in coef[t]]
            wr.writerow(row)


def _whole(cell: str):
    """A CSV cell as an int when it is a whole number (``3``, ``3.0``), else the cell (None
    when empty)."""
    cell = cell.strip()
    if not cell:
        return None
    try:
        v = float(cell)
    except ValueError:
        return cell
    return int(v) if np.isfinite(v) and v == int(v) else cell


def _cell(v) -> str:
    return "" if v is None else repr(float(v))


class _Bad(ValueError):
    pass


def read(path: str) -> MotionRecord:
    """Reads and validates a motion file (any of :data:`FORMATS`). One-line ValueError for a
    damaged file, an unknown version, wrong shapes or frame counts, frame entries out of order
    (JSON ``index`` / CSV ``frame`` not 0..n-1), non-finite numbers. The working grid of
    ``flows`` is checked by the renderer, which knows the stabilizer settings."""
    kind = _kind(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"motion file not found: {path}")
    try:
        if kind == ".npz":
            rec = _read_npz(path)
        elif kind == ".json":
            with open(path, encoding="utf-8-sig") as f:  # a byte-order mark as in CSV
                rec = _from_doc(json.load(f))
        else:
            rec = _read_csv(path)
        _validate(rec)
    except _Bad as e:
        raise ValueError(f"{path}: {e}") from None
    except (KeyError, TypeError, *EXPECTED_ERRORS) as e:  # BadZipFile, JSONDecodeError, EOF...
        raise ValueError(describe_error(e, f"{path} is not a readable motion file (damaged or "
                                           "truncated?)")) from e
    return rec


def _check_meta(meta: dict) -> dict:
    if not isinstance(meta, dict):
        raise _Bad("not a motion file (no header)")
    version = meta.get("version")
    if version != VERSION:
        raise _Bad(f"unknown motion file version {version!r}; this camflow_jax reads version "
                   f"{VERSION}")
    size = meta.get("frame_size")
    if (not isinstance(size, list) or len(size) != 2
            or not all(isinstance(v, int) and v > 0 for v in size)):
        raise _Bad(f"frame_size must be [height, width], got {size!r}")
    n = meta.get("num_frames")
    if not isinstance(n, int) or n < 2:
        raise _Bad(f"num_frames must be an integer >= 2, got {n!r}")
    if meta.get("source") is not None:
        why = fingerprint.validate(meta["source"], n)
        if why:
            raise _Bad(f"source (the fingerprint of the exported video): {why}")
    return meta


def _array(v, what):
    if v is None:
        return None
    try:
        a = np.asarray(v, np.float64)
    except (TypeError, ValueError):
        raise _Bad(f"{what} must hold numbers") from None
    return a


def _stack(rows, what, n):
    """Per-frame values (None where absent) -> array, or None when all are absent; a partly
    missing column, or a frame whose entry has another shape than the others, is an error."""
    present = [r is not None for r in rows[:n]]
    if not any(present):
        return None
    if not all(present):
        raise _Bad(f"{what} is missing for frame {present.index(False)}")
    shapes = []
    for r in rows[:n]:
        try:
            shapes.append(np.shape(r))
        except ValueError:  # ragged nesting
            shapes.append(None)
    want = (3, 3) if what in _MATRICES else shapes[0]
    for t, sh in enumerate(shapes):
        if sh != want:
            got = "a ragged shape" if sh is None else f"shape {list(sh)}"
            raise _Bad(f"{what} at frame {t} has {got}, not {list(want)}")
    return _array(rows[:n], what)


def _check_order(indices, what: str) -> None:
    """Each frame entry's own number (JSON ``index``, CSV ``frame``) must be its position,
    0..n-1: entries swapped, repeated or missing would render the wrong frames."""
    for t, i in enumerate(indices):
        if i is None:
            raise _Bad(f"frame entry {t} has no {what} (every entry must say which frame it is)")
        if isinstance(i, bool) or not isinstance(i, int):
            raise _Bad(f"frame entry {t} has {what} {i!r}, not a whole number")
        if i != t:
            raise _Bad(f"frame entry {t} has {what} {i}, expected {t}: entries must list frames "
                       f"0..{len(indices) - 1} in order, each once")


def _record(meta, cols, flows=None) -> MotionRecord:
    n = meta["num_frames"]
    fps = meta.get("fps", 30.0)
    zoom = meta.get("zoom")
    return MotionRecord(
        frame_size=tuple(meta["frame_size"]), num_frames=n,
        fps=float(fps) if fps is not None else 30.0, estimator=str(meta.get("estimator") or ""),
        zoom=None if zoom is None else float(zoom), **cols, flows=flows,
        stats=meta.get("stats") or {}, source=meta.get("source"))


def _from_doc(doc) -> MotionRecord:
    meta = _check_meta(doc if isinstance(doc, dict) else None)
    if doc.get("format") != FORMAT_NAME:
        raise _Bad(f"not a motion file (format {doc.get('format')!r})")
    frames = doc.get("frames")
    n = meta["num_frames"]
    if not isinstance(frames, list) or len(frames) != n:
        raise _Bad(f"num_frames is {n} but the file lists "
                   f"{len(frames) if isinstance(frames, list) else 'no'} frames")
    if not all(isinstance(f, dict) for f in frames):
        raise _Bad("every entry of frames must be an object")
    known = {"index", "time", "coefficients", "pair_fit_rms_px", "correction_fit_rms_px",
             *_MATRICES}
    for t, f in enumerate(frames):
        extra = set(f) - known
        if extra:
            raise _Bad(f"frame {t} has unknown keys {sorted(extra)}")
    _check_order([f.get("index") for f in frames], "index")
    get = lambda k: [f.get(k) for f in frames]  # noqa: E731
    cols = {m: _stack(get(m), m, n) for m in ("camera_path", "smoothed_path", "correction")}
    cols["pair_homography"] = _stack(get("pair_homography"), "pair_homography", n - 1)
    cols["pair_fit_rms_px"] = _stack(get("pair_fit_rms_px"), "pair_fit_rms_px", n - 1)
    cols["coefficients"] = _stack(get("coefficients"), "coefficients", n - 1)
    cols["correction_fit_rms_px"] = _stack(get("correction_fit_rms_px"), "correction_fit_rms_px", n)
    cols["timestamps"] = _stack(get("time"), "time", n)
    return _record(meta, cols)


def _read_csv(path) -> MotionRecord:
    # utf-8-sig: a byte-order mark (spreadsheets save one) is not part of the first line (with
    # it the header comment was read as a data row: "has 21 rows" where the file has 20)
    with open(path, newline="", encoding="utf-8-sig") as f:
        text = f.read()
    meta, body = {}, []
    for line in text.splitlines():
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if not sep:
                raise _Bad(f"header line {line!r} is not '# key: value'")
            meta[key.strip()] = json.loads(value)
        elif line.strip():
            body.append(line)
    meta = _check_meta(meta)
    rows = list(csv.reader(io.StringIO("\n".join(body))))
    if not rows:
        raise _Bad("no column header")
    header, rows = rows[0], rows[1:]
    n = meta["num_frames"]
    if len(rows) != n:
        raise _Bad(f"num_frames is {n} but the file has {len(rows)} rows")
    if len(set(header)) != len(header):
        raise _Bad("repeated column names")
    idx = {name: i for i, name in enumerate(header)}
    known = {"frame", "time", "pair_fit_rms_px", "correction_fit_rms_px"}
    known |= {f"{m}_{i}{j}" for m in _MATRICES for i in range(3) for j in range(3)}
    coef_names = sorted((c for c in header if c.startswith("coefficient_")),
                        key=lambda c: int(c.split("_")[1]) if c.split("_")[1].isdigit() else -1)
    unknown = set(header) - known - set(coef_names)
    if unknown or any(not c.split("_")[1].isdigit() for c in coef_names):
        raise _Bad(f"unknown columns {sorted(unknown) or coef_names}")
    for t, r in enumerate(rows):
        if len(r) != len(header):
            raise _Bad(f"row {t} has {len(r)} cells, the header {len(header)}")
    if "frame" not in idx:
        raise _Bad("no frame column (every row must say which frame it is)")
    _check_order([_whole(r[idx["frame"]]) for r in rows], "frame")

    def num(cell, what):
        if cell.strip() == "":
            return None
        try:
            return float(cell)
        except ValueError:
            raise _Bad(f"{what}: {cell!r} is not a number") from None

    def column(names, what, count):
        if not all(c in idx for c in names):
            if any(c in idx for c in names):
                raise _Bad(f"{what}: some of its columns are missing")
            return None
        vals = []
        for t, r in enumerate(rows[:count]):
            cells = [num(r[idx[c]], f"{what} at frame {t}") for c in names]
            if all(v is None for v in cells):
                vals.append(None)
            elif any(v is None for v in cells):
                raise _Bad(f"{what} at frame {t} has empty cells")
            else:
                vals.append(cells)
        return vals

    cols = {}
    for m in _MATRICES:
        count = n - 1 if m == "pair_homography" else n
        vals = column([f"{m}_{i}{j}" for i in range(3) for j in range(3)], m, count)
        if vals is not None:
            vals = [None if v is None else np.reshape(v, (3, 3)) for v in vals]
        cols[m] = None if vals is None else _stack(vals, m, count)
    for name, count in (("pair_fit_rms_px", n - 1), ("correction_fit_rms_px", n), ("time", n)):
        vals = column([name], name, count)
        arr = None if vals is None else _stack(vals, name, count)
        cols["timestamps" if name == "time" else name] = None if arr is None else arr[:, 0]
    vals = column(coef_names, "coefficients", n - 1) if coef_names else None
    cols["coefficients"] = None if vals is None else _stack(vals, "coefficients", n - 1)
    return _record(meta, cols)


def _read_npz(path) -> MotionRecord:
    with np.load(path, allow_pickle=False) as z:
        keys = set(z.files)
        if "meta" not in keys:  # version 0: what --save-motion wrote before this schema
            if "flows" not in keys:
                raise _Bad("not a motion file (neither a header nor flows)")
            flows = z["flows"].astype(np.float32)
            size = [int(v) for v in z["frame_size"]]
            stats = json.loads(str(z["stats"])) if "stats" in keys else {}
            if flows.ndim != 4 or flows.shape[-1] != 2 or len(size) != 2:
                raise _Bad(f"flows must be [T-1, h, w, 2], got {flows.shape}")
            return MotionRecord(frame_size=tuple(size), num_frames=flows.shape[0] + 1,
                                fps=float(z["fps"]), estimator=str(z["estimator"]),
                                flows=flows, stats=stats, version=0)
        meta = _check_meta(json.loads(str(z["meta"])))
        if meta.get("format") != FORMAT_NAME:
            raise _Bad(f"not a motion file (format {meta.get('format')!r})")
        known = {"meta", "flows", "pair_fit_rms_px", "correction_fit_rms_px", "coefficients",
                 "timestamps", *_MATRICES}
        if keys - known:
            raise _Bad(f"unknown arrays {sorted(keys - known)}")
        cols = {k: (z[k].astype(np.float64) if k in keys else None)
                for k in known - {"meta", "flows"}}
        flows = z["flows"].astype(np.float32) if "flows" in keys else None
    return _record(meta, cols, flows)


def _validate(rec: MotionRecord) -> None:
    n = rec.num_frames
    shapes = {"pair_homography": (n - 1, 3, 3), "camera_path": (n, 3, 3),
              "smoothed_path": (n, 3, 3), "correction": (n, 3, 3),
              "pair_fit_rms_px": (n - 1,), "correction_fit_rms_px": (n,), "timestamps": (n,)}
    for name, shape in shapes.items():
        a = getattr(rec, name)
        if a is None:
            continue
        if a.shape != shape:
            raise _Bad(f"{name} must have shape {list(shape)} for {n} frames, got {list(a.shape)}")
        if not np.all(np.isfinite(a)):
            bad = int(np.nonzero(~np.isfinite(a.reshape(len(a), -1)).all(axis=1))[0][0])
            raise _Bad(f"{name} has a non-finite value (NaN or infinity) at frame {bad}")
    for name in _MATRICES:
        a = getattr(rec, name)
        if a is not None:
            det = np.linalg.det(a)
            if np.any(np.abs(det) < 1e-12):
                raise _Bad(f"{name} is singular at frame {int(np.argmax(np.abs(det) < 1e-12))}")
    height, width = rec.frame_size
    if rec.pair_homography is not None:
        for t, h in enumerate(rec.pair_homography):
            why = pair_problem(h, height, width)
            if why:
                raise _Bad(f"pair_homography at frame {t} {why}")
    if rec.coefficients is not None:
        c = rec.coefficients
        if c.ndim != 2 or c.shape[0] != n - 1:
            raise _Bad(f"coefficients must be [{n - 1}, K], got {list(c.shape)}")
        if not np.all(np.isfinite(c)):
            raise _Bad("coefficients have a non-finite value (NaN or infinity)")
    if rec.flows is not None:
        f = rec.flows
        if f.ndim != 4 or f.shape[0] != n - 1 or f.shape[-1] != 2:
            raise _Bad(f"flows must be [{n - 1}, h, w, 2], got {list(f.shape)}")
        if not np.all(np.isfinite(f)):
            raise _Bad("flows contain non-finite values")
        diagonal = float(np.hypot(*f.shape[1:3]))
        moved = np.hypot(f[..., 0], f[..., 1]).max(axis=(1, 2))
        if moved.size and moved.max() > diagonal:
            t = int(np.argmax(moved))
            raise _Bad(f"flows at frame {t} move a pixel by {moved[t]:.3g} working px, more than the "
                       f"working grid's diagonal ({diagonal:.0f} px): consecutive frames that far "
                       "apart share nothing, so no estimator measured it")
    if rec.zoom is not None and not (np.isfinite(rec.zoom) and rec.zoom >= 1):
        raise _Bad(f"zoom must be a finite number >= 1, got {rec.zoom}")
    if not (np.isfinite(rec.fps) and rec.fps > 0):
        raise _Bad(f"fps must be a positive number, got {rec.fps}")
    if rec.version >= 1 and rec.smoothed_path is None and not rec.has_motion:
        raise _Bad("holds neither a smoothed_path nor per-pair motion")
