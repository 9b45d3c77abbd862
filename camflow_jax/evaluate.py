r"""Benchmark evaluation from the command line: ``python -m camflow_jax.evaluate``.

    python -m camflow_jax.evaluate --dataset=synthetic --num=100 \
        --methods=identity,sift_magsac,dis,camflow --checkpoint=CKPT --out=out/eval_synth
    python -m camflow_jax.evaluate --dataset=ghof_cam --data=GHOF-Cam.npy --methods=... --out=DIR
    python -m camflow_jax.evaluate --dataset=cahomo --data=CAHomo/Test --methods=... --out=DIR

This module parses the arguments and prints; the work is the library
:mod:`camflow_jax.evaluation` (datasets, protocols, methods, benchmark, reports; flag-free:
:func:`camflow_jax.evaluation.benchmark.evaluate`, re-exported here as :func:`evaluate`).
Datasets and metrics: :mod:`camflow_jax.evaluation.protocols`. Methods: the estimator registry's
names (:mod:`camflow_jax.estimators.registry`); ``camflow`` gives the rows ``camflow`` (refined) and
``camflow_net`` (the network alone); several checkpoints ``--checkpoint=b8=DIR8,b24=DIR24`` give
``camflow:b8``, ``camflow:b24`` (the basis-count ablation); and the evaluation-only oracles
``gt_homography`` (the dataset's homography label as a flow) and ``gyro`` (GHOF gyro field).
Feature methods that fail (too few matches) fall back to identity; the fallbacks are counted in
``meta.json``.

Outputs in ``--out``: ``results.json``, ``results.csv``, ``results.md``, ``per_sample.csv``,
``meta.json`` (:mod:`camflow_jax.evaluation.reports`). The CLI refuses an ``--out`` that already
holds these files unless ``-y/--overwrite`` is given, and an unwritable one before the
evaluation starts; the files are written to a temporary folder and moved in when complete
(docs/what_the_tools_refuse.md). Flags are spelled with hyphens (``--no-progress``); the older
underscore spellings still work. Bad input (a damaged ``--data`` file is named, ``--num`` below 1
is refused): one ``error:`` line, exit status 2; ``--verbose`` adds the traceback.
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
import os
from collections.abc import Sequence

from camflow_jax.cli import harness
from camflow_jax.compilation import cache
from camflow_jax.data.datasets import DATASETS, load_dataset
from camflow_jax.estimators import registry
from camflow_jax.evaluation.benchmark import evaluate
from camflow_jax.evaluation.methods import ORACLES, parse_checkpoints
from camflow_jax.evaluation.reports import BENCHMARK_FILES, benchmark_summary, write_benchmark
from camflow_jax.io import atomic, errors

__all__ = ["evaluate", "build_parser", "main"]


def _parse_size(text: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be HxW, e.g. 320x576; got {text!r}") from None
    if h <= 0 or w <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return h, w


_positive_int = harness.int_at_least(1, why="an empty table is not a result")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m camflow_jax.evaluate",
                                description="Evaluate camera-motion estimators on a benchmark.")
    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--data", default=None, type=harness.path_arg,
                   help="benchmark path (synthetic: optional texture folder)")
    p.add_argument("--methods", default="identity,sift_magsac",
                   help="comma-separated estimator names (" + ",".join(registry.NAMES)
                   + ", camflow:LABEL) or oracles (" + ",".join(ORACLES) + ")")
    p.add_argument("--checkpoint", default=None, type=harness.path_arg,
                   help="checkpoint dir for 'camflow'; several as label=DIR,label2=DIR2")
    p.add_argument("-o", "--out", default=None, type=harness.path_arg, help="output folder for results.json/.csv/.md")
    p.add_argument("-y", "--overwrite", action="store_true",
                   help="replace an existing result in the output folder")
    p.add_argument("--num", type=_positive_int, default=None,
                   help="synthetic: number of held-out samples (default 100); others: first N only")
    p.add_argument("--seed", type=int, default=1000, help="synthetic held-out seed")
    p.add_argument("--size", type=_parse_size, default=(320, 576), help="synthetic image size HxW")
    # Flags are spelled with hyphens like the other tools; the underscore forms still work.
    p.add_argument("--depth-dir", "--depth_dir", dest="depth_dir", default=None, type=harness.path_arg,
                   help="per-sample depth files (see data/benchmarks.py)")
    p.add_argument("--intrinsics", type=harness.intrinsics_arg, default=None, help="fx,fy,cx,cy override")
    p.add_argument("--list-file", "--list_file", dest="list_file", default=None, type=harness.path_arg,
                   help="CAHomo pair list (default test.txt)")
    p.add_argument("--iqa-form", "--iqa_form", dest="iqa_form", default="masked",
                   choices=("masked", "zeroed"))
    p.add_argument("--channel-order", "--channel_order", dest="channel_order", default="rgb",
                   choices=("rgb", "bgr"), help="colour order of the images as fed to the network")
    p.add_argument("--no-refine", action="store_true",
                   help="camflow rows without test-time refinement (camflow -> camflow_net only)")
    harness.add_refine_size_flag(p)
    p.add_argument("--no-progress", "--no_progress", dest="no_progress", action="store_true")
    harness.add_verbose_flag(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cache.enable()  # compiled programs kept per user (docs/performance.md, "Compile once")
    return harness.run_cli(lambda: _run(args), verbose=args.verbose)


def _run(args) -> int:
    # every --checkpoint entry well formed and present, said before anything is loaded
    ckpts = [path for _, path in parse_checkpoints(args.checkpoint, must_exist=True)]
    if args.out is not None:  # refused or unwritable: said before the evaluation runs
        atomic.check_output_dir(args.out, BENCHMARK_FILES, args.overwrite,
                                   inputs=[args.data, args.depth_dir, args.list_file] + ckpts)
    methods = args.methods
    harness.check_refine_size(args.refine_size, args.no_refine)
    if args.no_refine:
        methods = ",".join(registry.without_refinement(m.strip()) for m in methods.split(","))
    with errors.reading(args.data, "benchmark data"):  # a damaged file is named
        source = load_dataset(args.dataset, args.data, num=args.num, seed=args.seed, size=args.size,
                              depth_dir=args.depth_dir, intrinsics=args.intrinsics,
                              list_file=args.list_file)
    run = evaluate(args.dataset, methods, data=args.data, checkpoints=args.checkpoint,
                   num=args.num, seed=args.seed, size=args.size, depth_dir=args.depth_dir,
                   intrinsics=args.intrinsics, list_file=args.list_file, out_dir=None,
                   iqa_form=args.iqa_form, channel_order=args.channel_order,
                   progress=not args.no_progress, verbose=False, source=source,
                   refine_size=args.refine_size)
    if args.out is not None:
        # Without -y the move into place also refuses results another run wrote meanwhile.
        with atomic.atomic_dir(args.out, BENCHMARK_FILES, overwrite=args.overwrite) as tmp:
            write_benchmark(tmp, run)
    print(benchmark_summary(run))
    if args.out is not None:
        print(f"wrote {os.path.join(args.out, 'results.json')} (+ .csv, .md, per_sample.csv, meta.json)")
    return 0


if __name__ == "__main__":
    harness.exit_process(main())
