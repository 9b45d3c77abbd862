"""Step 2 of the zoom study (issue 63): two candidate measures of an unexplained zoom, on the
refined answers to the unchanged synthetic benchmark (seed 1000) and to the zoom/blur probes:
the aligned error relative to the input error (plausibility.alignment_errors) and the aligned
gradient correlation (plausibility.aligned_correlation at 256 px / sigma 1, 512 px / sigma 1,
256 px / sigma 2); for the probes also the error against the true zoom flow.

Needs ``WORK/bench1000.npz`` (:mod:`.render_benchmark`) and ``WORK/zoom_bench_flows.npz``,
``WORK/zoom_probes.npz`` (:mod:`.zoom_flows`).

Usage: python -m tools.bench.studies.plausibility.zoom_measures [--work DIR]
"""

import cv2
import numpy as np

from camflow_jax.geometry import plausibility as PL
from tools.bench.studies.plausibility._common import zoom_about_centre
from tools.bench.studies.plausibility.zoom_flows import load_outputs

NAMES = ["ratio", "c256s1", "c512s1", "c256s2", "al", "in"]


def meas(a, c, f):
    al, inp = PL.alignment_errors(a, c, f)
    return [al / max(inp, 1e-6), PL.aligned_correlation(a, c, f, size=256, sigma=1.0),
            PL.aligned_correlation(a, c, f, size=512, sigma=1.0), PL.aligned_correlation(a, c, f, size=256, sigma=2.0),
            al, inp]


def main():
    b, F, P, ims, vtest1 = load_outputs(__doc__.splitlines()[0])
    n = len(F["f"])
    rows = np.array([meas(b["img1"][i], b["img2"][i], F["f"][i]) for i in range(n)])
    epe = np.array([np.linalg.norm(F["f"][i] - b["flow_f"][i], axis=-1)[b["valid_f"][i] > 0].mean() for i in range(n)])
    for j, nm in enumerate(NAMES):
        v = rows[:, j]
        print(f"bench {nm}: min {np.nanmin(v):.3f} p1 {np.nanpercentile(v, 1):.3f} p5 {np.nanpercentile(v, 5):.3f} "
              f"median {np.nanmedian(v):.3f} p99 {np.nanpercentile(v, 99):.3f} max {np.nanmax(v):.3f}")
    o = np.argsort(rows[:, 0])[::-1][:5]
    print("worst ratio pairs", [(int(i), round(rows[i, 0], 3), round(rows[i, 4], 2), round(rows[i, 5], 2),
                                 round(epe[i], 2), str(b["cat"][i])) for i in o])
    o = np.argsort(rows[:, 2])[:5]
    print("worst c512 pairs", [(int(i), round(rows[i, 2], 3), round(epe[i], 2), str(b["cat"][i])) for i in o])
    for nm, im in ims.items():
        for k, sec in (("static", vtest1 if nm == "vtest" else im.copy()), ("zoom1.2", zoom_about_centre(im, 1.2)),
                       ("zoom1.1", zoom_about_centre(im, 1.1)), ("blur4", cv2.GaussianBlur(im, (0, 0), 4))):
            f = P[f"{nm}_{k}_f"]
            h, w = im.shape[:2]
            yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
            s = 1.2 if k == "zoom1.2" else 1.1 if k == "zoom1.1" else 1.0
            # the true flow: image 2 = zoom(image 1) about c, so x in image 1 moves to c + (x - c) * s
            tf = np.stack([(xx - w / 2) * (s - 1), (yy - h / 2) * (s - 1)], -1)
            err = np.linalg.norm(f - tf, axis=-1).mean()
            print(nm, k, f"err {err:.2f}", " ".join(f"{m} {v:.3f}" for m, v in zip(NAMES, meas(im, sec, f))))


if __name__ == "__main__":
    main()
