"""photometric.exposure_shift on unchanged and changed pairs (the numbers behind
photometric.MAX_SHIFT = 0.12, docs/estimation.md "Plausibility checks"): the synthetic benchmark
(seed 1000) with image 2 unchanged or scaled by 0.9 ... 0.4, gamma 1.8 or 1.3; opencv-doc's
vtest.avi consecutive frames and 5 apart; and the time of exposure_shift (768x576) and
match_exposure (640x480).

Needs ``WORK/bench1000.npz`` from :mod:`.render_benchmark`.

Usage: python -m tools.bench.studies.plausibility.exposure_shift_stats [--work DIR]
"""
import argparse
import time

import cv2
import numpy as np

from camflow_jax.geometry import photometric as P
from tools.bench.studies.plausibility._common import add_work_arg, darken, load_bench, vtest_frames


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_work_arg(ap)
    a = ap.parse_args()
    b = load_bench(a.work, 1000)
    for k in (None, 0.9, 0.8, 0.6, 0.5, 0.4, "g1.8", 1.3):
        v = [P.exposure_shift(x, darken(c, k)) for x, c in zip(b["img1"], b["img2"])]
        print(f"synthetic {k}: min {np.min(v):.4f} median {np.median(v):.4f} p99 {np.percentile(v, 99):.4f} "
              f"max {np.max(v):.4f}")
    frames = vtest_frames(rgb=True)
    v = [P.exposure_shift(frames[i], frames[i + 1]) for i in range(len(frames) - 1)]
    v5 = [P.exposure_shift(frames[i], frames[i + 5]) for i in range(len(frames) - 5)]
    print(f"vtest {len(frames)} frames {frames[0].shape}: consecutive max {np.max(v):.4f} median {np.median(v):.4f}; "
          f"5 apart max {np.max(v5):.4f}")
    for k in (0.6, 0.5, 0.4, "g1.8"):
        d = [P.exposure_shift(frames[i], darken(frames[i + 1], k)) for i in range(0, len(frames) - 1, 50)]
        print(f"vtest {k}: min {np.min(d):.4f}")
    t = time.perf_counter()
    for i in range(50):
        P.exposure_shift(frames[i], frames[i + 1])
    print(f"exposure_shift 768x576: {(time.perf_counter() - t) / 50 * 1e3:.2f} ms")
    img = cv2.resize(frames[0], (640, 480))
    t = time.perf_counter()
    for _ in range(20):
        P.match_exposure(img, darken(img, 0.5))
    print(f"match_exposure 640x480 uint8: {(time.perf_counter() - t) / 20 * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
