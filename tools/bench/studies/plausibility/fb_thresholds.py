"""Development pairs for the forward-backward and blur thresholds (plausibility.MAX_FB_ERROR,
the blur note; docs/estimation.md, "Plausibility checks"): the refined shipped camflow (no
depth) on SyntheticScenes(seed=7) pairs (100, 320x576) and real opencv-doc pairs (vtest frames,
Aloe L/R and L/L, graffiti 1/3); zoomed (1.1x, 1.2x) and blurred (sigma 2, 4 px) image 2; and
as negatives the darkened pairs with the compensation off (photometric.MAX_SHIFT = inf).

Needs ``WORK/bench7.npz`` from :mod:`.render_benchmark` ``--seed 7``.

Usage: python -m tools.bench.studies.plausibility.fb_thresholds [N=100] [--work DIR]
"""
import argparse
import time

import cv2
import numpy as np

from camflow_jax.geometry import photometric as P
from camflow_jax.predictor import Predictor
from tools.bench.studies.plausibility._common import add_work_arg, darken, load_bench, read_image, vtest_frames


def zoom(img, z):
    """Image ``img`` zoomed ``z`` times about its centre pixel ((w-1)/2, (h-1)/2)."""
    h, w = img.shape[:2]
    M = np.array([[z, 0, (1 - z) * (w - 1) / 2], [0, z, (1 - z) * (h - 1) / 2]])
    return cv2.warpAffine(img, M, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=100, help="synthetic pairs")
    add_work_arg(ap)
    a = ap.parse_args()
    n = a.n
    b = load_bench(a.work, 7)
    pred = Predictor.from_pretrained()
    rows = []
    t = time.time()
    outs = pred.predict_batch(list(b["img1"][:n]), list(b["img2"][:n]), batch_size=2)
    for i, o in enumerate(outs):
        epe = np.linalg.norm(o["flow_f"] - b["flow_f"][i], axis=-1)[b["valid_f"][i] > 0].mean()
        p = o["plausibility"]
        rows.append((epe, p["fb_error"], p["correlation"], p["plausible"], p["notes"], p["reasons"]))
    fb = np.array([r[1] for r in rows])
    epe = np.array([r[0] for r in rows])
    print(f"seed 7 ({n} pairs, {time.time() - t:.0f} s): EPE mean {epe.mean():.3f} max {epe.max():.2f}; "
          f"fb max {fb.max():.3f} p99 {np.percentile(fb, 99):.3f} median {np.median(fb):.3f}; "
          f"fb/576 max {fb.max() / 576:.4f}; implausible {sum(not r[3] for r in rows)}; "
          f"notes {sum(bool(r[4]) for r in rows)}")
    for r in sorted(rows, key=lambda r: -r[1])[:5]:
        print("  worst fb", [np.round(x, 3) if isinstance(x, float) else x for x in r])

    frames = vtest_frames(45, rgb=True)
    aloeL, aloeR = read_image("aloeL.jpg", rgb=True), read_image("aloeR.jpg", rgb=True)
    g1, g3 = read_image("graf1.png", rgb=True), read_image("graf3.png", rgb=True)
    real = {"vtest 0-1": (frames[0], frames[1]), "vtest 20-22": (frames[20], frames[22]),
            "vtest 40-41": (frames[40], frames[41]), "aloe L/R": (aloeL, aloeR), "aloe L/L": (aloeL, aloeL.copy()),
            "graf 1/3": (g1, g3)}

    def show(name, im1, im2):
        o = pred(im1, im2)
        p = o["plausibility"]
        print(f"{name}: mean|flow| {np.linalg.norm(o['flow_f'], axis=-1).mean():.2f} fb {p['fb_error']:.3f} "
              f"({p['fb_error'] / max(im1.shape[:2]):.4f} of side) corr {p['correlation']:.3f} "
              f"err {p['aligned_error']:.2f}/{p['input_error']:.2f} plausible {p['plausible']} "
              f"reasons {p['reasons']} notes {p['notes']}", flush=True)

    for name, (im1, im2) in real.items():
        show(name, im1, im2)
    for name in ("vtest 0-1", "aloe L/L"):
        im1, im2 = real[name]
        for z in (1.1, 1.2):
            show(f"{name} zoom {z}", im1, zoom(im2, z))
        for s in (2.0, 4.0):
            show(f"{name} blur {s}", im1, cv2.GaussianBlur(im2, (0, 0), s))
    P.MAX_SHIFT = np.inf  # the network alone against the exposure change: what the report says
    for name in ("vtest 0-1", "vtest 20-22", "vtest 40-41", "aloe L/L"):
        im1, im2 = real[name]
        for k in (0.6, 0.5, 0.4, "g1.8"):
            show(f"UNMATCHED {name} {k}", im1, darken(im2, k))


if __name__ == "__main__":
    main()
