"""The blur note's measuring size (plausibility.BLUR_SIZE = 768, BLUR_RATIO = 0.75): the texture
ratio min(t1, t2) / max(t1, t2) with the longer side shrunk to 256, 512, 768 and 1024 px, on
unchanged pairs (the synthetic benchmark, seed 1000, 100 pairs; 99 consecutive vtest.avi pairs)
against image 2 blurred by sigma 2 and 4 px (the benchmark's first 30 pairs, every tenth vtest
pair, 8 opencv-doc photos 512-1282 px wide). The table under "Blur note" in docs/estimation.md.
The texture is the one of plausibility.texture (grey, INTER_AREA shrink, 1 px blur, 99th
percentile of the gradient magnitude) written out here with the size as a parameter.

Needs ``WORK/bench1000.npz`` from :mod:`.render_benchmark`.

Usage: python -m tools.bench.studies.plausibility.blur_sizes [--work DIR]
"""
import argparse

import cv2
import numpy as np

from camflow_jax.geometry import host
from tools.bench.studies.plausibility._common import add_work_arg, load_bench, read_image, vtest_frames

PHOTOS = ("aloeL.jpg", "graf1.png", "leuvenA.jpg", "home.jpg", "building.jpg", "fruits.jpg", "messi5.jpg", "baboon.jpg")


def tex(img, size):
    g = host.gray(img).astype(np.float32)
    s = size / max(g.shape)
    if s < 1:
        g = cv2.resize(g, (round(g.shape[1] * s), round(g.shape[0] * s)), interpolation=cv2.INTER_AREA)
    g = cv2.GaussianBlur(g, (0, 0), 1.0, borderType=cv2.BORDER_REFLECT)
    gy, gx = np.gradient(g)
    return float(np.percentile(np.hypot(gx, gy), 99))


def ratio(a, b, size):
    t1, t2 = tex(a, size), tex(b, size)
    return min(t1, t2) / max(t1, t2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_work_arg(ap)
    a = ap.parse_args()
    b = load_bench(a.work, 1000)
    fr = vtest_frames(100)
    big = {n: read_image(n) for n in PHOTOS}
    for size in (256, 512, 768, 1024):
        r = [ratio(x, y, size) for x, y in zip(b["img1"], b["img2"])]
        rv = [ratio(fr[i], fr[i + 1], size) for i in range(99)]
        print(f"size {size}: bench unchanged min {min(r):.3f} 1st pct {np.percentile(r, 1):.3f}; "
              f"vtest min {min(rv):.3f}", flush=True)
        for s in (2.0, 4.0):
            rb = [ratio(x, cv2.GaussianBlur(y, (0, 0), s), size) for x, y in zip(b["img1"][:30], b["img2"][:30])]
            line = " ".join(f"{n[:5]}{im.shape[1]} {ratio(im, cv2.GaussianBlur(im, (0, 0), s), size):.3f}"
                            for n, im in big.items())
            vt = max(ratio(fr[i], cv2.GaussianBlur(fr[i + 1], (0, 0), s), size) for i in range(0, 99, 10))
            print(f"   blur {s}: bench max {max(rb):.3f}; vtest {vt:.3f}; {line}", flush=True)


if __name__ == "__main__":
    main()
