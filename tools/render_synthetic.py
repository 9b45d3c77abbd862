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
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import cv2
import numpy as np

from camflow_jax.data.synthetic import CATEGORIES, SyntheticScenes
from camflow_jax.viz import flow_to_color


def depth_picture(depth: np.ndarray) -> np.ndarray:
    """Inverse depth mapped to grey (near = bright), uint8 RGB."""
    inv = 1.0 / np.asarray(depth, np.float64)
    lo, hi = np.percentile(inv, 1), np.percentile(inv, 99)
    g = np.clip((inv - lo) / max(hi - lo, 1e-12), 0, 1)
    return np.repeat((g * 255).astype(np.uint8)[..., None], 3, -1)


def sample_row(s: dict, tile_width: int | None = None, label: str | None = None) -> np.ndarray:
    """One contact-sheet row (uint8 RGB): img1 | img2 | flow | depth | valid."""
    valid = s["valid_f"] > 0
    flow = np.where(valid[..., None], s["flow_f"], 0.0)
    tiles = [s["img1"], s["img2"], flow_to_color(flow), depth_picture(s["depth1"]),
             np.repeat((valid * 255).astype(np.uint8)[..., None], 3, -1)]
    h, w = s["img1"].shape[:2]
    if tile_width and tile_width != w:
        th = max(1, round(h * tile_width / w))
        tiles = [cv2.resize(t, (tile_width, th), interpolation=cv2.INTER_AREA) for t in tiles]
    gap = np.full((tiles[0].shape[0], 2, 3), 255, np.uint8)
    row = np.concatenate([x for t in tiles for x in (t, gap)][:-1], axis=1)
    _put_label(row, label if label is not None else s["category"], (4, 4))
    return row


COLUMNS = ("img1", "img2", "flow_f (valid)", "depth1 (near = bright)", "valid_f")


def _put_label(img: np.ndarray, text: str, origin, scale: float = 0.45) -> None:
    """White text with a black outline, top-left corner at ``origin``."""
    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    org = (int(origin[0]), int(origin[1] + th))
    for colour, thick in (((0, 0, 0), 3), ((255, 255, 255), 1)):
        cv2.putText(img, text, org, cv2.FONT_HERSHEY_SIMPLEX, scale, colour, thick, cv2.LINE_AA)


def contact_sheet(rows: list[np.ndarray], tile_width: int | None = None) -> np.ndarray:
    """Rows stacked with 2-px white gaps, under a header naming the columns."""
    gap = np.full((2, rows[0].shape[1], 3), 255, np.uint8)
    body = np.concatenate([x for r in rows for x in (r, gap)][:-1], axis=0)
    header = np.full((18, body.shape[1], 3), 255, np.uint8)
    tw = tile_width or (body.shape[1] - 8) // 5
    for j, name in enumerate(COLUMNS):
        cv2.putText(header, name, (j * (tw + 2) + 4, 13), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1,
                    cv2.LINE_AA)
    return np.concatenate([header, body], axis=0)


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
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        _time_categories(args)
    finally:
        cv2.setNumThreads(threads)
    return 0


def _time_categories(args) -> None:
    print(f"{args.height}x{args.width}, {args.num} samples per category, seed {args.seed}")
    for cat in args.categories:
        source = SyntheticScenes(seed=args.seed, num_samples=args.start + args.num + 1, height=args.height,
                                 width=args.width, categories=(cat,), textures_dir=args.textures_dir,
                                 num_textures=args.num_textures)
        source[args.start + args.num]  # warm-up: texture bank, caches
        wall, cpu = [], []
        for i in range(args.start, args.start + args.num):
            t0, c0 = time.perf_counter(), time.process_time()
            source[i]
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        print(f"{cat:5s} median {np.median(wall) * 1e3:6.1f} ms wall, {np.median(cpu) * 1e3:6.1f} ms CPU "
              f"(min {np.min(wall) * 1e3:.1f} / max {np.max(wall) * 1e3:.1f} ms wall)")


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
    os.makedirs(args.out, exist_ok=True)
    rows = []
    t0 = time.perf_counter()
    for i in range(args.start, args.start + args.num):
        s = source[i]
        stem = os.path.join(args.out, f"sample_{i:05d}")
        np.savez_compressed(stem + ".npz", **{k: np.asarray(v) for k, v in s.items()})
        cv2.imwrite(stem + "_img1.png", cv2.cvtColor(s["img1"], cv2.COLOR_RGB2BGR))
        cv2.imwrite(stem + "_img2.png", cv2.cvtColor(s["img2"], cv2.COLOR_RGB2BGR))
        rows.append(sample_row(s, args.sheet_width, f"{i} {s['category']}"))
        n = i - args.start + 1
        print(f"\r{n}/{args.num} samples ({(time.perf_counter() - t0) / n * 1000:.0f} ms each)",
              end="", flush=True)
    print()
    sheet = os.path.join(args.out, "contact_sheet.png")
    cv2.imwrite(sheet, cv2.cvtColor(contact_sheet(rows, args.sheet_width), cv2.COLOR_RGB2BGR),
                [cv2.IMWRITE_PNG_COMPRESSION, 9])
    print(f"wrote {args.num} samples and {sheet}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
