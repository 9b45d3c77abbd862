"""Synthetic parallax pairs written to disk with a contact sheet, and the renderer's speed per
category: the work behind ``python tools/render_synthetic.py`` (docs/synthetic.md).

:func:`write_samples`: per sample i, ``DIR/sample_{i:05d}.npz`` (every key of
``SyntheticScenes[i]``) and ``DIR/sample_{i:05d}_img1.png`` / ``_img2.png``; plus
``DIR/contact_sheet.png`` with one row per sample: img1 | img2 | flow_f colour (valid pixels) |
depth1 | valid_f, labelled by index and category (:func:`sample_row`, :func:`contact_sheet`).
:func:`time_categories`: wall and CPU time per sample, per category.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence

import cv2
import numpy as np

from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.io.viz import flow_to_color

__all__ = ["COLUMNS", "depth_picture", "sample_row", "contact_sheet", "write_samples", "time_categories"]

#: The contact sheet's columns, left to right.
COLUMNS = ("img1", "img2", "flow_f (valid)", "depth1 (near = bright)", "valid_f")


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


def write_samples(source: SyntheticScenes, out, start: int, num: int, sheet_width: int | None = None,
                  progress: Callable[[int, float], None] | None = None) -> str:
    """Writes samples ``start .. start + num - 1`` of ``source`` and the contact sheet (tiles
    ``sheet_width`` px wide) into the folder ``out`` (created if missing); ``progress(n,
    seconds per sample so far)`` after each sample. Returns the contact sheet's path."""
    out = str(out)
    os.makedirs(out, exist_ok=True)
    rows = []
    t0 = time.perf_counter()
    for i in range(start, start + num):
        s = source[i]
        stem = os.path.join(out, f"sample_{i:05d}")
        np.savez_compressed(stem + ".npz", **{k: np.asarray(v) for k, v in s.items()})
        cv2.imwrite(stem + "_img1.png", cv2.cvtColor(s["img1"], cv2.COLOR_RGB2BGR))
        cv2.imwrite(stem + "_img2.png", cv2.cvtColor(s["img2"], cv2.COLOR_RGB2BGR))
        rows.append(sample_row(s, sheet_width, f"{i} {s['category']}"))
        n = i - start + 1
        if progress is not None:
            progress(n, (time.perf_counter() - t0) / n)
    sheet = os.path.join(out, "contact_sheet.png")
    cv2.imwrite(sheet, cv2.cvtColor(contact_sheet(rows, sheet_width), cv2.COLOR_RGB2BGR),
                [cv2.IMWRITE_PNG_COMPRESSION, 9])
    return sheet


def time_categories(categories: Sequence[str], num: int, *, seed: int = 0, start: int = 0, height: int = 320,
                    width: int = 576, textures_dir=None, num_textures: int = 24) -> Iterator[dict]:
    """Times ``num`` samples per category (texture bank built and caches warmed beforehand by
    one untimed sample); yields one dict per category as it is measured: ``category`` and the
    per-sample ``wall_s`` and ``cpu_s`` lists.

    OpenCV is limited to one thread meanwhile; run under ``taskset -c 0`` for a strict one-core
    figure."""
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        for cat in categories:
            source = SyntheticScenes(seed=seed, num_samples=start + num + 1, height=height, width=width,
                                     categories=(cat,), textures_dir=textures_dir, num_textures=num_textures)
            source[start + num]  # warm-up: texture bank, caches
            wall, cpu = [], []
            for i in range(start, start + num):
                t0, c0 = time.perf_counter(), time.process_time()
                source[i]
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            yield {"category": cat, "wall_s": wall, "cpu_s": cpu}
    finally:
        cv2.setNumThreads(threads)
