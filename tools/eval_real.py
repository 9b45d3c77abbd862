"""Camera-motion estimators on real images that Debian's ``opencv-doc`` package ships (no download).

    apt-get install opencv-doc        # /usr/share/doc/opencv-doc/examples/data
    python tools/eval_real.py [--data DIR] [--out out/eval_real] [--checkpoint CKPT]
        [--methods identity,sift_magsac,dis,camflow,camflow_net,oracle_homography,oracle_h12,oracle_span36]
        [--estimators sift_ransac,dis,camflow] [--frames 120] [--parts stereo,video]

Stereo on Middlebury 'Aloe' and video on vtest.avi (docs/real_images.md). This script parses
the arguments and prints; the experiments are :mod:`tools.bench.real`, the tables
:func:`camflow_jax.evaluation.reports.real_markdown`. ``--methods`` and ``--estimators`` take
the estimator registry's names (:mod:`camflow_jax.estimators.registry`; old names such as
``sift`` work with a note); ``--methods`` also takes the evaluation-only oracles. The CamFlow
rows use ``--checkpoint`` or, without it, the model shipped in the package; when neither exists
they are skipped with a note.

Exit status: 0, or 2 with one line when the data (or an argument) is missing or a file cannot
be read or written (``--verbose`` adds the traceback; an unwritable ``--out`` is found before
the evaluation runs); 130 / 143 after SIGINT / SIGTERM. The two
result files are written together (a hidden folder moved in when both are complete).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # camflow_jax from this checkout, installed or not
    sys.path.insert(0, str(ROOT))

from camflow_jax.cli import harness  # noqa: E402
from camflow_jax.compilation import cache  # noqa: E402
from camflow_jax.estimators import registry  # noqa: E402
from camflow_jax.evaluation import reports  # noqa: E402
from camflow_jax.io import atomic  # noqa: E402
from tools.bench import opencv_doc, real  # noqa: E402

PARTS = ("stereo", "video")
#: The files --out receives (replaced on every run; other files in the folder are kept).
OUTPUTS = ("results.json", "results.md")


def _items(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, help="folder with "
                   f"{', '.join(opencv_doc.STEREO_FILES + (opencv_doc.VIDEO_FILE,))} (default {opencv_doc.OPENCV_DOC})")
    p.add_argument("--out", default="out/eval_real", help="writes results.json and results.md here")
    p.add_argument("--checkpoint", default=None,
                   help="CamFlow checkpoint (default: the model shipped in the package, if any)")
    p.add_argument("--methods", default=",".join(real.PAIR_METHODS),
                   help="stereo rows: estimator names and oracles " + ",".join(real.ORACLES))
    p.add_argument("--estimators", default=",".join(real.VIDEO_ESTIMATORS), help="video stabilizer estimators")
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--frames", type=int, default=120, help="video frames (from the start)")
    p.add_argument("--width", type=int, default=576, help="stereo working width (aspect kept)")
    p.add_argument("--fx-scales", default="0.7,1.4", help="extra camflow_net depth rows with fx scaled")
    p.add_argument("--seed", type=int, default=0, help="shake seed")
    p.add_argument("--margin", type=int, default=48, help="crop per side of the shaken video (px)")
    p.add_argument("--image-metrics", action="store_true",
                   help="also render the stabilized clips and measure stability/cropping/distortion "
                        "with SIFT (metrics.MetricsAccumulator; ~2 min more per clip and estimator on 2 cores)")
    harness.add_refine_size_flag(p)
    harness.add_verbose_flag(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    cache.enable()  # compiled programs kept per user (docs/performance.md, "Compile once")
    return harness.run_cli(lambda: _run(args, argv), verbose=args.verbose)


def _run(args, argv) -> int:
    parts = _items(args.parts)
    bad = [v for v in parts if v not in PARTS]
    if bad:
        raise ValueError(f"unknown part {', '.join(bad)}; choose from {', '.join(PARTS)}")
    methods, notes = real.check_pair_methods(_items(args.methods))
    video_names, video_notes = real.check_video_estimators(_items(args.estimators))
    harness.check_refine_size(args.refine_size, no_refine=False)
    registry.require_refined_method(args.refine_size, (methods if "stereo" in parts else [])
                                 + (video_names if "video" in parts else []))
    fx_scales = tuple(float(v) for v in _items(args.fx_scales))
    if args.frames < 4:
        raise ValueError("--frames must be >= 4")
    for note in notes + video_notes:
        print(f"note: {note}", file=sys.stderr)
    data = Path(args.data or opencv_doc.OPENCV_DOC)
    needed = (list(opencv_doc.STEREO_FILES) if "stereo" in parts else []) \
        + ([opencv_doc.VIDEO_FILE] if "video" in parts else [])
    missing = [f for f in needed if not (data / f).is_file()]
    if missing:
        extra = "" if args.data is None else f" (or a --data folder with {', '.join(missing)}; {data} lacks them)"
        print(f"error: {data}: {opencv_doc.MISSING_DATA}{extra}", file=sys.stderr)
        return 2
    if args.out:  # refused or unwritable: said before the evaluation runs, as evaluate does
        atomic.check_output_dir(args.out, OUTPUTS, overwrite=True, inputs=[data, args.checkpoint])
    methods = methods if "stereo" in parts else []
    video_names = video_names if "video" in parts else []
    model, note = None, "not requested"
    if any(n in ("camflow", "camflow_net") for n in methods + video_names):
        model, note = real.load_model(args.checkpoint)
        print(f"CamFlow: {note}")
    pair = real.pair_estimators(methods, model, note, args.refine_size)
    video = real.video_estimators(video_names, model, note, args.refine_size)
    results = {"command": "python tools/eval_real.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "data": str(data), "refine_size": args.refine_size}
    if "stereo" in parts:
        results["stereo"] = real.stereo_experiment(data, args.width, methods, pair, fx_scales, camflow_note=note)
    if "video" in parts:
        results["video"] = real.video_experiment(data, args.frames, video, args.seed, args.margin,
                                                 args.image_metrics, camflow_note=note)
    md = reports.real_markdown(results)
    print(md)
    if args.out:
        with atomic.atomic_dir(args.out, OUTPUTS) as tmp:
            reports.write_json(os.path.join(tmp, "results.json"), results, indent=1)
            with open(os.path.join(tmp, "results.md"), "w") as fh:
                fh.write(md + "\n")
        print(f"wrote {os.path.join(args.out, 'results.json')} and {os.path.join(args.out, 'results.md')}")
    return 0


if __name__ == "__main__":
    harness.exit_process(main())
