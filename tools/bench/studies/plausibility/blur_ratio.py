"""The blur note's first measure: texture ratio min(t1, t2) / max(t1, t2) (plausibility.texture
at its default 256 px) on unchanged pairs (synthetic seeds 7 and 1000, vtest consecutive frames)
and with image 2 blurred (Gaussian sigma 1, 2, 4 px; also Aloe). Superseded by
:mod:`.blur_sizes`, which compares measuring sizes (docs/estimation.md, "Blur note").

Needs ``WORK/bench7.npz`` and ``WORK/bench1000.npz`` from :mod:`.render_benchmark`.

Usage: python -m tools.bench.studies.plausibility.blur_ratio [--work DIR]
"""
import argparse

import cv2
import numpy as np

from camflow_jax.geometry import plausibility as PL
from tools.bench.studies.plausibility._common import add_work_arg, load_bench, read_image, vtest_frames


def ratio(a, b):
    t1, t2 = PL.texture(a), PL.texture(b)
    return min(t1, t2) / max(t1, t2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_work_arg(ap)
    a = ap.parse_args()
    for seed in (7, 1000):
        b = load_bench(a.work, seed)
        r = [ratio(x, y) for x, y in zip(b["img1"], b["img2"])]
        print(f"synthetic seed {seed} unchanged: min ratio {min(r):.3f}")
        for s in (1.0, 2.0, 4.0):
            r = [ratio(x, cv2.GaussianBlur(y, (0, 0), s)) for x, y in zip(b["img1"][:30], b["img2"][:30])]
            print(f"  blur {s}: max ratio {max(r):.3f} median {np.median(r):.3f}")
    fr = vtest_frames(100)
    r = [ratio(fr[i], fr[i + 1]) for i in range(99)]
    print(f"vtest consecutive: min ratio {min(r):.3f}")
    aloe = read_image("aloeL.jpg")
    for s in (1.0, 2.0, 4.0):
        v = max(ratio(fr[i], cv2.GaussianBlur(fr[i + 1], (0, 0), s)) for i in range(0, 99, 10))
        print(f"  blur {s}: vtest {v:.3f} aloe {ratio(aloe, cv2.GaussianBlur(aloe, (0, 0), s)):.3f}")


if __name__ == "__main__":
    main()
