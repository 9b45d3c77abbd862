r"""Adapt CamFlow+ to your footage: ``python -m camflow_jax.adapt``.

    python -m camflow_jax.adapt clip.mp4 -o adapted/                 # the shipped model, ~4.5 min
    python -m camflow_jax.adapt a.mp4 frames_dir/ -o adapted/ --minutes 10
    python -m camflow_jax.adapt clip.mp4 -o adapted/ --checkpoint my_model/
    python -m camflow_jax.stabilize clip.mp4 -o steady.mp4 --checkpoint adapted/

The refined model labels consecutive frame pairs of the inputs (the teacher: docs/adaptation.md),
the network is fine-tuned on those labels mixed with synthetic scenes within ``--minutes``
(labels included), and the network alone is checked against the teacher on pairs it did not
learn from, before and after. OUTDIR receives ``model.json``, ``weights.npz`` (a checkpoint that
``estimate``, ``stabilize``, ``evaluate`` and ``export`` take with ``--checkpoint OUTDIR``) and
``adapt.json`` (the report), all at once: an interrupted or failed run leaves what was there.
An existing checkpoint in OUTDIR is replaced only with ``-y``. Labels are cached per user
(``--no-cache`` skips the cache). Failures are one ``error:`` line, exit 2; SIGINT / SIGTERM
exit 130 / 143 with nothing written.
"""

from __future__ import annotations

if __name__ == "__main__":
    # signals handled from the first moment, as every entry point (camflow_jax/io/interrupt.py)
    from camflow_jax.io import interrupt
    interrupt.block()  # pending, not lost, until install() (also across the re-execution)
    from camflow_jax.cli import runtime
    runtime.use_huge_pages()
    interrupt.install()

import argparse
import sys
from collections.abc import Sequence

from camflow_jax.cli import harness

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    from camflow_jax.adaptation.config import DEFAULT_MINUTES, TRAINABLE, AdaptConfig

    d = AdaptConfig()
    p = argparse.ArgumentParser(prog="python -m camflow_jax.adapt", formatter_class=argparse.RawTextHelpFormatter,
                                description="Fine-tune CamFlow+ on your own videos or frame folders, "
                                            "with the refined model as teacher.")
    p.add_argument("inputs", nargs="+", type=harness.path_arg, metavar="INPUT", help="videos or frame folders")
    p.add_argument("-o", "--out", required=True, type=harness.path_arg, help="output checkpoint folder")
    p.add_argument("-y", "--overwrite", action="store_true", help="replace a checkpoint already in the output folder")
    p.add_argument("--checkpoint", default=None, type=harness.path_arg,
                   help="the model to adapt (default: the shipped model)")
    p.add_argument("--minutes", type=harness.finite_float, default=DEFAULT_MINUTES,
                   help=f"budget of the whole run, labels included (default {DEFAULT_MINUTES:g})")
    p.add_argument("--steps", type=harness.int_at_least(1), default=None,
                   help="train this many steps instead of filling the budget")
    p.add_argument("--max-frames", type=harness.int_at_least(3), default=None,
                   help="read at most this many frames of each input")
    p.add_argument("--lr", type=harness.finite_float, default=d.learning_rate, help=f"Adam's rate (default {d.learning_rate:g})")
    p.add_argument("--trainable", choices=sorted(TRAINABLE), default=d.trainable,
                   help=f"which parameters learn (default {d.trainable})")
    p.add_argument("--no-synthetic", action="store_true",
                   help="learn from the footage alone (no synthetic pairs mixed in against forgetting)")
    p.add_argument("--occluders", type=harness.finite_float, default=d.occluders,
                   help=f"share of footage pairs given a pasted moving object while learning, so that the network "
                        f"learns to ignore objects that move by themselves (default {d.occluders:g})")
    p.add_argument("--holdout", type=harness.finite_float, default=0.125,
                   help="share of the pairs kept apart to check on (default 0.125, every 8th pair)")
    p.add_argument("--split-by-time", action="store_true",
                   help="hold out the last share of each clip instead of every k-th pair")
    p.add_argument("--no-two-motions", action="store_true",
                   help="label every pair by the refined flow, also where a large object moving by itself bends it "
                        "(by default such pairs are labelled by the camera's motion, docs/adaptation.md)")
    p.add_argument("--no-cache", action="store_true", help="do not keep or read teacher labels on disk")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    harness.add_verbose_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from camflow_jax.compilation import cache

    cache.enable()
    return harness.run_cli(lambda: _run(args), verbose=args.verbose)


def _run(args) -> int:
    if args.minutes <= 0:
        raise ValueError(f"--minutes must be > 0, got {args.minutes:g}")
    if not 0 < args.holdout < 1:
        raise ValueError(f"--holdout must be a share in (0, 1), got {args.holdout:g}")
    if args.lr <= 0:
        raise ValueError(f"--lr must be > 0, got {args.lr:g}")
    if not 0 <= args.occluders <= 1:
        raise ValueError(f"--occluders must be a share in [0, 1], got {args.occluders:g}")
    from camflow_jax.adaptation import run
    from camflow_jax.adaptation.config import AdaptConfig
    from camflow_jax.adaptation.teacher import TeacherSettings
    from camflow_jax.io import interrupt

    config = AdaptConfig(learning_rate=args.lr, trainable=args.trainable, max_steps=args.steps,
                         synthetic_batch=0 if args.no_synthetic else AdaptConfig().synthetic_batch,
                         occluders=args.occluders)

    def log(m):
        print(m, file=sys.stderr, flush=True)

    report = run.adapt(args.inputs, args.out, checkpoint=args.checkpoint, minutes=args.minutes,
                       max_frames=args.max_frames, overwrite=args.overwrite, config=config,
                       teacher=TeacherSettings(two_motions=not args.no_two_motions),
                       holdout=args.holdout, split_by_time=args.split_by_time,
                       cache_dir=None if args.no_cache else "default", progress=not args.quiet, log=log,
                       stop=interrupt.check)
    print(f"wrote {args.out} (use it with --checkpoint {args.out}); report in {args.out}/{run.REPORT}")
    before, after = report["heldout_error_before_px"], report["heldout_error_after_px"]
    if before is not None and after is not None and after > before:
        print(f"note: the adapted network is further from the teacher on the held-out pairs ({before:.2f} -> "
              f"{after:.2f} px): more minutes, a lower --lr, or keep the previous model", file=sys.stderr)
    return 0


if __name__ == "__main__":
    harness.exit_process(main())
