"""Stabilize a shaky video: ``python -m camflow_jax.stabilize INPUT -o OUTPUT [options]``.

SteadyFlow-style pipeline (``camflow_jax.stabilization``): dense per-frame camera motion from
the chosen estimator -> per-pixel motion profiles -> smoothing -> inverse warping -> crop/zoom.
Only the estimator changes between runs; all other settings are shared.

INPUT is a video file or a folder of frames; OUTPUT is a video (.mp4/.m4v/.mov/.avi/.mkv) or a
folder of PNG frames (a name without extension; other extensions are refused). Writes
``<OUTPUT stem>.json`` (settings, timings, warnings); ``--metrics`` also scores the written
output (stability, cropping, distortion) and draws two plots (``--no-plots``: without them).
Frame count, frame rate and timestamps are kept (variable frame rates too, in
.mp4/.m4v/.mov/.mkv; .avi is written at the mean rate); the audio is copied (transcoded to AAC,
with a note, where the container cannot hold it). Video output is H.264 (libx264) except .avi
(Motion-JPEG). ``--export-motion FILE`` writes the camera motion, path, smoothed path and
applied correction (JSON/CSV/NPZ); ``--path FILE`` renders with a (possibly edited) smoothed
path from such a file, refused when the file was exported from another video
(``--ignore-fingerprint`` applies it anyway). Rotated (phone) videos are read and written
upright. Existing files are never replaced without ``-y``, not even by a run that finishes
second. Failures: one ``error:`` line, exit 2 (``--verbose`` adds the traceback); SIGINT /
SIGTERM: partial outputs and temporaries removed, exit 130 / 143.

Examples::

    python -m camflow_jax.stabilize shaky.mp4 -o steady.mp4 --estimator=sift_ransac
    python -m camflow_jax.stabilize shaky.mp4 -o steady.mp4 --estimator=camflow \\
        --checkpoint checkpoints/camflow --smoothing 40 --crop 0.85

``--estimator`` takes any name of the estimator registry (:mod:`camflow_jax.estimators.registry`); the
old ``sift`` / ``orb`` still work, with a note: they are ``sift_ransac`` / ``orb_ransac``.
"""

from __future__ import annotations

if __name__ == "__main__":
    # SIGINT / SIGTERM handled from the first moment, before the heavy imports (a signal during
    # JAX's import: one line and exit 130/143; camflow_jax/io/interrupt.py). Then re-execute
    # once with huge pages for malloc (camflow_jax/cli/runtime.py, docs/performance.md), before
    # the imports below: the restart then costs only an interpreter start.
    from camflow_jax.io import interrupt
    interrupt.block()  # pending, not lost, until install() (also across the re-execution)
    from camflow_jax.cli import runtime
    runtime.use_huge_pages()
    interrupt.install()

import argparse
import contextlib
import sys

from camflow_jax.cli import harness
from camflow_jax.geometry import checks

__all__ = ["main", "build_parser"]


def _number(lo: float, hi: float, what: str):
    def parse(text: str) -> float:
        v = harness.finite_float(text)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{what}, got {text!r}")
        return v

    return parse


_nonnegative = _number(0.0, 1e6, "must be a finite number in [0, 1e6]")
_zoom = _number(1.0, 100.0, "must be a finite zoom in [1, 100]")
_fps = _number(1e-3, 1000.0, "must be a frame rate in (0, 1000]")


_radius = harness.int_at_least(1, "frames")


def _fmt(v) -> str:
    """A metric for the summary line; n/a when undefined (e.g. stability of a clip shorter than
    one period of its band)."""
    return "n/a" if v is None or v != v else f"{v:.3f}"


def build_parser() -> argparse.ArgumentParser:
    from camflow_jax.estimators import registry
    from camflow_jax.stabilization import estimators, fingerprint, profiles
    p = argparse.ArgumentParser(prog="python -m camflow_jax.stabilize",
                                description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("input", type=harness.path_arg, help="input video file or folder of frames")
    p.add_argument("-o", "--output", required=True, type=harness.path_arg,
                   help="output video (.mp4/.m4v/.mov/.avi/.mkv) or a folder for PNG frames")
    p.add_argument("--estimator", default=estimators.DEFAULT,
                   help=f"camera-motion estimator (default: {estimators.DEFAULT}):\n" + registry.describe())
    p.add_argument("--no-refine", action="store_true",
                   help="camflow without test-time refinement (the network alone: camflow_net)")
    harness.add_refine_size_flag(p)
    p.add_argument("--two-motions", action=argparse.BooleanOptionalAction, default=None,
                   help="camflow (on by default): check each pair for a large object moving against the "
                        "background (point tracks started at camflow's estimate) and keep the motion that "
                        "explains most of the frame (docs/stabilization.md, \"Moving objects\"); "
                        "--no-two-motions: camflow's own fit")
    p.add_argument("--checkpoint", type=harness.path_arg,
                   help="CamFlow checkpoint or training workdir (camflow only; default: the shipped model)")
    p.add_argument("--adapt", action="store_true",
                   help="camflow: first adapt the network to this clip (python -m camflow_jax.adapt on its\n"
                        "first --adapt-frames frames, the refined model as teacher), then stabilize with\n"
                        "the adapted model, the model it started from measuring each pair beside it: their\n"
                        "mean where they agree, else the motion that fits the pair better (docs/adaptation.md)")
    p.add_argument("--adapt-minutes", type=harness.finite_float, default=None, metavar="M",
                   help="with --adapt: the adaptation's budget, labels included (default 4.5)")
    p.add_argument("--adapt-frames", type=harness.int_at_least(3), default=300, metavar="N",
                   help="with --adapt: learn from the first N frames (default 300)")
    p.add_argument("--depth", metavar="DIR", type=harness.path_arg,
                   help="camflow: a folder with one depth map per frame (.npy or 16-bit PNG, any global scale) "
                        "for CamFlow+'s depth bases")
    p.add_argument("--intrinsics", type=harness.intrinsics_arg, metavar="fx,fy,cx,cy",
                   help="camflow with --depth: camera intrinsics in pixels of the input frames")
    p.add_argument("--fov", type=float, metavar="DEG", help="camflow with --depth: horizontal field of view "
                                                            "instead of --intrinsics (default 60)")
    p.add_argument("--smoothing", type=_radius, default=30, metavar="N",
                   help="largest temporal window radius in frames (default: 30; clamped to the "
                        "clip length - 1)")
    strength = profiles.SmoothingParams().strength
    p.add_argument("--strength", type=_nonnegative, default=strength,
                   help=f"smoothing lambda (default: {strength:g})")
    p.add_argument("--crop", default="auto", metavar="auto|none|RATIO",
                   help="auto: smallest centred zoom hiding borders (<= --max-zoom); none: no "
                        "zoom; RATIO in [0.01, 1]: keep that fraction of width and height")
    p.add_argument("--max-zoom", type=_zoom, default=1.5, help="cap for --crop=auto (1.5)")
    p.add_argument("--border", default="black", choices=("black", "replicate", "reflect"),
                   help="fill for pixels with no source (default: black)")
    p.add_argument("--fps", type=_fps, help="frame rate for frame folders (default 30) or to "
                                             "override the container's")
    p.add_argument("--export-motion", "--save-motion", dest="export_motion", metavar="FILE", type=harness.path_arg,
                   help="write the per-frame motion, camera path, smoothed path and applied\n"
                        "correction (.json, .csv or .npz; the .npz also holds the dense\n"
                        "motion; docs/stabilization.md, 'Exporting the motion')")
    p.add_argument("--path", "--load-motion", dest="path", metavar="FILE", type=harness.path_arg,
                   help="render with the smoothed path of a motion file (e.g. an edited\n"
                        "--export-motion file); its motion replaces estimation when present.\n"
                        "A file exported from another video (its source fingerprint: frame\n"
                        "times and pictures) is refused")
    p.add_argument(fingerprint.IGNORE_FLAG, action="store_true",
                   help="apply a --path file whose source fingerprint does not match the input\n"
                        "(a warning instead of an error)")
    p.add_argument("--report", metavar="PREFIX", type=harness.path_arg, help="path prefix of the JSON and plots "
                                                      "(default: OUTPUT without extension)")
    p.add_argument("--metrics", action="store_true",
                   help="score the written output (decoded again) against the input: stability,\n"
                        "cropping, distortion; and draw the camera-path and tracked-points plots.\n"
                        "Off by default: it costs more than stabilizing (~0.25 s a frame at 640x480)")
    p.add_argument("--no-plots", action="store_true", help="with --metrics: skip the plots")
    # the default since the scoring became optional; kept so that older command lines still run
    p.add_argument("--no-metrics", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("-y", "--overwrite", action="store_true", help="replace existing outputs")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    harness.add_verbose_flag(p)
    return p


def _estimator(args, estimators):
    """The stabilization estimator the flags ask for (notes on stderr); ValueError for bad names
    or flags that do not fit the estimator."""
    from camflow_jax.estimators import registry
    harness.check_refine_size(args.refine_size, args.no_refine)
    name = registry.without_refinement(args.estimator) if args.no_refine else args.estimator
    name, note = registry.resolve(name)
    if note:
        print(f"note: {note}", file=sys.stderr)
    harness.camflow_only_flags(name, **{"--depth": args.depth, "--intrinsics": args.intrinsics,
                                          "--fov": args.fov})
    if not registry.is_camflow(name):
        if args.two_motions is not None:
            flag = "--two-motions" if args.two_motions else "--no-two-motions"
            raise ValueError(f"{flag} only applies to camflow (it checks camflow's estimate with point "
                             f"tracks); {name} does not use it: drop it or choose camflow")
        for flag, given in (("--no-refine", args.no_refine), ("--refine-size", args.refine_size)):
            if given:
                print(f"note: --estimator {name} ignores {flag}", file=sys.stderr)
        return estimators.make_estimator(name)
    kwargs = {"two_motion_check": args.two_motions is not False}
    if getattr(args, "reference", None) is not None:  # --adapt: the model it started from
        kwargs["reference"] = args.reference
    if args.depth:
        from camflow_jax.data.depth import depth_files
        from camflow_jax.io import video as video_io
        kwargs["depth_files"] = depth_files(args.depth)
        kwargs["fov_deg"] = args.fov
        if args.intrinsics:
            src = video_io.FrameSource(args.input)
            why = checks.intrinsics_problem(args.intrinsics, src.height, src.width)
            if why:
                raise ValueError(f"--intrinsics {','.join(f'{v:g}' for v in args.intrinsics)}: {why}")
            kwargs["intrinsics"] = args.intrinsics
            kwargs["frame_size"] = (src.height, src.width)
    elif args.intrinsics or args.fov is not None:
        raise ValueError("--intrinsics and --fov need --depth")
    est = estimators.make_estimator(name, args.checkpoint, refine_size=args.refine_size, **kwargs)
    if not args.quiet:
        print(f"model: {est.predictor.description}", file=sys.stderr)
        if not args.depth and getattr(est.predictor, "num_depth", 0):
            print("note: no --depth: the depth bases use a constant depth (CamFlow behaviour; give "
                  "--depth for CamFlow+)", file=sys.stderr)
    return est


def _adapt_first(args, has_motion: bool, stack) -> None:
    """``--adapt``: the shipped model (or ``--checkpoint``) adapted to the clip's first
    ``--adapt-frames`` frames into a scratch folder that lives as long as ``stack``;
    ``args.checkpoint`` then names it. A network no better on its held-out pairs
    (:func:`camflow_jax.adaptation.run.no_gain`) is dropped with a warning: the clip is
    stabilized with the model it started from. Else ``args.reference`` holds the model it started
    from, loaded: the estimator measures each pair with both and keeps their mean where they
    agree, else the motion that fits the pair better
    (:class:`camflow_jax.stabilization.estimators.CamFlowEstimator`)."""
    from camflow_jax.adaptation import run as adapt_run
    from camflow_jax.adaptation.config import DEFAULT_MINUTES
    from camflow_jax.adaptation.footage import read_clips
    from camflow_jax.estimators import registry
    from camflow_jax.io import atomic

    name = registry.resolve(args.estimator)[0]
    if has_motion:
        raise ValueError("--adapt adapts the estimator, but --path gives the motion: drop one of them")
    if not registry.is_camflow(name) or args.no_refine:
        raise ValueError(f"--adapt adapts camflow's network with the refined camflow as teacher; "
                         f"--estimator {name}{' --no-refine' if args.no_refine else ''} does not run it: use --estimator camflow")
    if args.depth:
        raise ValueError("--adapt learns from the frames alone: drop --depth or --adapt")
    minutes = DEFAULT_MINUTES if args.adapt_minutes is None else args.adapt_minutes
    if minutes <= 0:
        raise ValueError(f"--adapt-minutes must be > 0, got {minutes:g}")
    clips = read_clips([args.input], args.adapt_frames)
    folder = stack.enter_context(atomic.scratch_folder("camflow-adapt-"))
    log = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    loaded = adapt_run.load_model(args.checkpoint)
    from camflow_jax.io import interrupt

    variables, model_config, report = adapt_run.adapt_clips(clips, checkpoint=args.checkpoint, minutes=minutes,
                                                            model=loaded, progress=not args.quiet, log=log,
                                                            stop=interrupt.check)
    why = adapt_run.no_gain(report)
    if why:  # stabilize with the network it started from
        print(f"warning: {why}; stabilizing with the unadapted model", file=sys.stderr, flush=True)
        return
    adapt_run.save(folder, variables, model_config, loaded[2], report, overwrite=True)
    args.checkpoint, args.reference = folder, loaded[4]


def _stabilize(args, runner, est, config, outputs) -> dict:
    motion = runner.MotionOptions(motion_path=args.path, ignore_fingerprint=args.ignore_fingerprint)
    return runner.stabilize_video(args.input, args.output, est, config, outputs, motion, fps=args.fps,
                                  progress=not args.quiet, checked=True)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    # camflow's Predictor turns on the compile cache (docs/performance.md, "Compile once"); the
    # other estimators import no JAX
    return harness.run_cli(lambda: _run(args), verbose=args.verbose)


def adapt_note(stats: dict, agree_px: float) -> str:
    """The note ``--adapt`` ends with: on how many pairs the adapted and the unadapted model's
    motions agreed (averaged) and, of the others, on how many the unadapted one's was kept
    (``stats``: the estimator's, with ``calls``, ``averaged_pairs`` and ``reference_pairs``)."""
    averaged = stats["averaged_pairs"]
    others = stats["calls"] - averaged
    return (f"note: --adapt: the adapted and the unadapted model agreed within {agree_px:g} px on {averaged} of "
            f"{stats['calls']} pairs (their mean kept)"
            + (f"; of the other {others}, the unadapted model's motion fitted {stats['reference_pairs']} better "
               "(kept there)" if others else ""))


def _run(args) -> int:
    try:
        from camflow_jax.stabilization import estimators, fingerprint, motion_file, pipeline, profiles, runner
    except ImportError as e:  # e.g. an optional plotting dependency
        raise ValueError(f"missing dependency: {e}") from e

    config = pipeline.StabilizerConfig(
        smoothing=profiles.SmoothingParams(max_radius=args.smoothing,
                                           min_radius=min(3, args.smoothing),
                                           strength=args.strength),
        crop=args.crop, max_zoom=args.max_zoom, border=args.border)
    with_metrics = args.metrics and not args.no_metrics
    outputs = runner.OutputOptions(report=args.report, with_metrics=with_metrics,
                                   with_plots=with_metrics and not args.no_plots,
                                   export_motion=args.export_motion, overwrite=args.overwrite)
    paths = runner.report_paths(args.output, outputs.report)
    wanted = [paths["json"]] + ([paths["path_plot"], paths["tracks_plot"]] if outputs.with_plots else [])
    named = "--report " + args.report if args.report else "-o " + args.output
    runner.check_distinct(args.output, paths, outputs.export_motion, outputs.with_plots,
                          names=("-o", f"named after {named}", "--export-motion"))
    runner.check_outputs(args.input, args.output, wanted + [outputs.export_motion],
                         outputs.overwrite, inputs=[args.path, args.depth, args.checkpoint,
                                                    args.estimator.partition(":")[2] or None])
    if args.export_motion:
        motion_file.check_extension(args.export_motion)
    if args.ignore_fingerprint and not args.path:
        print(f"note: {fingerprint.IGNORE_FLAG} has no effect without --path", file=sys.stderr)
    has_motion = bool(args.path) and motion_file.read(args.path).has_motion
    with contextlib.ExitStack() as stack:
        if args.adapt:
            _adapt_first(args, has_motion, stack)
        elif args.adapt_minutes is not None:
            print("note: --adapt-minutes has no effect without --adapt", file=sys.stderr)
        est = None if has_motion else _estimator(args, estimators)
        if est is not None and args.adapt:
            est.predictor  # loaded while the adapted checkpoint's scratch folder exists
        result = _stabilize(args, runner, est, config, outputs)
    for w in result.get("notes", []):

        print(f"note: {w}", file=sys.stderr)
    for w in result.get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    stats = result.get("estimator_stats") or {}
    if not args.quiet and "reference_pairs" in stats:
        print(adapt_note(stats, estimators.AGREE_PX), file=sys.stderr)
    if not args.quiet:
        m = result.get("metrics", {}).get("output", {})
        line = f"wrote {result['frames']} frames to {args.output} (zoom {result['zoom']:.3f})"
        if m:
            line += (f"; stability {_fmt(m['stability'])} (translation {_fmt(m.get('stability_translation'))}, "
                     f"rotation {_fmt(m.get('stability_rotation'))}), jitter {_fmt(m.get('jitter_px'))} px, "
                     f"cropping {_fmt(m['cropping'])} (black border {_fmt(m.get('border_fraction'))}), "
                     f"distortion {_fmt(m['distortion'])}; scored on the written output")
        print(line + f"; report {result['report']}")
    return 0


if __name__ == "__main__":
    harness.exit_process(main())
