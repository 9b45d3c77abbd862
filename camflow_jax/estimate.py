r"""Camera motion of one image pair: ``python -m camflow_jax.estimate``.

    python -m camflow_jax.estimate IMG1 IMG2 -o OUTDIR                    # the shipped model, refined
    python -m camflow_jax.estimate IMG1 IMG2 --no-refine -o OUTDIR        # the network alone
    python -m camflow_jax.estimate IMG1 IMG2 --depth1 D1.npy --depth2 D2.npy \
        --intrinsics fx,fy,cx,cy -o OUTDIR                                # CamFlow+ with depth
    python -m camflow_jax.estimate IMG1 IMG2 --checkpoint CKPT -o OUTDIR  # your own model
    python -m camflow_jax.estimate IMG1 IMG2 --method sift_magsac -o OUTDIR   # classical
    python -m camflow_jax.estimate IMG1 IMG2 --method camflow:CKPT -o OUTDIR  # = --checkpoint CKPT

``--method`` takes any name of the estimator registry (:mod:`camflow_jax.estimators.registry`; ``--help``
lists them; old names work with a note); ``--no-refine`` turns ``camflow`` into ``camflow_net``.

Images of any size and orientation (EXIF orientation is applied when reading; portrait pairs
are handled by :class:`camflow_jax.predictor.Predictor`). Written to OUTDIR:

=======================  ===================================================================
flow_f.npy / flow_f.flo  forward flow [H, W, 2] on image 1's grid (warp(img2, flow_f) ~ img1)
flow_b.npy / flow_b.flo  backward flow on image 2's grid
img2_warped.png          image 2 warped onto image 1 (warp(img2, flow_f))
img1_warped.png          image 1 warped onto image 2 (warp(img1, flow_b))
overlay.png              red = image 1, cyan = warped image 2 (grey where aligned)
overlay_input.png        the same for the unaligned input pair
error_heatmap.png        |img1 - warped img2| (mean over channels, 0..64 levels mapped to the
                         JET colour map; black outside the warp)
flow_f_color.png         flow colour coding (direction = hue, magnitude = saturation)
confidence_f.png         exp(-log-variance) of the model (camflow only)
homography.json          3x3 homography image 1 -> image 2 (pixels) and a summary (method,
                         whether test-time refinement ran, the estimator's note)
=======================  ===================================================================

Depth and intrinsics feed CamFlow+'s depth bases: with a classical ``--method`` they are refused
(the same rule as ``stabilize``). Failures are one ``error:`` line, exit 2 (``--verbose`` adds
the traceback); SIGINT / SIGTERM stop the run cleanly (exit 130 / 143, nothing written).
Nothing is written unless the result is usable: non-finite flows or a degenerate homography
(e.g. from a damaged checkpoint or absurd intrinsics) are an error (exit 2). OUTDIR is filled
atomically (a hidden temporary folder moved into place), an existing result in it is replaced
only with ``-y/--overwrite``, and other files in it are left alone
(docs/what_the_tools_refuse.md).

Depth files: ``.npy`` / ``.npz`` (first array, or the one named ``depth``) or 16-bit / float
images (PNG, TIFF, EXR) read with OpenCV; aligned with their image.
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
import sys
from collections.abc import Sequence

import numpy as np

from camflow_jax.cli import harness
from camflow_jax.compilation import cache
from camflow_jax.data.depth import read_depth
from camflow_jax.estimators import registry
from camflow_jax.estimators.outputs import OUTPUT_FILES, check_result, estimate_pair, read_image, write_outputs
from camflow_jax.geometry import checks
from camflow_jax.io import atomic

__all__ = ["main", "build_parser"]

#: The smallest image side estimate accepts (a gradient, a warp and a homography need a few pixels).
MIN_IMAGE_SIDE = 8


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m camflow_jax.estimate",
                                description="Estimate the camera motion between two images.",
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("img1", type=harness.path_arg)
    p.add_argument("img2", type=harness.path_arg)
    p.add_argument("-o", "--out", required=True, type=harness.path_arg, help="output folder")
    p.add_argument("-y", "--overwrite", action="store_true",
                   help="replace an existing result in the output folder")
    p.add_argument("--checkpoint", default=None, type=harness.path_arg,
                   help="camflow_jax checkpoint (inference dir or workdir)")
    p.add_argument("--method", default="camflow",
                   help="an estimator (default camflow: --checkpoint, or the shipped model without "
                        "it, with test-time refinement):\n" + registry.describe())
    p.add_argument("--no-refine", action="store_true",
                   help="camflow without test-time refinement (the network alone: camflow_net)")
    harness.add_refine_size_flag(p)
    p.add_argument("--depth1", default=None, type=harness.path_arg, help="depth of image 1 (CamFlow+)")
    p.add_argument("--depth2", default=None, type=harness.path_arg, help="depth of image 2 (CamFlow+)")
    p.add_argument("--intrinsics", type=harness.intrinsics_arg, default=None,
                   help="fx,fy,cx,cy of the input images in pixels (camflow only, with depth)")
    harness.add_verbose_flag(p)
    return p


def _make_estimator(args):
    """The registry estimator the flags ask for (notes on stderr); ValueError for bad names."""
    harness.check_refine_size(args.refine_size, args.no_refine)
    name = registry.without_refinement(args.method) if args.no_refine else args.method
    name, note = registry.resolve(name)
    if note:
        print(f"note: {note}", file=sys.stderr)
    if not registry.is_camflow(name):
        for flag, given in (("--checkpoint", args.checkpoint), ("--no-refine", args.no_refine),
                            ("--refine-size", args.refine_size)):
            if given:
                print(f"note: --method {name} ignores {flag}", file=sys.stderr)
        return registry.get(name)
    if args.checkpoint and ":" in name:
        raise ValueError(f"--method {name} names a checkpoint; do not also give --checkpoint")
    # confidence=True: write_outputs saves confidence_f.png (the model loads on first use)
    size = {} if args.refine_size is None else {"refine_size": args.refine_size}
    return registry.get(name, checkpoint=args.checkpoint, confidence=True, **size)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cache.enable()  # compiled programs kept per user (docs/performance.md, "Compile once")
    return harness.run_cli(lambda: _run(args), verbose=args.verbose)


def _run(args) -> int:
    img1, img2 = read_image(args.img1), read_image(args.img2)
    for path, img in ((args.img1, img1), (args.img2, img2)):
        if min(img.shape[:2]) < MIN_IMAGE_SIDE:  # 1x1: the summary crashed; 1xN: numpy's words
            raise ValueError(f"{path} is {img.shape[1]}x{img.shape[0]} px: camera motion needs images of at "
                             f"least {MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE} px")
    h, w = img1.shape[:2]
    if (args.depth1 is None) != (args.depth2 is None):
        raise ValueError("give both --depth1 and --depth2, or neither")
    d1 = checks.check_depth(read_depth(args.depth1), args.depth1, (h, w)) if args.depth1 else None
    d2 = checks.check_depth(read_depth(args.depth2), args.depth2, img2.shape[:2]) if args.depth2 else None
    if args.intrinsics is not None:
        checks.check_intrinsics(args.intrinsics, h, w)
    est = _make_estimator(args)
    harness.camflow_only_flags(est.name, **{"--depth1": args.depth1, "--depth2": args.depth2,
                                              "--intrinsics": args.intrinsics})
    atomic.check_output_dir(args.out, OUTPUT_FILES, args.overwrite,
                               inputs=[args.img1, args.img2, args.depth1, args.depth2, args.checkpoint,
                                       getattr(est, "checkpoint", None)])
    if registry.is_camflow(est.name):
        print(f"model: {est.predictor.description}", file=sys.stderr)
        if est.predictor.num_depth and d1 is None:
            print("note: no --depth1/--depth2: the depth bases use a constant depth "
                  "(CamFlow behaviour; give depth for CamFlow+)", file=sys.stderr)
    result = estimate_pair(img1, img2, method=est, depth1=d1, depth2=d2, intrinsics=args.intrinsics)
    check_result(result, h, w)
    # Without -y the move into place also refuses a result another run wrote meanwhile.
    with atomic.atomic_dir(args.out, OUTPUT_FILES, overwrite=args.overwrite) as tmp:
        summary = write_outputs(tmp, img1, img2, result)
    H = np.asarray(summary["homography"])
    refined = " (refined)" if summary["refined"] else ""
    print(f"{summary['method']}{refined}: {img1.shape[1]}x{img1.shape[0]} pair, mean |flow| "
          f"{summary['mean_flow_magnitude_px']:.2f} px, mean |img1 - warped img2| "
          f"{_num(summary['mean_abs_error_aligned']):.2f} (input {_num(summary['mean_abs_error_input']):.2f})")
    if summary.get("note"):
        print(f"{'warning' if summary.get('fallback') else 'note'}: {summary['note']}", file=sys.stderr)
    print("homography (image 1 -> image 2):\n" + np.array2string(H, precision=5, suppress_small=True))
    print(f"wrote {args.out}/ (flow_f.npy/.flo, flow_b.npy/.flo, warped images, overlay, heat map, "
          "flow colours, homography.json)")
    return 0


if __name__ == "__main__":
    harness.exit_process(main())
