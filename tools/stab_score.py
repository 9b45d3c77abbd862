"""Score a stabilized video as the user gets it (decoded from the file), e.g. to compare our
output with ffmpeg vid.stab / deshake on the same input:

    PYTHONPATH=$PWD python tools/stab_score.py out.mp4 [--input in.mp4] [--json scores.json]

Definitions: docs/stabilization_metrics.md. Without --input only stability and the border
(cropping = 1 - border fraction) are measured; with it also the scale-based cropping and the
distortion, and the input's own scores.
"""

import argparse
import json
import sys

from camflow_jax.stabilization import metrics

KEYS = ("stability", "stability_translation", "stability_rotation", "jitter_px",
        "stability_classic", "cropping", "cropping_scale", "border_fraction",
        "border_fraction_max", "distortion", "frames", "seconds")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("output", help="stabilized video or frame folder")
    p.add_argument("--input", default=None, help="the input it was made from (same frames)")
    p.add_argument("--fps", type=float, default=None, help="override the container's rate")
    p.add_argument("--json", default=None, help="also write all scores here")
    args = p.parse_args(argv)
    res = metrics.video_metrics(args.output, args.input, fps=args.fps)
    for side in ("input", "output"):
        if side in res:
            vals = ", ".join(f"{k} {res[side][k]:.3f}" if isinstance(res[side][k], float)
                             else f"{k} {res[side][k]}" for k in KEYS if k in res[side])
            print(f"{side}: {vals}")
    print(f"homography failures: {res['failures']}")
    if args.json:
        out = {k: res[k] for k in ("input", "output", "failures") if k in res}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
