"""Step 3 of the zoom study (issue 63): the third candidate measure, the median motion of a
RANSAC homography fitted to DIS flow (OpenCV, medium preset) between image 1 and image 2 aligned
by the refined answer, at 256 px, as a fraction of the longer side; on the unchanged synthetic
benchmark (seed 1000; with its time per pair and its correlation with the EPE) and on the
zoom/blur probes.

Needs ``WORK/bench1000.npz`` (:mod:`.render_benchmark`) and ``WORK/zoom_bench_flows.npz``,
``WORK/zoom_probes.npz`` (:mod:`.zoom_flows`).

Usage: python -m tools.bench.studies.plausibility.zoom_residual [--work DIR]
"""
import time

import cv2
import numpy as np

from camflow_jax.geometry import host
from tools.bench.studies.plausibility._common import zoom_about_centre
from tools.bench.studies.plausibility.zoom_flows import load_outputs


def resid(dis, a, c, f, size=256):
    g1, g2 = host.gray(a).astype(np.float32), host.gray(c).astype(np.float32)
    w2 = host.warp(g2, np.asarray(f, np.float32), exact=False)
    valid = host.warp_validity(np.asarray(f, np.float32)) > 0
    H, W = g1.shape
    s = min(1.0, size / max(H, W))
    h, w = round(H * s), round(W * s)
    u1, u2 = (np.clip(cv2.resize(g, (w, h), interpolation=cv2.INTER_AREA), 0, 255).astype(np.uint8) for g in (g1, w2))
    v = cv2.resize(valid.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST) > 0
    r = dis.calc(u1, u2, None)
    yy, xx = np.mgrid[4:h - 4:4, 4:w - 4:4]
    m = v[yy, xx]
    src = np.stack([xx[m], yy[m]], -1).astype(np.float32)
    dst = src + r[yy[m], xx[m]]
    Hm, _ = cv2.findHomography(src, dst, cv2.RANSAC, 1.0)
    if Hm is None:
        return float("nan")
    p = cv2.perspectiveTransform(src[None], Hm)[0]
    return float(np.median(np.linalg.norm(p - src, axis=-1)) / s / max(H, W))


def main():
    b, F, P, ims, vtest1 = load_outputs(__doc__.splitlines()[0])
    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)
    n = len(F["f"])
    t = time.time()
    r = np.array([resid(dis, b["img1"][i], b["img2"][i], F["f"][i]) for i in range(n)])
    print("time/pair", (time.time() - t) / n)
    epe = np.array([np.linalg.norm(F["f"][i] - b["flow_f"][i], axis=-1)[b["valid_f"][i] > 0].mean() for i in range(n)])
    o = np.argsort(r)[::-1][:8]
    print("bench resid (frac of long side): median", np.median(r),
          "top", [(int(i), round(r[i] * 576, 2), round(float(epe[i]), 2), str(b["cat"][i])) for i in o])
    print("corr(resid, epe)", np.corrcoef(r, epe)[0, 1])
    for nm, im in ims.items():
        for k, sec in (("static", vtest1 if nm == "vtest" else im.copy()), ("zoom1.2", zoom_about_centre(im, 1.2)),
                       ("zoom1.1", zoom_about_centre(im, 1.1)), ("blur4", cv2.GaussianBlur(im, (0, 0), 4))):
            v = resid(dis, im, sec, P[f"{nm}_{k}_f"])
            print(nm, k, f"{v:.4f} = {v * max(im.shape[:2]):.2f} px")


if __name__ == "__main__":
    main()
