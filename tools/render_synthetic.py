"""Writes synthetic parallax pairs to disk and a contact sheet.

    python tools/render_synthetic.py --out DIR --num N [--seed S] [--height H --width W]
        [--categories RE,FOG,...] [--textures-dir PHOTOS] [--start I] [--sheet-width PX]
        [--num-textures N]
    python tools/render_synthetic.py --benchmark --num 20   # speed per category, no files

Per sample i: ``DIR/sample_{i:05d}.npz`` (every key of ``SyntheticScenes[i]``) and
``DIR/sample_{i:05d}_img1.png`` / ``_img2.png``; plus ``DIR/contact_sheet.png`` with one row per
sample: img1 | img2 | flow_f colour (valid pixels) | depth1 | valid_f, labelled by category.
The README picture docs/images/synthetic_categories.png is
``--num 5 --seed 0 --sheet-width 144`` (samples 0-4 cycle through the five categories).
This script parses the arguments and prints; the work is :mod:`camflow_jax.data.synthetic.files`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # camflow_jax from this checkout, installed or not
    sys.path.insert(0, str(ROOT))

from camflow_jax.data.synthetic import files  # noqa: E402
from camflow_jax.data.synthetic.scenes import CATEGORIES, SyntheticScenes  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="output folder (created if missing); not needed with --benchmark")
    p.add_argument("--benchmark", action="store_true",
                   help="time --num samples per category in this process (nothing is written)")
    p.add_argument("--num", type=int, required=True, help="number of samples to write")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="first sample index")
    p.add_argument("--height", type=int, default=320)
    p.add_argument("--width", type=int, default=576)
    p.add_argument("--categories", default=",".join(CATEGORIES),
                   help=f"comma-separated subset of {','.join(CATEGORIES)}")
    p.add_argument("--textures-dir", default=None, help="folder of .png/.jpg photos to use as textures")
    p.add_argument("--num-textures", type=int, default=24, help="procedural texture bank size")
    p.add_argument("--sheet-width", type=int, default=288, help="tile width in the contact sheet (px)")
    args = p.parse_args(argv)
    if not args.out and not args.benchmark:
        p.error("--out is required (or pass --benchmark)")
    if args.num < 1:
        p.error(f"--num must be >= 1, got {args.num}")
    if args.start < 0 or args.seed < 0:
        p.error("--start and --seed must be >= 0")
    if args.height < 32 or args.width < 32:
        p.error(f"--height and --width must be >= 32, got {args.height}x{args.width}")
    cats = tuple(c.strip().upper() for c in args.categories.split(",") if c.strip())
    bad = [c for c in cats if c not in CATEGORIES]
    if not cats or bad:
        p.error(f"--categories must be a comma-separated subset of {','.join(CATEGORIES)}, got {args.categories!r}")
    args.categories = cats
    if args.sheet_width < 16:
        p.error("--sheet-width must be >= 16")
    if args.num_textures < 1:
        p.error("--num-textures must be >= 1")
    return args


def benchmark(args) -> int:
    """Median wall and CPU time per sample, per category (texture bank built beforehand).

    OpenCV is limited to one thread here; run under ``taskset -c 0`` for a strict one-core figure.
    """
    print(f"{args.height}x{args.width}, {args.num} samples per category, seed {args.seed}")
    for r in files.time_categories(args.categories, args.num, seed=args.seed, start=args.start,
                                             height=args.height, width=args.width,
                                             textures_dir=args.textures_dir, num_textures=args.num_textures):
        wall, cpu = r["wall_s"], r["cpu_s"]
        print(f"{r['category']:5s} median {np.median(wall) * 1e3:6.1f} ms wall, {np.median(cpu) * 1e3:6.1f} ms CPU "
              f"(min {np.min(wall) * 1e3:.1f} / max {np.max(wall) * 1e3:.1f} ms wall)")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.benchmark:
        try:
            return benchmark(args)
        except (FileNotFoundError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    try:
        source = SyntheticScenes(seed=args.seed, num_samples=args.start + args.num, height=args.height,
                                 width=args.width, categories=args.categories,
                                 textures_dir=args.textures_dir, num_textures=args.num_textures)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    def progress(n, seconds_each):
        print(f"\r{n}/{args.num} samples ({seconds_each * 1000:.0f} ms each)", end="", flush=True)

    sheet = files.write_samples(source, args.out, args.start, args.num, args.sheet_width, progress)
    print()
    print(f"wrote {args.num} samples and {sheet}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
