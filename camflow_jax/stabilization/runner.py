"""File-level driver behind ``python -m camflow_jax.stabilize``: stream, stabilize, measure, plot.

Two passes over the input (it is never held in memory): pass 1 estimates the motion at the
working resolution (or loads it from a motion file), pass 2 re-reads the frames, renders and
writes them, and feeds the metrics and the point trackers. Flows and update fields live in
memmaps in a temporary folder (removed at the end), so RAM does not grow with the clip.

Outputs next to OUTPUT (or under ``report``): ``<stem>.json`` (settings, timings, warnings; the
metrics with ``with_metrics``), and with ``with_plots`` ``<stem>_path.png`` (camera path
before/after; needs the metrics) and ``<stem>_tracks.png`` (tracked-point trajectories).
Nothing existing is replaced unless ``overwrite``. A run's settings come in two groups:
:class:`OutputOptions` (what it writes: the report, metrics, plots, motion file, overwrite) and
:class:`MotionOptions` (where the motion comes from: the estimator, or a motion file).

Safety (docs/what_the_tools_refuse.md): an output that is the input by file identity (the same
path, a symlink or a hard link to it, or a file that would land in the input frame folder) is
refused even with ``overwrite``; every output is written to a hidden temporary file or folder
next to it and moved into place only after the whole run succeeded, so a failure leaves the
input and any previous output untouched; a run whose estimator failed on every frame pair is an
error, not an unstabilized "result".
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import tempfile
import time
import types

import numpy as np

from camflow_jax.io import atomic
from camflow_jax.io import video as video_io
from camflow_jax.io.video import IMAGE_EXTENSIONS, FrameSink, FrameSource, output_kind
from camflow_jax.stabilization import fingerprint, motion_file, pipeline, plots, render
from camflow_jax.stabilization import metrics as metrics_lib

__all__ = ["OutputOptions", "MotionOptions", "report_paths", "check_distinct", "check_outputs", "stabilize_video"]



#: The smallest frame side stabilize accepts: every estimator's smallest (DIS's 32 px).
MIN_FRAME_SIDE = 32

def report_paths(output: str, report: str | None = None) -> dict:
    """Paths of the JSON report and the two plots for an output path (or a ``report`` prefix)."""
    base = report if report else os.path.splitext(os.path.normpath(str(output)))[0]
    return {"json": base + ".json", "path_plot": base + "_path.png",
            "tracks_plot": base + "_tracks.png"}


#: Files a frame-folder output holds (replaced with -y; other files in the folder are kept).
FRAME_NAME = re.compile(r"frame_\d{6}\.png")


def _is_frame(name: str) -> bool:
    return FRAME_NAME.fullmatch(name) is not None


def check_distinct(output: str, paths: dict, export_motion: str | None, with_plots: bool = True,
                   names=("output", "from the report prefix", "export_motion")) -> None:
    """ValueError, before any work, when two outputs of one run are one file (e.g.
    ``--export-motion X.json`` beside ``-o X.mp4``, whose report is ``X.json``): the second
    would otherwise be refused after the whole run, as if another run had written it.
    ``paths``: :func:`report_paths`; ``names``: how the output, the report's prefix and the
    motion file were chosen (flags in the CLI)."""
    out, prefix, motion = names
    items = [(out, output), (f"the report ({prefix})", paths["json"])]
    if with_plots:
        items += [(f"the path plot ({prefix})", paths["path_plot"]),
                  (f"the tracks plot ({prefix})", paths["tracks_plot"])]
    atomic.check_distinct(items + [(motion, export_motion)])


def check_outputs(input_path: str, output: str, paths: list[str], overwrite: bool,
                  inputs=()) -> None:
    """Refuses (FileExistsError / ValueError / OSError) before any work is done: an output that
    is the input (or one of ``inputs``) by file identity, even with ``overwrite``; existing
    outputs without ``overwrite``; unwritable output folders."""
    all_inputs = [input_path] + [p for p in inputs if p]
    outs = [output] + [p for p in paths if p]
    kind = output_kind(output)  # an extension we cannot write is refused
    atomic.check_not_inputs(outs, all_inputs, input_folder_exts=IMAGE_EXTENSIONS)
    if kind == "video":
        atomic.check_output_file(output, overwrite, all_inputs)
    else:
        atomic.check_output_dir(output, _is_frame, overwrite, all_inputs)
    for p in paths:
        if p:
            atomic.check_output_file(p, overwrite, all_inputs)


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return None if not np.isfinite(x) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


@dataclasses.dataclass(frozen=True)
class OutputOptions:
    """What a :func:`stabilize_video` run writes beside the stabilized frames, and whether it may
    replace what exists (every field keeps its default unless set).

    Attributes:
      report: the prefix of the JSON report and the plots (default: the output path without its
        extension; :func:`report_paths`).
      with_metrics: the report scores the written output against the input
        (:func:`camflow_jax.stabilization.metrics.video_metrics`; docs/stabilization_metrics.md).
      low_hz: the metrics' low band, in Hz (the stability score's cutoff).
      with_plots: the camera-path plot (needs ``with_metrics``) and the tracked-points plot.
      export_motion: write the motion file there (JSON, CSV or NPZ by extension;
        :mod:`camflow_jax.stabilization.motion_file`).
      overwrite: replace existing outputs (never the input, whatever this says).
    """

    report: str | None = None
    with_metrics: bool = False
    low_hz: float = 1.0
    with_plots: bool = False
    export_motion: str | None = None
    overwrite: bool = False


@dataclasses.dataclass(frozen=True)
class MotionOptions:
    """Where a :func:`stabilize_video` run's motion comes from: the estimator, on the input (the
    default), or a motion file.

    Attributes:
      motion_path: a motion file to render with: its smoothed path, and its motion instead of
        estimating when it has one (:mod:`camflow_jax.stabilization.motion_file`).
      ignore_fingerprint: a motion file exported from another video (its source fingerprint,
        :mod:`camflow_jax.stabilization.fingerprint`) is refused (ValueError) unless this, which
        makes it a warning.
    """

    motion_path: str | None = None
    ignore_fingerprint: bool = False


def _options(output_options: OutputOptions | None, motion_options: MotionOptions | None,
             settings: dict) -> tuple[OutputOptions, MotionOptions]:
    """The two groups with ``settings`` (fields of either, as keywords) replacing their fields;
    an unknown name is a TypeError naming it."""
    out_fields = {f.name for f in dataclasses.fields(OutputOptions)}
    motion_fields = {f.name for f in dataclasses.fields(MotionOptions)}
    unknown = sorted(set(settings) - out_fields - motion_fields)
    if unknown:
        raise TypeError(f"stabilize_video() got unexpected keyword argument(s) {', '.join(unknown)} "
                        "(see OutputOptions and MotionOptions)")
    output_options = dataclasses.replace(output_options or OutputOptions(),
                                         **{k: v for k, v in settings.items() if k in out_fields})
    motion_options = dataclasses.replace(motion_options or MotionOptions(),
                                         **{k: v for k, v in settings.items() if k in motion_fields})
    return output_options, motion_options


def stabilize_video(input_path: str, output_path: str, estimator,
                    config: pipeline.StabilizerConfig | None = None,
                    output_options: OutputOptions | None = None, motion_options: MotionOptions | None = None,
                    *, fps: float | None = None, progress: bool = True, checked: bool = False,
                    **settings) -> dict:
    """Stabilizes ``input_path`` (video or frame folder) into ``output_path``; returns the report.

    Args:
      estimator: a callable from :mod:`camflow_jax.stabilization.estimators` (ignored when the
        motion file of ``motion_options`` has the motion).
      config: the stabilizer's settings (default: :class:`~.pipeline.StabilizerConfig`'s).
      output_options: what the run writes (:class:`OutputOptions`; default: its defaults, the
        report alone, nothing replaced).
      motion_options: where the motion comes from (:class:`MotionOptions`; default: the estimator).
      fps: the input's frame rate, replacing its own (its timestamps are then not kept).
      progress: progress bars on stderr.
      checked: the outputs were already checked by the caller (:func:`check_distinct`,
        :func:`check_outputs`; the CLI checks them before building the estimator).
      settings: fields of :class:`OutputOptions` or :class:`MotionOptions` as keywords
        (``with_metrics=True, motion_path=...``), which replace those of the options given; an
        unknown name is a TypeError.
    """
    config = config or pipeline.StabilizerConfig()
    outputs, motion_from = _options(output_options, motion_options, settings)
    paths = report_paths(output_path, outputs.report)
    wanted = [paths["json"]] + ([paths["path_plot"], paths["tracks_plot"]] if outputs.with_plots else [])
    if outputs.export_motion:
        wanted.append(outputs.export_motion)
    if not checked:
        check_distinct(output_path, paths, outputs.export_motion, outputs.with_plots)
        check_outputs(input_path, output_path, wanted, outputs.overwrite)
    source = FrameSource(input_path, default_fps=fps or 30.0)
    if min(source.height, source.width) < MIN_FRAME_SIDE:
        # e.g. 120x1: the estimator's own error (DIS's, for a method the user did not choose) named
        # the wrong thing
        raise ValueError(f"{input_path} is {source.width}x{source.height} px: too small to stabilize "
                         f"(frames of at least {MIN_FRAME_SIDE}x{MIN_FRAME_SIDE} px are needed)")
    # The container's timestamps, which the fingerprint records and checks, before --fps.
    stamps = types.SimpleNamespace(pts=source.pts, time_base=source.time_base)
    if fps:
        source.override_fps(fps)  # the user chose the rate: constant, no timestamps kept

    def bar(desc, total):
        if not progress:  # no bar: tqdm is not even imported (50 ms of a short run's start)
            return lambda it: it
        from tqdm.auto import tqdm

        return lambda it: tqdm(it, total=total, desc=desc, unit="frame", dynamic_ncols=True)

    # The scratch folder (memmaps) is removed on success, failure and SIGINT/SIGTERM alike
    # (harness.run_cli turns those signals into an exception).
    need = _scratch_bytes(source, config)
    scratch = None
    try:
        with atomic.scratch_folder("camflow_stabilize_") as scratch:
            return _run(source, output_path, estimator, config, paths, outputs, motion_from, scratch, bar, stamps)
    except OSError as e:
        err = _scratch_error(e, scratch, need)  # scratch None: the folder could not be made
        if err is e:
            raise
        raise err from e


#: Pass 1's decoded frames are kept for pass 2 while they take at most this many bytes (1,490
#: frames at 200x150, 145 at 640x480); a longer or larger clip is decoded again, so memory
#: stays bounded however long the clip. Pass 2 then skips a second decoding: a 120-frame
#: 200x150 clip took 2.25 s instead of 2.42 (medians of 6 interleaved runs, 2-core Xeon). At
#: 640x480 the second decoding overlaps the encoding, and keeping all 300 frames (276 MB)
#: measured 23.1 s against 23.5 s, within the noise: not worth the memory.
KEEP_FRAMES_BYTES = 128 * 2**20


class KeptFrames:
    """The frames of pass 1 (:func:`pipeline.estimate_motion`), kept for pass 2 while their
    total size stays within ``limit`` bytes; past it they are dropped and never kept again."""

    def __init__(self, limit: int | None = None):
        self.limit = KEEP_FRAMES_BYTES if limit is None else int(limit)
        self._frames: list | None = []
        self._bytes = 0

    def add(self, frame) -> None:
        if self._frames is None:
            return
        self._bytes += int(np.asarray(frame).nbytes)
        if self._bytes > self.limit:
            self._frames = None  # over the limit: pass 2 decodes again
            return
        self._frames.append(frame)

    def complete(self, n: int) -> bool:
        """Whether all ``n`` frames of the motion are kept."""
        return self._frames is not None and len(self._frames) == n

    def frames(self) -> list:
        return list(self._frames or ())


#: OS failures of a write that mean the disk (or the user's quota) is full.
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _scratch_bytes(source, config) -> int | None:
    """About how much the scratch folder holds: the flows and the update fields, float32 pairs
    on the working grid per frame (None when the frame count is not known up front)."""
    n = getattr(source, "count_hint", None)
    if not n:
        return None
    h, w = pipeline.working_size(source.height, source.width, config)
    return int(n) * h * w * 2 * 4 * 2


def _scratch_error(e: OSError, scratch: str | None, need: int | None) -> OSError:
    """A full disk met while writing the scratch folder, told as such: the path, the temporary
    folder it lives in and TMPDIR (a full-disk error there named no path, although the output's
    disk may have room). Other errors are returned as they are."""
    if e.errno not in _FULL:
        return e
    name = os.fspath(e.filename) if e.filename not in (None, "") else None
    if scratch is not None and name is not None and not name.startswith(scratch):
        return e  # about another file (an output: named by the atomic writer)
    where = scratch or tempfile.gettempdir()
    size = ""
    if need:
        size = f"; it needs about {need / 1e6:.0f} MB" if need >= 1e6 else f"; it needs about {need / 1e3:.0f} kB"
    return OSError(f"disk full: {where} (stabilize's scratch folder for the motion, in the temporary "
                   f"folder {tempfile.gettempdir()}{size}): set TMPDIR to a folder on a disk with room")


def _recorded_motion(record, config, motion_path: str = "the motion file") -> pipeline.ClipMotion:
    """The motion of a motion file: its dense flows (NPZ: exactly the original run's), else
    the flows of its per-pair homographies on the working grid. Dense flows on another grid
    than ``config``'s working grid for the frame size are refused (ValueError): rendered, they
    would be stretched onto the frame."""
    flows = record.flows
    h, w = pipeline.working_size(*record.frame_size, config)
    if flows is None:
        flows = motion_file.homography_flows(record.pair_homography, *record.frame_size, h, w)
    elif tuple(flows.shape[1:3]) != (h, w):
        want = [flows.shape[0], h, w, 2]
        raise ValueError(f"{motion_path}: flows has shape {list(flows.shape)}, expected {want} "
                         f"(the working grid of {record.frame_size[1]}x{record.frame_size[0]} "
                         f"frames at work_scale {config.work_scale:g}, max_work_side "
                         f"{config.max_work_side}); the file was written for another grid")
    return pipeline.ClipMotion(flows, tuple(record.frame_size), record.fps, record.estimator,
                           dict(record.stats or {}), coefficients=record.coefficients)


def _timestamps(source, n: int) -> np.ndarray:
    """Each frame's time in seconds (the input's PTS from its first, else frame / fps)."""
    if source.pts is not None and len(source.pts) >= n:
        pts = np.asarray(source.pts[:n], np.float64)
        return (pts - pts[0]) * float(source.time_base)
    return np.arange(n) / float(source.fps)


def _damage(source, decoded: int) -> str | None:
    """:meth:`FrameSource.damage` (videos; None for other sources)."""
    damage = getattr(source, "damage", None)
    return damage(decoded) if damage is not None else None


def _audio_from(source) -> str | None:
    return source.path if getattr(source, "audio", None) is not None else None


def failure_note(name: str, stats: dict, max_gap: int) -> str:
    """The report's line on the frame pairs an estimator failed on, and what was used there
    (:func:`camflow_jax.stabilization.pipeline.fill_failed_pairs`). A motion file written before
    the fill existed says nothing of it: the identity motion was used there."""
    failures, calls = _estimator_failures(stats)
    text = f"the {name} estimator failed on {failures} of {calls} frame pairs"
    if "interpolated" not in stats:
        return text + "; the identity motion was used there"
    parts = []
    if stats["interpolated"]:
        parts.append(f"{stats['interpolated']} filled from the neighbouring pairs' motion")
    if stats.get("identity"):
        parts.append(f"{stats['identity']} left at the identity motion (runs of more than {max_gap} "
                     "failed pairs)")
    return text + ": " + ", ".join(parts)


def _estimator_failures(stats: dict) -> tuple[int, int]:
    stats = stats or {}
    return int(stats.get("failures", 0) or 0), int(stats.get("calls", 0) or 0)


def _first_frame(source) -> np.ndarray | None:
    frames = iter(source)
    try:
        return next(frames, None)
    finally:
        close = getattr(frames, "close", None)
        if close is not None:
            close()


@dataclasses.dataclass
class _Log:
    """What a run reports beside its results: timings (ms per frame by phase), warnings, notes."""

    timings: dict = dataclasses.field(default_factory=dict)
    warnings: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Written:
    """Pass 2's yield: the sink (closed), each frame's border fraction, the fingerprint's frame
    signatures, the point trackers (``with_plots``) and the seconds spent rendering and tracking."""

    sink: FrameSink
    borders: list
    signatures: dict
    track_in: plots.PointTracker | None
    track_out: plots.PointTracker | None
    render_s: float
    tracking_s: float


def _run(source, output_path, estimator, config, paths, outputs: OutputOptions, motion_from: MotionOptions,
         scratch, bar, stamps=None) -> dict:
    """One run in its phases: the motion file (checked against the input), the motion (estimated
    in pass 1, or loaded), the plan, pass 2 (render and write), the report; every output is moved
    into place together at the end (:class:`camflow_jax.io.atomic.AtomicOutputs`)."""
    stamps = stamps if stamps is not None else source
    log = _Log(notes=[source.rotation_note] if getattr(source, "rotation_note", None) else [])
    t0 = time.perf_counter()
    record, check = _open_motion_file(source, motion_from, stamps)
    motion, kept = _estimate_or_load(source, estimator, config, record, motion_from.motion_path, scratch, bar)
    n = motion.num_frames
    log.warnings += _motion_warnings(source, motion, config, output_path)
    log.timings["estimate_ms_per_frame"] = 1000 * (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    plan, exported, path_report = _plan(source, motion, config, record, motion_from.motion_path,
                                        outputs.export_motion, scratch)
    log.timings["smooth_ms_per_frame"] = 1000 * (time.perf_counter() - t0) / n
    # Every output goes to a temporary file / folder next to it; all are moved into place, the
    # video first, when the block ends without an exception (and removed when it ends with one).
    # Without overwrite the move refuses an output another run created meanwhile.
    with atomic.AtomicOutputs(outputs.overwrite) as staged:
        if output_kind(output_path) == "video":
            target = staged.file(output_path)
        else:
            target = staged.dir(output_path, _is_frame)
        again = kept.frames() if kept.complete(n) else source  # decoded again only when not kept
        written = _write_frames(source, target, plan, again, n, check, outputs, bar)
        note = pipeline.fallback_note(plan.fallbacks, n)
        if note:
            log.warnings.append(note)
        log.warnings.extend(written.sink.notes)
        if check is not None:
            log.warnings.extend(check.warnings)
            log.notes.extend(check.notes)
        log.timings["render_ms_per_frame"] = 1000 * written.render_s / n
        log.timings["tracking_ms_per_frame"] = 1000 * written.tracking_s / n
        m = None
        if outputs.with_metrics:
            # Scored on what the user gets: the written output decoded again (after the codec),
            # against the input (docs/stabilization_metrics.md).
            t0 = time.perf_counter()
            m = metrics_lib.video_metrics(target, input_path=source.path, fps=source.fps, low_hz=outputs.low_hz)
            log.timings["metrics_ms_per_frame"] = 1000 * (time.perf_counter() - t0) / n
        result = _result(source, output_path, config, motion, plan, written, log)
        if m is not None:
            result["metrics"] = {"input": m["input"], "output": m["output"],
                                 "homography_failures": m["failures"]}
        plotted = _write_plots(staged, paths, outputs.with_plots, m, written, source.fps, motion.estimator)
        if plotted:
            result["plots"] = {k: os.path.abspath(v) for k, v in plotted.items()}
        if path_report is not None:
            result["path"] = path_report
        if outputs.export_motion:
            exported.source = fingerprint.build(source.path, fingerprint.timing(stamps, n), written.signatures)
            motion_file.write(staged.file(outputs.export_motion), exported)
            result["motion_file"] = os.path.abspath(outputs.export_motion)
        result["report"] = os.path.abspath(paths["json"])
        report = {k: v for k, v in result.items() if k != "report"}
        tmp = staged.file(paths["json"])
        with open(tmp, "w") as f:
            f.write(atomic.strict_json(_jsonable(report), indent=2))
    del plan, motion  # release the memmaps before the scratch folder goes
    return result


def _open_motion_file(source, motion_from: MotionOptions, stamps):
    """``(record, check)``: the motion file ``motion_from.motion_path`` read (None without one) and
    its fingerprint check, started (None without a file). A file made for another frame size, or
    bound to another video, is refused here, before any work."""
    motion_path = motion_from.motion_path
    record = motion_file.read(motion_path) if motion_path else None
    if record is not None and tuple(record.frame_size) != (source.height, source.width):
        raise ValueError(f"{motion_path} was made for {record.frame_size[1]}x"
                         f"{record.frame_size[0]} frames; the input is "
                         f"{source.width}x{source.height}")
    check = None
    if record is not None:  # bound to its video: refused before any work when it is another's
        check = fingerprint.Check(record.source, motion_path, source.path, record.num_frames,
                                  motion_from.ignore_fingerprint)
        check.start(fingerprint.timing(stamps, record.num_frames),
                    _first_frame(source) if record.source is not None else None,
                    source.count_hint)
    return record, check


def _estimate_or_load(source, estimator, config, record, motion_path, scratch, bar):
    """``(motion, kept)``: the motion file's motion where it has one, else the estimator's on
    pass 1 over the frames (``kept``: the frames, for pass 2, while they fit in
    :data:`KEEP_FRAMES_BYTES`)."""
    kept = KeptFrames()
    if record is not None and record.has_motion:
        return _recorded_motion(record, config, motion_path), kept
    if estimator is None:
        raise ValueError(f"{motion_path} holds no per-pair motion: an estimator is needed")
    name = getattr(estimator, "name", "estimator")
    seen = [0]

    def frames():  # counted: a video cut short is told as such, not as "needs 2 frames"
        for frame in source:
            seen[0] += 1
            kept.add(frame)
            yield frame

    try:
        motion = pipeline.estimate_motion(frames(), estimator, config, source.fps,
                                          bar(f"motion ({name})", source.count_hint),
                                          spill_dir=scratch)
    except ValueError:
        damage = _damage(source, seen[0])
        if seen[0] < 2 and damage:
            raise ValueError(f"{damage}: stabilization needs at least 2 frames") from None
        raise
    if record is not None and record.num_frames != motion.num_frames:
        raise ValueError(f"{motion_path} has a path for {record.num_frames} frames but the "
                         f"input has {motion.num_frames}")
    return motion, kept


def _motion_warnings(source, motion, config, output_path) -> list[str]:
    """The report's warnings on the motion and the input: pairs the estimator failed on (every
    pair: ValueError), a damaged clip, timestamps the output cannot keep, a smoothing radius
    clamped to the clip."""
    warnings = []
    failures, calls = _estimator_failures(motion.stats)
    if calls and failures >= calls:
        raise ValueError(f"the {motion.estimator or 'motion'} estimator failed on all {calls} frame "
                         "pairs (e.g. too few feature matches, or every estimate aligned the frames "
                         "worse than no motion or left them unexplained): there is no motion to "
                         "stabilize. "
                         "Try another --estimator (dis, camflow)")
    if failures:
        warnings.append(failure_note(motion.estimator, motion.stats, config.max_fill_gap))
    decoded = getattr(source, "decoded_count", None)
    damage = None if decoded is None else _damage(source, decoded)
    if damage:
        warnings.append(f"{damage}: the clip ends at frame {decoded - 1}")
    keeps_time = video_io.keeps_timestamps(output_path)
    if getattr(source, "timing_note", None) and not keeps_time:
        warnings.append(source.timing_note)
    n = motion.num_frames
    used = pipeline.smoothing_for_clip(config.smoothing, n).max_radius
    default = type(config.smoothing)().max_radius  # short clips clamp the default silently
    if used < config.smoothing.max_radius and config.smoothing.max_radius > default:
        warnings.append(f"smoothing radius {config.smoothing.max_radius} exceeds what a {n}-frame "
                        f"clip allows; {used} was used")
    return warnings


def _plan(source, motion, config, record, motion_path, export_motion, scratch):
    """``(plan, exported, path_report)``: the stabilization plan; the motion file to export
    (also built when the motion file has a smoothed path, to edit against; else None); the
    report's ``path`` entry where the motion file's smoothed path moved frames (else None).
    A smoothed path that would render a frame black is refused here, before any frame is
    written."""
    n = motion.num_frames
    plan = pipeline.plan_stabilization(motion, config, spill_dir=scratch)
    if record is not None and record.has_motion:
        plan.motion_origin = f"loaded from {motion_path}"
    exported = path_report = None
    if export_motion or (record is not None and record.smoothed_path is not None):
        exported = motion_file.record_from_plan(motion, plan, _timestamps(source, n))
    if record is not None and record.smoothed_path is not None:
        if record.num_frames != n:
            raise ValueError(f"{motion_path} has a path for {record.num_frames} frames but the "
                             f"motion covers {n}")
        plan.edits, shifts = motion_file.path_edits(record.smoothed_path, exported.smoothed_path,
                                                    plan.zoom, source.height, source.width)
        edited = [t for t, e in enumerate(plan.edits) if e is not None]
        for t in edited:  # refused before any frame is written: it would render black
            why = motion_file.edit_problem(plan.edits[t], source.height, source.width)
            if why:
                raise ValueError(f"{motion_path}: smoothed_path at frame {t} {why}")
        if edited:
            exported.smoothed_path = record.smoothed_path
            exported.correction = np.stack([exported.correction[t] if e is None else
                                            motion_file.normalized(e @ exported.correction[t])
                                            for t, e in enumerate(plan.edits)])
            exported.correction_fit_rms_px = None  # the fit was of the unedited warp
        path_report = {"file": os.path.abspath(motion_path), "frames_moved": len(edited),
                       "max_corner_shift_px": float(shifts.max())}
    return plan, exported, path_report


def _write_frames(source, target, plan, frames, n: int, check, outputs: OutputOptions, bar) -> _Written:
    """Pass 2: ``frames`` (pass 1's, kept, or ``source`` decoded again) rendered by ``plan`` and
    written to ``target``; the fingerprint's frames sampled (``export_motion``), the motion
    file's check fed, the points tracked (``with_plots``)."""
    track_in = track_out = None
    borders = []
    t_render = t_tracking = 0.0
    sampled = set(fingerprint.sample_indices(n)) if outputs.export_motion else set()
    signatures = {}
    with FrameSink(target, source.fps, overwrite=True, pts=source.pts,
                   time_base=source.time_base, audio_from=_audio_from(source)) as sink:
        t1 = time.perf_counter()
        # frame t+1 is decoded and rendered while frame t is encoded
        with contextlib.closing(pipeline.ahead(pipeline.render(frames, plan, bar("render", n)))) as rendered:
            for t, (frame, out, border) in enumerate(rendered):
                sink.write(out)
                borders.append(border)
                if t in sampled:  # frames decoded anyway: the fingerprint costs no decoding
                    signatures[t] = fingerprint.frame_signature(frame)
                if check is not None:
                    check.frame(t, frame)
                t2 = time.perf_counter()
                t_render += t2 - t1
                if outputs.with_plots:
                    if track_in is None:
                        track_in = plots.PointTracker(3)
                        track_in.update(frame)
                        start = render.forward_points(track_in.rows[0], plan.updates[0],
                                                      source.height, source.width, plan.zoom)
                        track_out = plots.PointTracker(start=start)
                        track_out.update(out)
                    else:
                        track_in.update(frame)
                        track_out.update(out)
                t1 = time.perf_counter()
                t_tracking += t1 - t2
        if check is not None:  # after the frame-count rule; before anything is moved in
            check.finish()
    return _Written(sink, borders, signatures, track_in, track_out, t_render, t_tracking)


def _result(source, output_path, config, motion, plan, written: _Written, log: _Log) -> dict:
    """The report's main entries (the metrics, plots, path and motion file join them after)."""
    n = motion.num_frames
    return {
        "input": os.path.abspath(source.path), "output": os.path.abspath(output_path),
        "estimator": motion.estimator, "estimator_stats": motion.stats,
        "motion_source": plan.motion_origin,
        "frames": n, "fps": source.fps, "seconds": n / source.fps,
        "frame_size": [source.height, source.width],
        "working_size": list(motion.flows.shape[1:3]),
        "zoom": plan.zoom,
        "zoom_needed": None if plan.frame_zooms is None else float(plan.frame_zooms.max()),
        "border_fraction_max": float(np.max(written.borders)),
        "border_fraction_mean": float(np.mean(written.borders)),
        "unstabilized_frames": [t for t, _ in plan.fallbacks],
        "window_radius": {"min": int(plan.radii.min()), "mean": float(plan.radii.mean()),
                          "max": int(plan.radii.max())},
        "masked_fraction_mean": (None if motion.masked_fraction is None
                                 else float(np.mean(motion.masked_fraction))),
        "config": dataclasses.asdict(config), "timings": log.timings,
        "audio": video_io.audio_summary(source, written.sink),
        "video_codec": written.sink.codec,
        "timestamps": video_io.timing_summary(source, output_path),
        "warnings": log.warnings,
        "notes": log.notes,
    }


def _write_plots(staged, paths, with_plots, m, written: _Written, fps, estimator_name) -> dict:
    """The plots asked for (``with_plots``): the camera path (needs the metrics ``m``) and the
    tracked points, each to its temporary file of ``staged`` (the run's
    :class:`~camflow_jax.io.atomic.AtomicOutputs`); ``{kind: final path}``."""
    plotted = {}
    if m is not None and with_plots:
        tmp = staged.file(paths["path_plot"])
        plots.plot_camera_path(m["path_input"], m["path_output"], fps,
                               tmp, f"camera path ({estimator_name})")
        plotted["path_plot"] = paths["path_plot"]
    if with_plots and written.track_in is not None:
        tmp = staged.file(paths["tracks_plot"])
        plots.plot_trajectories(written.track_in.tracks, written.track_out.tracks, fps,
                                tmp, f"tracked points ({estimator_name})")
        plotted["tracks_plot"] = paths["tracks_plot"]
    return plotted
