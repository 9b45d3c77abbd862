"""The forward-backward error part by part (issue 63; docs/estimation.md, "Plausibility checks"):
the threshold ``plausibility.MAX_FB_REGION`` and the Predictor's retry with more starts
(``RefineConfig.retry_starts``).

For the synthetic pairs of a seed (7: development, where the threshold is chosen; 1000: the
benchmark, reported), the refined shipped camflow (no depth) with the retry off and on: each
pair's worst cell (:func:`camflow_jax.geometry.plausibility.forward_backward_errors`, as a
fraction of the longer side), its EPE against the exact flow, and which pairs the retry touched.
Then the opencv-doc pairs (vtest, Aloe L/R, graffiti 1/3) and the zoom probes (image 2 zoomed
1.1x and 1.2x about the centre: exact flow known) and blur probes, off and on.

Needs ``WORK/bench<seed>.npz`` from :mod:`.render_benchmark` (``--seed 7``, ``--seed 1000``).

Usage: python -m tools.bench.studies.plausibility.fb_regions [--seeds 7 1000] [--n 100] [--work DIR] [--out F.json]
"""
import argparse
import json
import time
import warnings

import cv2
import numpy as np

from camflow_jax.geometry import plausibility
from camflow_jax.predictor import Predictor
from camflow_jax.refine import RefineConfig
from tools.bench.studies.plausibility._common import (
    add_work_arg,
    load_bench,
    read_image,
    vtest_frames,
    zoom_about_centre,
)

OFF = RefineConfig(retry_starts=())


def worst_cell(o) -> float:
    """The answer's worst cell, as a fraction of the longer side."""
    return plausibility.forward_backward_errors(o["flow_f"], o["flow_b"])[1] / max(o["flow_f"].shape[:2])


def epe(flow, truth, valid=None) -> float:
    e = np.linalg.norm(np.asarray(flow) - truth, axis=-1)
    return float(e[valid].mean() if valid is not None else e.mean())


def zoom_truth(shape, s):
    """Exact flow of :func:`zoom_about_centre` by ``s`` and the pixels whose target stays inside."""
    H, W = shape[:2]
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    f = np.stack([(s - 1) * (xx - W / 2), (s - 1) * (yy - H / 2)], -1)
    x2, y2 = xx + f[..., 0], yy + f[..., 1]
    return f, (x2 >= 0) & (x2 <= W - 1) & (y2 >= 0) & (y2 <= H - 1)


def synthetic(pred, work, seed, n):
    b = load_bench(work, seed)
    rows = []
    for cfg in (OFF, RefineConfig()):
        t = time.time()
        outs = pred.predict_batch(list(b["img1"][:n]), list(b["img2"][:n]), batch_size=2, refine=cfg)
        rows.append((time.time() - t, outs))
    (t_off, off), (t_on, on) = rows
    res = {"seconds_off": t_off, "seconds_on": t_on, "pairs": []}
    for i in range(n):
        v = b["valid_f"][i] > 0
        res["pairs"].append({"i": i, "cat": str(b["cat"][i]), "worst_cell": worst_cell(off[i]),
                             "epe_off": epe(off[i]["flow_f"], b["flow_f"][i], v),
                             "epe_on": epe(on[i]["flow_f"], b["flow_f"][i], v),
                             "retry": on[i]["refine_info"].get("retry"),
                             "plausible_on": bool(on[i]["plausibility"]["plausible"])})
    w = np.array([p["worst_cell"] for p in res["pairs"]])
    res["worst_cell"] = {"median": float(np.median(w)), "p99": float(np.quantile(w, 0.99)), "max": float(w.max())}
    res["above_limit"] = int((w > plausibility.MAX_FB_REGION).sum())
    res["retried"] = sum(p["retry"] is not None for p in res["pairs"])
    res["epe_off"] = float(np.mean([p["epe_off"] for p in res["pairs"]]))
    res["epe_on"] = float(np.mean([p["epe_on"] for p in res["pairs"]]))
    res["implausible_on"] = sum(not p["plausible_on"] for p in res["pairs"])
    top = sorted(res["pairs"], key=lambda p: -p["worst_cell"])[:6]
    print(f"seed {seed}: worst cell median {res['worst_cell']['median']:.4f} p99 {res['worst_cell']['p99']:.4f} "
          f"max {res['worst_cell']['max']:.4f}; above {plausibility.MAX_FB_REGION}: {res['above_limit']}; "
          f"retried {res['retried']}; EPE off {res['epe_off']:.3f} on {res['epe_on']:.3f}; "
          f"implausible (on) {res['implausible_on']}; {t_off:.0f} s off, {t_on:.0f} s on", flush=True)
    for p in top:
        print(f"   pair {p['i']} {p['cat']}: worst {p['worst_cell']:.4f} EPE {p['epe_off']:.2f} -> {p['epe_on']:.2f}")
    return res


def probes(pred):
    frames = vtest_frames(45)
    ims = {"vtest": frames[0], "aloe": read_image("aloeL.jpg"), "graf": read_image("graf1.png"),
           "leuven": read_image("leuvenA.jpg")}
    pairs = {"vtest 0-1": (frames[0], frames[1], None), "vtest 20-22": (frames[20], frames[22], None),
             "vtest 40-41": (frames[40], frames[41], None),
             "aloe L/R": (ims["aloe"], read_image("aloeR.jpg"), None),
             "graf 1/3": (ims["graf"], read_image("graf3.png"), None)}
    for nm, im in ims.items():
        for s in (1.1, 1.2):
            pairs[f"{nm} zoom {s}"] = (im, zoom_about_centre(im, s), zoom_truth(im.shape, s))
        pairs[f"{nm} blur 4"] = (im, cv2.GaussianBlur(im, (0, 0), 4), (np.zeros(im.shape[:2] + (2,), np.float32), None))
    res = {}
    for name, (a, c, truth) in pairs.items():
        row = {}
        for label, cfg in (("off", OFF), ("on", RefineConfig())):
            o = pred(a, c, refine=cfg)
            row[label] = {"worst_cell": worst_cell(o), "retry": o["refine_info"].get("retry"),
                          "plausible": bool(o["plausibility"]["plausible"]),
                          "epe": None if truth is None else epe(o["flow_f"], *truth)}
        res[name] = row
        print(f"{name}: off {_said(row['off'])} | on {_said(row['on'])}", flush=True)
    return res


def _said(r) -> str:
    return (f"worst {r['worst_cell']:.4f}" + ("" if r["epe"] is None else f" EPE {r['epe']:.3f}")
            + (" retried" if r["retry"] else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[7, 1000])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--out")
    add_work_arg(ap)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    pred = Predictor.from_pretrained()
    out = {"limit": plausibility.MAX_FB_REGION, "grid": plausibility.FB_GRID}
    for seed in a.seeds:
        out[f"seed{seed}"] = synthetic(pred, a.work, seed, a.n)
    out["probes"] = probes(pred)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
