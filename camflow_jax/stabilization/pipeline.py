"""SteadyFlow-style stabilization pipeline: estimate -> profiles -> smooth -> render.

Stages (docs/design.md, "Stabilization"; paper §"Video Stabilization"), with only the estimator swappable:

1. ``estimate_motion``: for each consecutive frame pair, the estimator's forward flow F_t on a
   frame shrunk to at most ``estimate_max_side`` pixels, resampled to the working grid
   (``work_scale`` of the frame, long side at most ``max_work_side``), then
   discontinuity-masked and completed (below). Only these small flows are kept; frames are
   streamed and dropped.
2. ``plan_stabilization``: profiles C (sum of flows at fixed pixels), adaptive windows, Jacobi
   smoothing to P (``profiles.py``), update fields B = P - C, and the clip's zoom.
3. ``render``: streams the frames a second time and warps each by its B_t (``render.py``).

Memory: only working-resolution fields are kept, h * w * 8 bytes per frame for the flows and
as much for B (e.g. 92 KB per frame each at the default 144 x 80 grid of a 576 x 320 video,
295 KB at the 256 x 144 cap reached by 1080p). With ``spill_dir`` both live in memmaps on
disk, and planning works on overlapping temporal segments (:func:`update_fields`), so RAM is
bounded independently of the clip length.

Discontinuity masking and completion (SteadyFlow's spatial stage): pixels where the flow
jumps by more than ``gradient_threshold`` working pixels between neighbours (depth edges,
moving-object boundaries, dense-flow failures; a non-finite vector is masked and compared with
its neighbours as zero motion) are masked, dilated by one pixel, and filled by
normalized convolution (Gaussian, ``fill_sigma`` working pixels; a 4x wider pass for larger
holes; the mean valid flow as last resort). Smooth fields (homographies, basis combinations)
pass unchanged. SteadyFlow's temporal outlier test is not implemented.

Every parameter lives in :class:`StabilizerConfig` and is the same for every estimator.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import os
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Iterator

import cv2
import numpy as np

from camflow_jax.geometry.host import resize_flow
from camflow_jax.io import interrupt
from camflow_jax.stabilization import motion_file
from camflow_jax.stabilization import profiles as profiles_lib
from camflow_jax.stabilization import render as render_lib
from camflow_jax.stabilization.motion_file import edited_source_map

__all__ = ["StabilizerConfig", "ClipMotion", "Plan", "ahead", "working_size", "estimation_size", "smoothing_for_clip",
           "complete_discontinuities", "estimate_motion", "fill_failed_pairs", "update_fields", "plan_stabilization",
           "render", "stabilize", "zoom_from_crop", "fallback_note", "MAX_BORDER_FRACTION"]


#: Good pairs on each side whose mean fills a run of failed pairs (:func:`fill_failed_pairs`).
FILL_NEIGHBOURS = 8


@dataclasses.dataclass(frozen=True)
class StabilizerConfig:
    """All stabilization settings (fixed across estimators so only the estimator differs).

    crop: 'auto' (smallest zoom hiding the borders over the clip, at most ``max_zoom``),
      'none' (zoom 1, borders filled per ``border``), or a float in (0, 1]: the kept fraction of
      each dimension (zoom = 1 / crop). Except with 'none', frames that the zoom cannot cover
      get their update field scaled down (``render.fit_updates_to_zoom``): no black border.
    """

    smoothing: profiles_lib.SmoothingParams = profiles_lib.SmoothingParams()
    work_scale: float = 0.25
    max_work_side: int = 256
    #: the longer side (pixels) of the frames the estimator sees (never upscaled): 480 since
    #: 28 Nov 2026 (640 before), chosen on 640x480 clips (docs/stabilization.md, "Wall time"):
    #: SIFT + RANSAC at 480 takes about half the time of 640 and left no more shake on the dark,
    #: noisy and the blurred clip; 320 was faster still but made the 288x384 dark, noisy clip
    #: far shakier than its input
    estimate_max_side: int = 480
    mask_discontinuities: bool = True
    gradient_threshold: float = 0.5
    fill_sigma: float = 3.0
    fixed_point_iterations: int = 4
    crop: str | float = "auto"
    max_zoom: float = 1.5
    border: str = "black"
    #: failed frame pairs in runs of at most this many are filled from their neighbours
    #: (:func:`fill_failed_pairs`); a longer run keeps the identity motion, and the report says so
    max_fill_gap: int = 30

    def __post_init__(self):
        if not 0 < self.work_scale <= 1:
            raise ValueError(f"work_scale must be in (0, 1], got {self.work_scale}")
        if self.max_work_side < 8 or self.estimate_max_side < 8:
            raise ValueError("max_work_side and estimate_max_side must be >= 8")
        if not (np.isfinite(self.max_zoom) and self.max_zoom >= 1):
            raise ValueError(f"max_zoom must be a finite number >= 1, got {self.max_zoom}")
        if not (isinstance(self.max_fill_gap, int) and self.max_fill_gap >= 0):
            raise ValueError(f"max_fill_gap must be an integer >= 0, got {self.max_fill_gap!r}")
        if self.border not in render_lib.BORDERS:
            raise ValueError(f"border must be one of {sorted(render_lib.BORDERS)}, got "
                             f"{self.border!r}")
        zoom_from_crop(self.crop)  # validates

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


#: The smallest crop ratio: a zoom of 100x, the largest ``--max-zoom`` (a ratio of 0.0001
#: zoomed 10000x and rendered every frame as one flat colour, with no word).
MIN_CROP = 0.01


def zoom_from_crop(crop) -> float | None:
    """Zoom for a fixed crop setting; None for 'auto'. Raises ValueError on bad values."""
    if isinstance(crop, str):
        if crop == "auto":
            return None
        if crop == "none":
            return 1.0
        try:
            crop = float(crop)
        except ValueError:
            raise ValueError(f"crop must be 'auto', 'none' or a ratio in (0, 1], got {crop!r}")
    if not (isinstance(crop, (int, float)) and 0 < crop <= 1):
        raise ValueError(f"crop ratio must be in (0, 1], got {crop!r}")
    if crop < MIN_CROP:  # 0.0001: a 10000x zoom, every frame one flat colour
        raise ValueError(f"crop ratio {crop:g} is a {1 / crop:g}x zoom: the ratio must be at least {MIN_CROP:g} "
                         f"(a zoom of at most {1 / MIN_CROP:g}x, the largest max_zoom)")
    return 1.0 / float(crop)


def _scaled_size(height, width, scale, max_side):
    s = min(scale, max_side / max(height, width))
    return max(2, int(round(height * s))), max(2, int(round(width * s)))


def working_size(height: int, width: int, config: StabilizerConfig) -> tuple[int, int]:
    """Working (profile) grid ``(h, w)`` for frames ``height x width``."""
    return _scaled_size(height, width, config.work_scale, config.max_work_side)


def estimation_size(height: int, width: int, config: StabilizerConfig) -> tuple[int, int]:
    """Size ``(h, w)`` the estimator sees (never upscaled)."""
    return _scaled_size(height, width, 1.0, config.estimate_max_side)


def _normalized_fill(flow, valid, sigma):
    ksize = int(2 * np.ceil(3 * sigma) + 1)
    num = cv2.GaussianBlur(flow * valid[..., None], (ksize, ksize), sigma,
                           borderType=cv2.BORDER_CONSTANT)
    den = cv2.GaussianBlur(valid, (ksize, ksize), sigma, borderType=cv2.BORDER_CONSTANT)
    ok = den > 1e-3
    return num / np.maximum(den, 1e-3)[..., None], ok


def complete_discontinuities(flow, gradient_threshold: float = 0.5,
                             sigma: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """Masks flow discontinuities and fills them from their neighbourhood (module doc).

    Returns ``(completed flow [h, w, 2], mask [h, w] bool: True where the flow was replaced)``.
    """
    flow = np.asarray(flow, np.float32)
    finite = np.isfinite(flow[..., 0]) & np.isfinite(flow[..., 1])
    f = flow.copy() if finite.all() else np.where(finite[..., None], flow, 0.0).astype(np.float32)
    u, v = f[..., 0], f[..., 1]
    jump = np.zeros(f.shape[:2], bool)
    # the larger of the two components' jumps, component by component: a max over the last
    # axis of length 2 is ~10x slower than np.maximum of the two
    dx = np.maximum(np.abs(np.diff(u, axis=1)), np.abs(np.diff(v, axis=1))) > gradient_threshold
    dy = np.maximum(np.abs(np.diff(u, axis=0)), np.abs(np.diff(v, axis=0))) > gradient_threshold
    jump[:, :-1] |= dx
    jump[:, 1:] |= dx
    jump[:-1] |= dy
    jump[1:] |= dy
    bad = jump | ~finite
    if not bad.any():
        return f, bad
    bad = cv2.dilate(bad.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
    valid = (~bad).astype(np.float32)
    if not valid.any():
        return np.zeros_like(f), bad
    out = f.copy()
    fill, ok = _normalized_fill(f, valid, sigma)
    out[bad & ok] = fill[bad & ok]
    rest = bad & ~ok
    if rest.any():
        fill2, ok2 = _normalized_fill(f, valid, 4 * sigma)
        out[rest & ok2] = fill2[rest & ok2]
        rest &= ~ok2
        out[rest] = f[valid > 0].mean(axis=0)
    return out, bad


@dataclasses.dataclass
class ClipMotion:
    """Estimated motion of a clip: forward flows on the working grid (working pixels). (One pair's
    motion is :class:`camflow_jax.estimators.base.Motion`.)"""

    flows: np.ndarray            # [T-1, h, w, 2] float32
    frame_size: tuple[int, int]  # (H, W) of the input frames
    fps: float = 30.0
    estimator: str = ""
    stats: dict = dataclasses.field(default_factory=dict)
    masked_fraction: np.ndarray | None = None  # [T-1]
    #: [T-1, K] the estimator's basis coefficients per pair (camflow), or None
    coefficients: np.ndarray | None = None

    @property
    def num_frames(self) -> int:
        return self.flows.shape[0] + 1

    def save(self, path: str) -> None:
        """Writes a motion file (:mod:`.motion_file`, the one schema; ``.npz`` keeps the flows
        exactly) that :meth:`load` reads back (skip estimation on re-runs)."""

        motion_file.write(str(path), motion_file.MotionRecord(
            frame_size=tuple(int(v) for v in self.frame_size), num_frames=self.num_frames,
            fps=float(self.fps), estimator=self.estimator, flows=self.flows,
            stats=dict(self.stats or {}), coefficients=self.coefficients))

    @classmethod
    def load(cls, path: str) -> "ClipMotion":
        """The dense motion of an ``.npz`` motion file (:func:`.motion_file.read` validates)."""

        rec = motion_file.read(str(path))
        if rec.flows is None:
            raise ValueError(f"{path} holds no dense motion (flows): only .npz motion files do")
        return cls(rec.flows, tuple(rec.frame_size), rec.fps, rec.estimator, rec.stats,
                   coefficients=rec.coefficients)


def estimate_motion(frames: Iterable[np.ndarray], estimator: Callable, config: StabilizerConfig,
                    fps: float = 30.0, progress: Callable | None = None,
                    spill_dir: str | None = None) -> ClipMotion:
    """Pass 1: per-pair flows at the working resolution (frames are not kept).

    ``progress`` wraps the frame iterable (e.g. a tqdm partial) when given. ``spill_dir``: the
    flows are appended to a file there and returned as a read-only ``np.memmap`` (RAM stays
    flat however long the clip; the caller owns the folder).
    """
    it = progress(frames) if progress else frames
    flows, masked = [], []
    path = os.path.join(spill_dir, "flows.f32") if spill_dir else None
    spill = open(path, "wb") if path else None
    prev, size, count = None, None, 0
    batch = max(1, int(getattr(estimator, "batch_size", 1) or 1))  # pairs per estimator call
    pending = []  # frame pairs waiting for a batch

    # Host threads, as many as the estimator's own (feature estimators: `workers`; a model's
    # XLA program already keeps the cores busy, and more threads measured slower there: none).
    # Frames are decoded and resized ahead in one thread, and each flow is resampled to the
    # working grid in the pool while the estimator measures the next pairs.
    workers = max(1, int(getattr(estimator, "workers", 1) or 1))
    pool = ThreadPoolExecutor(workers, thread_name_prefix="working-size") if workers > 1 else None
    resampled: collections.deque = collections.deque()  # futures of (flow, masked share), in pair order
    h = w = None

    def to_working(f):  # a pair's flow at the working size, and the share of it masked
        f = resize_flow(f, h, w)
        if not config.mask_discontinuities:
            return f, 0.0
        f, bad = complete_discontinuities(f, config.gradient_threshold, config.fill_sigma)
        return f, float(bad.mean())

    def collect(wait: bool) -> None:
        """Stores the resampled flows that are ready, in order (``wait``: all of them)."""
        nonlocal count
        while resampled and (wait or len(resampled) > 4 * workers or resampled[0].done()):
            f, bad = resampled.popleft().result()
            masked.append(bad)
            if spill is not None:
                spill.write(np.ascontiguousarray(f, np.float32).tobytes())
            else:
                flows.append(f)
            count += 1

    def flush():
        done = estimator.many(pending) if len(pending) > 1 else [estimator(*pending[0])]
        pending.clear()
        for f in done:
            if pool is not None:
                resampled.append(pool.submit(to_working, f))
            else:  # here and now, as a finished future
                resampled.append(Future())
                resampled[-1].set_result(to_working(f))
        collect(wait=False)

    def sized(frames_in):  # (frame size, the frame at the estimation size), checked
        size = None
        for frame in frames_in:
            frame = np.asarray(frame)
            if frame.ndim != 3 or frame.shape[-1] != 3:
                raise ValueError(f"frames must be RGB [H, W, 3], got shape {frame.shape}")
            if size is None:
                size = frame.shape[:2]
                he, we = estimation_size(*size, config)
            elif frame.shape[:2] != size:
                raise ValueError(f"frame size changed from {size} to {frame.shape[:2]}")
            yield size, (frame if (he, we) == size else cv2.resize(frame, (we, he), interpolation=cv2.INTER_AREA))

    source = ahead(sized(it), max(2, batch)) if workers > 1 else sized(it)
    try:
        for size, small in source:
            interrupt.check()  # SIGINT / SIGTERM from the command line: stop at the next frame
            if h is None:
                h, w = working_size(*size, config)
            if prev is not None:
                pending.append((prev, small))
                if len(pending) >= batch:
                    flush()
            prev = small
        if pending:
            flush()
        collect(wait=True)
    finally:
        source.close()  # an error here stops the decoding thread at once
        if spill is not None:
            spill.close()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    if count < 1:
        raise ValueError("stabilization needs at least 2 frames")
    if path:
        stacked = np.memmap(path, np.float32, "r+", shape=(count, h, w, 2))
    else:
        stacked = np.stack(flows).astype(np.float32)
    stats = estimator.stats() if hasattr(estimator, "stats") else {}
    coefficients = _coefficients(getattr(estimator, "coefficients", None), count)
    failed = sorted({int(i) for i in getattr(estimator, "failed_pairs", ()) if 0 <= int(i) < count})
    if failed and len(failed) < count:
        # the coefficients stay zeros there: they are the model's, and it measured nothing
        filled, left = fill_failed_pairs(stacked, failed, config.max_fill_gap)
        stats.update(interpolated=len(filled), identity=len(left))
    if path:
        stacked.flush()
        stacked = np.memmap(path, np.float32, "r", shape=(count, h, w, 2))
    return ClipMotion(stacked, tuple(size), fps,
                  getattr(estimator, "name", type(estimator).__name__), stats,
                  np.array(masked), coefficients)


def fill_failed_pairs(values, failed, max_gap: int, neighbours: int = FILL_NEIGHBOURS) -> tuple[list[int], list[int]]:
    """Fills the failed frame pairs of ``values`` (``[T-1, ...]``: flows, or coefficients) in
    place from the good pairs around them, and returns ``(filled, left)``: the indices filled,
    and those left as they were (zeros: the identity motion).

    Each run of consecutive failed pairs gets the mean of up to ``neighbours`` good pairs on
    each side of it (one side at the ends of the clip). A run longer than ``max_gap`` pairs is
    left (a motion guessed over that long would be a guess), and so is everything when no pair
    is good. The mean keeps the camera's slow motion (a pan), which the identity drops as a
    jump in the camera path, and averages the shake of the pairs around it out
    (docs/stabilization.md, "When an estimator fails", compares it with the identity and with
    fewer neighbours)."""
    n = len(values)
    bad = np.zeros(n, bool)
    bad[np.asarray(list(failed), int)] = True
    good = np.flatnonzero(~bad)
    filled, left = [], []
    k = 0
    while k < n:
        if not bad[k]:
            k += 1
            continue
        end = k
        while end < n and bad[end]:
            end += 1
        run = list(range(k, end))
        around = np.concatenate([good[good < k][-neighbours:], good[good >= end][:neighbours]])
        if len(run) > max_gap or around.size == 0:
            left += run
        else:
            mean = np.mean(np.stack([np.asarray(values[i], np.float64) for i in around]), axis=0)
            for m in run:
                values[m] = mean
            filled += run
        k = end
    return filled, left


def _coefficients(per_pair, count: int) -> np.ndarray | None:
    """``[count, K]`` from an estimator's per-pair coefficients (None entries, failed pairs,
    become zeros: the identity motion used there), or None when there are none."""
    if not per_pair or len(per_pair) != count or all(c is None for c in per_pair):
        return None
    k = next(len(c) for c in per_pair if c is not None)
    return np.stack([np.zeros(k) if c is None else np.asarray(c, np.float64) for c in per_pair])


@dataclasses.dataclass
class Plan:
    """Everything needed to render: update fields B_t (working pixels) and the zoom.

    The profiles themselves are not kept (memory); C = ``profiles.accumulate_profiles(flows)``
    and P = C + B recover them for short clips.
    """

    updates: np.ndarray          # B [T, h, w, 2] (array or memmap)
    radii: np.ndarray            # [T] int
    zoom: float
    frame_zooms: np.ndarray | None  # [T] zoom each frame alone would need (auto crop)
    frame_size: tuple[int, int]
    config: StabilizerConfig
    #: Where the motion came from, for messages ("loaded from m.npz" with --load-motion).
    motion_origin: str = "estimated in pass 1"
    #: Per frame, None or an output-space homography applied after the correction (an edited
    #: camera path: :func:`camflow_jax.stabilization.motion_file.path_edits`).
    edits: list | None = None
    #: [T] factors the update fields were scaled by to fit the zoom (1 = untouched), or None.
    update_scale: np.ndarray | None = None
    #: Filled by :func:`render`: ``(frame, border fraction it would have had)`` for each frame
    #: rendered with the zoom alone because its correction would have left it mostly black.
    fallbacks: list = dataclasses.field(default_factory=list)


#: A frame whose correction would leave more than this fraction of it without picture (a
#: degenerate correction: e.g. a 1e9 px motion) is rendered with the zoom alone (:func:`render`).
MAX_BORDER_FRACTION = 0.5


def update_fields(flows, params: profiles_lib.SmoothingParams, threshold: float,
                  out: np.ndarray | None = None, time_chunk: int = 512,
                  column_chunk: int = 16384) -> tuple[np.ndarray, np.ndarray]:
    """B = P - C for flows ``[T-1, h, w, 2]`` in bounded memory -> ``(B [T, h, w, 2], radii)``.

    Frames are processed in segments of ``time_chunk`` with ``(iterations + 1) * max_radius``
    frames of context on each side: the radii need +-max_radius of context and the Jacobi
    iterations +-iterations * max_radius, so each segment's result equals the whole-clip
    computation. Profiles are accumulated per segment relative to the segment's first frame
    (B is unchanged by a constant offset), so float32 keeps sub-pixel accuracy on long pans.
    ``out``: where to write B (e.g. a memmap); allocated when None.
    """
    n = flows.shape[0]
    t_len, (h, w) = n + 1, flows.shape[1:3]
    if out is None:
        out = np.empty((t_len, h, w, 2), np.float32)
    radii = np.empty(t_len, np.int32)
    r_max = params.max_radius
    margin = (params.iterations + 1) * r_max
    ys, xs = profiles_lib.subgrid(h, w)
    m = h * w * 2
    for a in range(0, t_len, time_chunk):
        interrupt.check()
        b = min(t_len, a + time_chunk)
        s0, s1 = max(0, a - margin), min(t_len, b + margin)
        seg = flows[s0:s1 - 1]  # flows between the segment's frames (a view for memmaps)
        sub = np.asarray(seg[:, ys][:, :, xs], np.float64)
        sub = np.concatenate([np.zeros((1,) + sub.shape[1:]), np.cumsum(sub, axis=0)])
        rad = profiles_lib.adaptive_radii(sub, r_max, params.min_radius, threshold,
                                          num_points=None)
        radii[a:b] = rad[a - s0:b - s0]
        flat = seg.reshape(s1 - 1 - s0, m)
        dst = out[a:b].reshape(b - a, m)
        for c0 in range(0, m, column_chunk):
            cols = np.asarray(flat[:, c0:c0 + column_chunk], np.float64)
            c = np.concatenate([np.zeros((1, cols.shape[1])), np.cumsum(cols, axis=0)])
            c = c.astype(np.float32)
            p = profiles_lib.smooth_profiles(c, rad, params.strength, params.iterations,
                                             extrapolate_ends=(s0 == 0, s1 == t_len),
                                             max_radius=r_max, column_chunk=column_chunk)
            dst[:, c0:c0 + column_chunk] = (p - c)[a - s0:b - s0]
    if isinstance(out, np.memmap):
        out.flush()
    return out, radii


def smoothing_for_clip(params: profiles_lib.SmoothingParams,
                       num_frames: int) -> profiles_lib.SmoothingParams:
    """``params`` with the window radius clamped to what a ``num_frames`` clip allows
    (``num_frames - 1``: a larger window sees no more frames). Unclamped, a huge radius costs
    time and memory in proportion to it (the end extensions are 3 radii long)."""
    limit = max(1, int(num_frames) - 1)
    if params.max_radius <= limit:
        return params
    return dataclasses.replace(params, max_radius=limit, min_radius=min(params.min_radius, limit))


def _reserve(path: str) -> None:
    """Allocates the whole (sparse) memmap file ``path`` now: on a full disk the writes through
    the mapping would kill the process with SIGBUS; reserved here, the disk's fullness is an
    OSError naming the file."""
    if not hasattr(os, "posix_fallocate"):
        return
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return  # file systems without it: the mapping is written as before
        raise OSError(e.errno, e.strerror, path) from None
    finally:
        os.close(fd)


def plan_stabilization(motion: ClipMotion, config: StabilizerConfig,
                       spill_dir: str | None = None) -> Plan:
    """Between the two streams: profiles, smoothing, update fields, zoom.

    ``spill_dir``: the update fields are written to a memmap there instead of RAM.
    """
    sp = smoothing_for_clip(config.smoothing, motion.num_frames)
    h, w = motion.flows.shape[1:3]
    threshold = sp.motion_threshold * float(np.hypot(h, w))  # fraction of the diagonal
    out = None
    if spill_dir:
        path = os.path.join(spill_dir, "updates.npy")
        out = np.lib.format.open_memmap(path, "w+", np.float32, (motion.num_frames, h, w, 2))
        _reserve(path)
    b, radii = update_fields(motion.flows, sp, threshold, out)
    H, W = motion.frame_size
    zoom = zoom_from_crop(config.crop)
    frame_zooms = None
    if zoom is None:
        zoom, frame_zooms = render_lib.auto_zoom(b, H, W, config.max_zoom,
                                                 config.fixed_point_iterations)
    scale = None
    if config.crop != "none":
        # auto below the cap: every frame fits (frame_zooms says so); at the cap, a frame over
        # it also reads max_zoom there, so the need is measured again above the cap
        need = frame_zooms if frame_zooms is not None and zoom < config.max_zoom else None
        scale = render_lib.fit_updates_to_zoom(b, H, W, zoom, config.fixed_point_iterations,
                                               need=need)
    return Plan(b, radii, float(zoom), frame_zooms, (H, W), config, update_scale=scale)


def render(frames: Iterable[np.ndarray], plan: Plan,
           progress: Callable | None = None) -> Iterator[tuple[np.ndarray, np.ndarray, float]]:
    """Pass 2: yields ``(input frame, stabilized frame, border fraction)`` per frame."""
    it = progress(frames) if progress else frames
    cfg = plan.config
    n = plan.updates.shape[0]
    t = -1
    for t, frame in enumerate(it):
        interrupt.check()  # SIGINT / SIGTERM from the command line: stop at the next frame
        if t >= n:
            raise ValueError(f"the input has more frames than the {n} of the motion "
                             f"{plan.motion_origin}")
        frame = np.asarray(frame)
        H, W = frame.shape[:2]
        if (H, W) != tuple(plan.frame_size):
            raise ValueError(f"frame {t} is {W}x{H}, the plan is for "
                             f"{plan.frame_size[1]}x{plan.frame_size[0]}")
        edit = None if plan.edits is None else plan.edits[t]
        if edit is None:
            mx, my = render_lib.source_map(plan.updates[t], H, W, plan.zoom,
                                           cfg.fixed_point_iterations)
        else:

            mx, my = edited_source_map(plan.updates[t], H, W, plan.zoom,
                                       cfg.fixed_point_iterations, edit)
        finite = bool(np.isfinite(mx).all() and np.isfinite(my).all())
        border = render_lib.border_fraction(mx, my) if finite else 1.0
        if border > MAX_BORDER_FRACTION:
            # Never a black frame: a correction that would leave most of the frame without
            # picture is degenerate (never a camera motion); this frame gets the zoom alone,
            # which samples inside the input, and the caller reports it (plan.fallbacks).
            plan.fallbacks.append((t, border))
            mx, my = render_lib.source_map(np.zeros(plan.updates.shape[1:], np.float32), H, W, plan.zoom,
                                           cfg.fixed_point_iterations)
            border = render_lib.border_fraction(mx, my)
        out = cv2.remap(frame, mx, my, cv2.INTER_LINEAR,
                        borderMode=render_lib.BORDERS[cfg.border], borderValue=0)
        yield frame, out, border
    if t + 1 != n:
        raise ValueError(f"the input has {t + 1} frames but the motion {plan.motion_origin} "
                         f"covers {n}")


def fallback_note(fallbacks: list, num_frames: int) -> str | None:
    """The warning for the frames :func:`render` gave the zoom alone (``plan.fallbacks``), or
    None when there were none."""
    if not fallbacks:
        return None
    shown = ", ".join(f"{t} ({100 * b:.0f}%)" for t, b in fallbacks[:5])
    more = f" and {len(fallbacks) - 5} more" if len(fallbacks) > 5 else ""
    return (f"{len(fallbacks)} of {num_frames} frames would have been mostly black (a degenerate "
            f"correction; frame (black share): {shown}{more}): they were written unstabilized, "
            "with the zoom alone")


def stabilize(frames, estimator: Callable, config: StabilizerConfig | None = None,
              fps: float = 30.0) -> tuple[list[np.ndarray], Plan, ClipMotion]:
    """In-memory convenience: stabilizes a sequence (list / array / re-iterable) of RGB frames."""
    config = config or StabilizerConfig()
    motion = estimate_motion(frames, estimator, config, fps)
    plan = plan_stabilization(motion, config)
    return [out for _, out, _ in render(frames, plan)], plan, motion


def ahead(items: Iterable, depth: int = 2) -> Iterator:
    """The items of ``items`` in order, made by a background thread up to ``depth`` items ahead
    of the consumer: the rendering of frame t+1 overlaps the encoding of frame t (OpenCV, numpy
    and the encoder release the GIL in their work). An exception of ``items`` is raised here, in
    its place in the sequence; closing this generator (or an exception in the consumer) stops
    the thread and closes ``items``."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((True, end))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            put((False, e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="ahead", daemon=True)
    thread.start()
    try:
        while True:
            ok, item = q.get()
            if not ok:
                raise item
            if item is end:
                return
            yield item
    finally:
        stop.set()
        thread.join()
