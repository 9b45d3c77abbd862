"""Step 1 of the zoom study (issue 63; docs/estimation.md, "Not flagged: a zoom the answer does
not explain"): the refined shipped camflow (no depth) on zoom and blur probes (vtest frame 0,
Aloe L, graffiti 1, Leuven A from opencv-doc, each against itself static, zoomed 1.2x and 1.1x
about the centre, blurred by sigma 4 and 2 px) and on the unchanged synthetic benchmark (seed
1000). Prints each probe's report; saves the flows for :mod:`.zoom_measures` and
:mod:`.zoom_residual`: ``WORK/zoom_probes.npz`` (``<name>_<probe>_f`` / ``_b``) and
``WORK/zoom_bench_flows.npz`` (``f``, ``b``: [N, H, W, 2]).

Needs ``WORK/bench1000.npz`` from :mod:`.render_benchmark`.

Usage: python -m tools.bench.studies.plausibility.zoom_flows [N=100] [--work DIR]
"""
import argparse
import os
import time
import warnings

import cv2
import numpy as np

from camflow_jax.predictor import Predictor
from tools.bench.studies.plausibility._common import (
    add_work_arg,
    load_bench,
    read_image,
    vtest_frames,
    zoom_about_centre,
)

PROBE_IMAGES = (("aloe", "aloeL.jpg"), ("graf", "graf1.png"), ("leuven", "leuvenA.jpg"))


def probe_images():
    """{name: image 1} of the probes (BGR, as read by cv2) and vtest frame 1 (vtest's "static" image 2)."""
    fr = vtest_frames(3)
    return {"vtest": fr[0], **{nm: read_image(f) for nm, f in PROBE_IMAGES}}, fr[1]


def probes_path(work):
    return os.path.join(work, "zoom_probes.npz")


def bench_flows_path(work):
    return os.path.join(work, "zoom_bench_flows.npz")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=100, help="benchmark pairs")
    add_work_arg(ap)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    b = load_bench(a.work, 1000)
    pred = Predictor.from_pretrained()
    ims, vtest1 = probe_images()
    probes = {}
    for nm, im in ims.items():
        probes[nm + "_static"] = (im, vtest1 if nm == "vtest" else im.copy())
        probes[nm + "_zoom1.2"] = (im, zoom_about_centre(im, 1.2))
        probes[nm + "_zoom1.1"] = (im, zoom_about_centre(im, 1.1))
        probes[nm + "_blur4"] = (im, cv2.GaussianBlur(im, (0, 0), 4))
        probes[nm + "_blur2"] = (im, cv2.GaussianBlur(im, (0, 0), 2))
    out = {}
    for k, (im1, im2) in probes.items():
        t = time.time()
        o = pred(im1, im2)
        out[k + "_f"] = o["flow_f"]
        out[k + "_b"] = o["flow_b"]
        p = o["plausibility"]
        print(k, im1.shape, f"{time.time() - t:.1f}s |flow| {np.linalg.norm(o['flow_f'], axis=-1).mean():.2f}",
              p["plausible"], p["notes"], f"al {p['aligned_error']:.2f} in {p['input_error']:.2f} "
              f"corr {p['correlation']:.3f} fb {p['fb_error']:.2f}", flush=True)
    np.savez(probes_path(a.work), **out)
    t = time.time()
    outs = pred.predict_batch(list(b["img1"][:a.n]), list(b["img2"][:a.n]), batch_size=2)
    print("bench", time.time() - t, flush=True)
    np.savez(bench_flows_path(a.work), f=np.stack([o["flow_f"] for o in outs]), b=np.stack([o["flow_b"] for o in outs]))
    print("wrote", probes_path(a.work), bench_flows_path(a.work))


if __name__ == "__main__":
    main()


def load_outputs(description: str):
    """What the zoom studies read, from the command line's ``--work`` folder: ``(bench, flows,
    probes, probe images, vtest frame 1)`` (the benchmark of seed 1000, this module's two files)."""
    ap = argparse.ArgumentParser(description=description)
    add_work_arg(ap)
    a = ap.parse_args()
    ims, vtest1 = probe_images()
    return load_bench(a.work, 1000), np.load(bench_flows_path(a.work)), np.load(probes_path(a.work)), ims, vtest1
