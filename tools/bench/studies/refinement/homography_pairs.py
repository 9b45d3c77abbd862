"""Pure-homography pairs at 320x576, the protocol of tests/cli/test_estimate.py -k trained, scaled up:
held-out SyntheticScenes(seed=4242, categories=("RE",)) frames img1 warped by their own
camera-motion homography label (cv2.warpPerspective, INTER_LINEAR, BORDER_REFLECT), so the truth
is the exact homography flow; interior EPE (margin h // 16). No depth is given (none is defined
for a warped image).
Usage: python -m tools.bench.studies.refinement.homography_pairs N OUT.json [--checkpoint DIR]
(without --checkpoint: the shipped model)
"""
import json
import time

import cv2
import numpy as np

from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.estimators import registry
from camflow_jax.geometry import host

H_, W_ = 320, 576
METHODS = ("identity", "sift_magsac", "ecc", "camflow_net", "camflow")


def interior_epe(flow, truth, margin):
    d = (flow - truth)[margin:-margin, margin:-margin]
    return float(np.hypot(d[..., 0], d[..., 1]).mean())


def main(n, out, checkpoint=None):
    scenes = SyntheticScenes(seed=4242, num_samples=n, height=H_, width=W_, categories=("RE",))
    ests = {m: registry.get(m, **({"checkpoint": checkpoint} if checkpoint and m.startswith("camflow") else {}))
            for m in METHODS}
    ests["camflow"]._predictor = ests["camflow_net"].predictor  # one loaded model
    rows = []
    for i in range(n):
        s = scenes[i]
        img1, H = s["img1"], s["homography"].astype(np.float64)
        img2 = cv2.warpPerspective(img1, H, (W_, H_), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
        truth = host.homography_flow(H, H_, W_)
        row = {"index": i}
        for m, est in ests.items():
            t0 = time.perf_counter()
            mo = est(img1, img2)
            row[m] = interior_epe(np.asarray(mo.flow_f), truth, H_ // 16)
            row[m + "_s"] = time.perf_counter() - t0
            if m == "camflow":
                info = mo.extras.get("refine_info", {})
                row["camflow_start"] = info.get("start")
                row["camflow_improved"] = info.get("improved")
        rows.append(row)
        print(json.dumps(row), flush=True)
    mean = {m: float(np.mean([r[m] for r in rows])) for m in METHODS}
    med = {m: float(np.median([r[m] for r in rows])) for m in METHODS}
    print("mean", json.dumps(mean))
    print("median", json.dumps(med))
    json.dump({"n": n, "rows": rows, "mean": mean, "median": med}, open(out, "w"), indent=1)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("out")
    ap.add_argument("--checkpoint", default=None, help="CamFlow checkpoint dir (default: the shipped model)")
    args = ap.parse_args()
    main(args.n, args.out, args.checkpoint)
