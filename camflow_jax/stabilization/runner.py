"""File-level driver behind ``python -m camflow_jax.stabilize``: stream, stabilize, measure, plot.

Two passes over the input (it is never held in memory): pass 1 estimates the motion at the
working resolution (or loads it from a motion file), pass 2 re-reads the frames, renders and
writes them, and feeds the metrics and the point trackers. Flows and update fields live in
memmaps in a temporary folder (removed at the end), so RAM does not grow with the clip.

Outputs next to OUTPUT (or under ``report``): ``<stem>.json`` (metrics, settings, timings),
``<stem>_path.png`` (camera path before/after), ``<stem>_tracks.png`` (tracked-point
trajectories). Nothing existing is replaced unless ``overwrite``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time

import numpy as np

from camflow_jax.stabilization import metrics as metrics_lib
from camflow_jax.stabilization import pipeline, plots, render
from camflow_jax.stabilization.video_io import FrameSink, FrameSource

__all__ = ["report_paths", "check_outputs", "stabilize_video"]


def report_paths(output: str, report: str | None = None) -> dict:
    """Paths of the JSON report and the two plots for an output path (or a ``report`` prefix)."""
    base = report if report else os.path.splitext(os.path.normpath(str(output)))[0]
    return {"json": base + ".json", "path_plot": base + "_path.png",
            "tracks_plot": base + "_tracks.png"}


def check_outputs(input_path: str, output: str, paths: list[str], overwrite: bool) -> None:
    """Refuses (FileExistsError / ValueError) before any work is done."""
    if os.path.abspath(input_path) == os.path.abspath(output):
        raise ValueError("OUTPUT must differ from INPUT")
    existing = [p for p in [output] + paths if p and os.path.exists(p)]
    if existing and not overwrite:
        raise FileExistsError("refusing to overwrite " + ", ".join(existing) + " (pass -y)")


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


def stabilize_video(input_path: str, output_path: str, estimator,
                    config: pipeline.StabilizerConfig | None = None, *, overwrite: bool = False,
                    fps: float | None = None, with_metrics: bool = True, with_plots: bool = True,
                    report: str | None = None, save_motion: str | None = None,
                    load_motion: str | None = None, progress: bool = True,
                    low_hz: float = 1.0, checked: bool = False) -> dict:
    """Stabilizes ``input_path`` (video or frame folder) into ``output_path``; returns the report.

    ``estimator`` is a callable from :mod:`camflow_jax.stabilization.estimators` (ignored when
    ``load_motion`` is given). ``checked``: outputs were already checked by the caller.
    """
    from tqdm.auto import tqdm

    config = config or pipeline.StabilizerConfig()
    paths = report_paths(output_path, report)
    wanted = [paths["json"]] + ([paths["path_plot"], paths["tracks_plot"]] if with_plots else [])
    if save_motion:
        wanted.append(save_motion)
    if not checked:
        check_outputs(input_path, output_path, wanted, overwrite)
    source = FrameSource(input_path, default_fps=fps or 30.0)
    if fps:
        source.fps = float(fps)

    def bar(desc, total):
        return lambda it: tqdm(it, total=total, desc=desc, unit="frame", disable=not progress,
                               dynamic_ncols=True)

    with tempfile.TemporaryDirectory(prefix="camflow_stabilize_") as scratch:
        return _run(source, output_path, estimator, config, paths, overwrite, with_metrics,
                    with_plots, save_motion, load_motion, low_hz, scratch, bar)


def _run(source, output_path, estimator, config, paths, overwrite, with_metrics, with_plots,
         save_motion, load_motion, low_hz, scratch, bar) -> dict:
    input_path = source.path
    timings = {}
    t0 = time.perf_counter()
    if load_motion:
        motion = pipeline.Motion.load(load_motion)
        if tuple(motion.frame_size) != (source.height, source.width):
            raise ValueError(f"{load_motion} was estimated on {motion.frame_size[1]}x"
                             f"{motion.frame_size[0]} frames; the input is "
                             f"{source.width}x{source.height}")
    else:
        name = getattr(estimator, "name", "estimator")
        motion = pipeline.estimate_motion(source, estimator, config, source.fps,
                                          bar(f"motion ({name})", source.count_hint),
                                          spill_dir=scratch)
        if save_motion:
            motion.save(save_motion)
    n = motion.num_frames
    timings["estimate_ms_per_frame"] = 1000 * (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    plan = pipeline.plan_stabilization(motion, config, spill_dir=scratch)
    timings["smooth_ms_per_frame"] = 1000 * (time.perf_counter() - t0) / n

    acc = metrics_lib.MetricsAccumulator(source.fps, low_hz) if with_metrics else None
    track_in = track_out = None
    borders = []
    t_render = t_metrics = 0.0
    with FrameSink(output_path, source.fps, overwrite=overwrite) as sink:
        t1 = time.perf_counter()
        for t, (frame, out, border) in enumerate(pipeline.render(source, plan,
                                                                 bar("render", n))):
            sink.write(out)
            borders.append(border)
            t2 = time.perf_counter()
            t_render += t2 - t1
            if acc is not None:
                acc.update(frame, out)
            if with_plots:
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
            t_metrics += t1 - t2
    timings["render_ms_per_frame"] = 1000 * t_render / n
    timings["metrics_and_tracking_ms_per_frame"] = 1000 * t_metrics / n

    result = {
        "input": os.path.abspath(input_path), "output": os.path.abspath(output_path),
        "estimator": motion.estimator, "estimator_stats": motion.stats,
        "frames": n, "fps": source.fps, "seconds": n / source.fps,
        "frame_size": [source.height, source.width],
        "working_size": list(motion.flows.shape[1:3]),
        "zoom": plan.zoom,
        "zoom_needed": None if plan.frame_zooms is None else float(plan.frame_zooms.max()),
        "border_fraction_max": float(np.max(borders)),
        "border_fraction_mean": float(np.mean(borders)),
        "window_radius": {"min": int(plan.radii.min()), "mean": float(plan.radii.mean()),
                          "max": int(plan.radii.max())},
        "masked_fraction_mean": (None if motion.masked_fraction is None
                                 else float(np.mean(motion.masked_fraction))),
        "config": dataclasses.asdict(config), "timings": timings,
        "audio": "not copied (OpenCV writes video only)",
    }
    if acc is not None:
        m = acc.finalize()
        result["metrics"] = {"input": m["input"], "output": m["output"],
                             "homography_failures": m["failures"]}
        if with_plots:
            plots.plot_camera_path(m["path_input"], m["path_output"], source.fps,
                                   paths["path_plot"], f"camera path ({motion.estimator})")
    if with_plots and track_in is not None:
        plots.plot_trajectories(track_in.tracks, track_out.tracks, source.fps,
                                paths["tracks_plot"], f"tracked points ({motion.estimator})")
        result["plots"] = {k: os.path.abspath(v) for k, v in paths.items() if k != "json"
                           and os.path.exists(v)}
    with open(paths["json"], "w") as f:
        json.dump(_jsonable(result), f, indent=2)
    result["report"] = os.path.abspath(paths["json"])
    del plan, motion  # release the memmaps before the scratch folder goes
    return result
