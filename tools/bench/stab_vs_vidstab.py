"""Our stabilizer (each estimator) side by side with ffmpeg's vid.stab, in one run.

    python -m tools.bench stab_vs_vidstab --estimators klt_ransac,camflow \\
        --frames 120 --size 288x384 --seed 0 --out results.json

Clips: OpenCV's vtest.avi (``apt-get install opencv-doc``; ``--video`` for another still-camera
video) shaken by a seeded known motion, and the synthetic moving-object clip with and without
its object (``--synthetic-size``, ``--synthetic-frames``; ``--no-synthetic`` skips them);
``--hard`` adds the hard set (:func:`tools.bench.stabilization.hard_clips`); ``--clips`` keeps
only the named ones. ``--adapt-minutes M`` adds a row per clip with the network adapted to it
first, one per ``--adapt-seeds`` seed (the adaptation's own randomness: batches, synthetic pairs),
measured as ``stabilize --adapt`` measures it: with the unadapted model beside the adapted one,
per pair their mean where they agree, else the better-fitting motion
(:class:`camflow_jax.stabilization.estimators.CamFlowEstimator`; ``--adapted-alone`` adds a row
with the same adapted model alone).
``--checkpoint DIR``: the model the camflow estimators run (default: the shipped one). The
work is :func:`tools.bench.stabilization.compare_with_vidstab`; this script parses
arguments and prints the table (with the load average: timings on a shared machine are
indicative).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from camflow_jax.adaptation.config import AdaptConfig
from camflow_jax.cli import harness
from camflow_jax.compilation import cache
from camflow_jax.estimators import registry
from camflow_jax.io import atomic
from camflow_jax.stabilization import estimators as stab_estimators
from tools.bench.timing import as_users_run, load_average


def _size(text: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be HxW, got {text!r}") from None
    if h < 16 or w < 16:
        raise argparse.ArgumentTypeError(f"size must be at least 16x16, got {text!r}")
    return h, w


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be integers separated by commas, got {text!r}") from None
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"seeds must be distinct, got {text!r}")
    return seeds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--estimators", default=f"{stab_estimators.DEFAULT},camflow",
                   help="comma-separated registry names (camflow_jax.estimators.registry; default: "
                        "the stabilizer's default and camflow)")
    p.add_argument("--checkpoint", default=None,
                   help="CamFlow checkpoint for the camflow / camflow_net estimators (default: the shipped model)")
    p.add_argument("--video", help="a still-camera video to shake (default: OpenCV's vtest.avi)")
    p.add_argument("--frames", type=harness.int_at_least(8), default=120)
    p.add_argument("--size", type=_size, default=(288, 384), help="HxW the video is scaled to")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--synthetic-size", type=_size, default=(192, 320))
    p.add_argument("--synthetic-frames", type=harness.int_at_least(8), default=90)
    p.add_argument("--no-synthetic", action="store_true", help="only the shaken video")
    p.add_argument("--no-vidstab", action="store_true", help="only our stabilizer")
    p.add_argument("--hard", action="store_true",
                   help="add the hard set: the video at 144x192, dark and noisy, blurred (little texture), "
                        "and the synthetic clip with a foreground object of 45%% of the frame")
    p.add_argument("--floor", action="store_true",
                   help="add a row 'perfect' per clip: the score of the exact inverse shake (the measure's floor)")
    p.add_argument("--ecc-score", action="store_true",
                   help="also score every output with ECC-refined homographies (precise on dark, noisy or "
                        "blurred clips; docs/stabilization.md)")
    p.add_argument("--adapt-minutes", type=harness.finite_float, default=None, metavar="M",
                   help="add a row camflow+adapt per clip: the network adapted to that clip first "
                        "(camflow_jax.adaptation, M minutes, labels included), as stabilize --adapt does")
    p.add_argument("--adapt-seeds", type=_seeds, default=(AdaptConfig().seed,), metavar="S[,S...]",
                   help="with --adapt-minutes: one adapted row per seed (AdaptConfig.seed; default: its default)")
    p.add_argument("--adapted-alone", action="store_true",
                   help="with --adapt-minutes: also a row camflow+adapt(alone) per adapted model: the adapted model "
                        "without the unadapted one measuring each pair beside it (stabilize --adapt's guard, since "
                        "7 Dec 2026)")
    p.add_argument("--clips", type=lambda t: [c for c in t.split(",") if c], default=None, metavar="NAME[,NAME...]",
                   help="only these clips (vtest_shaken, moving_object, no_object and, with --hard, low_res, "
                        "dark_noisy, low_texture, large_foreground)")
    p.add_argument("--out", help="JSON file for all rows")
    args = p.parse_args(argv)
    cache.enable()  # compiled programs kept per user (docs/performance.md, "Compile once")

    def body() -> int:
        from camflow_jax.stabilization import clips
        from tools.bench import stabilization

        names = [registry.resolve(n)[0] for n in args.estimators.split(",") if n]
        video = args.video or stabilization.find_vtest()
        if video is None:
            raise FileNotFoundError("vtest.avi not found (apt-get install opencv-doc) and no --video given")
        if not os.path.isfile(video):
            raise FileNotFoundError(f"video not found: {video}")
        fps = 10.0 if os.path.basename(video) == "vtest.avi" else 30.0
        named = {"vtest_shaken": clips.shake_video(
            stabilization.decode_video(video, args.frames, args.size), args.seed, fps=fps)}
        if not args.no_synthetic:
            h, w = args.synthetic_size
            for obj in (True, False):
                named["moving_object" if obj else "no_object"] = clips.moving_object_clip(
                    args.synthetic_frames, h, w, seed=args.seed, with_object=obj)
        if args.hard:
            named.update(stabilization.hard_clips(video, args.frames, args.size, args.seed, fps,
                                                  args.synthetic_size, args.synthetic_frames))
        if args.clips:
            unknown = sorted(set(args.clips) - set(named))
            if unknown:
                raise ValueError(f"--clips: no clip named {', '.join(unknown)} here (the clips: {', '.join(named)})")
            named = {k: v for k, v in named.items() if k in args.clips}
        factories = {n: stab_estimators.make_estimator(n, checkpoint=args.checkpoint).fresh for n in names}
        load0 = load_average()
        rows = stabilization.compare_with_vidstab(named, factories, vidstab=not args.no_vidstab, floor=args.floor,
                                                  ecc=args.ecc_score,
                                                  log=lambda m: print(m, file=sys.stderr, flush=True))
        if args.adapt_minutes:
            rows += _adapted_rows(named, args)
        print(stabilization.comparison_table(rows))
        print(f"load average before: {load0}, after: {load_average()}")
        if args.out:
            atomic.write_text_atomic(args.out, json.dumps(
                {"rows": rows, "video": video, "load_before": load0,
                 "load_after": load_average()}, indent=1, default=float))
        return 0

    return harness.run_cli(body)


def _adapted_rows(named: dict, args) -> list[dict]:
    """camflow with the network adapted to each clip before it stabilizes that clip."""
    import tempfile

    from camflow_jax.adaptation import run as adapt_run
    from camflow_jax.adaptation.footage import Clip
    from tools.bench import stabilization

    rows = []
    loaded = adapt_run.load_model(args.checkpoint)
    for cname, clip in named.items():
        for seed in args.adapt_seeds:
            method = "camflow+adapt" if len(args.adapt_seeds) == 1 else f"camflow+adapt(seed={seed})"
            with tempfile.TemporaryDirectory() as tmp:
                variables, model_config, report = adapt_run.adapt_clips(
                    [Clip(cname, clip.frames[:300])], minutes=args.adapt_minutes, model=loaded, progress=False,
                    config=AdaptConfig(seed=seed), log=lambda m: print(m, file=sys.stderr, flush=True))
                adapt_run.save(tmp, variables, model_config, loaded[2], report, overwrite=True)
                # as stabilize --adapt: the model it started from measures each pair too
                guarded = stab_estimators.make_estimator("camflow", checkpoint=tmp, reference=loaded[4])
                factories = {method: guarded.fresh}
                if args.adapted_alone:  # the same loaded adapted model, without the reference
                    factories[method.replace("adapt", "adapt(alone)", 1)] = stab_estimators.CamFlowEstimator(
                        guarded.predictor).fresh
                for row in stabilization.compare_with_vidstab({cname: clip}, factories, vidstab=False,
                                                              ecc=args.ecc_score,
                                                              log=lambda m: print(m, file=sys.stderr, flush=True)):
                    row.update(adapt_seed=seed, adapt_seconds=report["total_seconds"], adapt_steps=report["steps"],
                               adapt_heldout_before_px=report["heldout_error_before_px"],
                               adapt_heldout_after_px=report["heldout_error_after_px"])
                    rows.append(row)
    return rows


#: ``python -m tools.bench stab_vs_vidstab``: :func:`main` as ``stabilize`` runs (huge pages: ``--adapt-minutes``
#: buys the steps ``stabilize --adapt`` does).
command = as_users_run(main)


if __name__ == "__main__":
    harness.exit_process(command())
