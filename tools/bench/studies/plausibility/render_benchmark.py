"""Renders the synthetic benchmark SyntheticScenes(seed, N pairs, 320x576) once into
``WORK/bench<seed>.npz`` (img1, img2, flow_f, flow_b, valid_f, cat), the input of the exposure,
blur and zoom studies of this package (docs/estimation.md, "Plausibility checks"): seed 1000 is
the benchmark, seed 7 the development pairs of :mod:`.fb_thresholds` and :mod:`.blur_ratio`.

Usage: python -m tools.bench.studies.plausibility.render_benchmark [--seed 1000] [--num 100] [--work DIR]
(run it for --seed 1000 and --seed 7; about 480 MB each).
"""
import argparse
import os
import time

import numpy as np

from camflow_jax.data.synthetic.scenes import SyntheticScenes
from tools.bench.studies.plausibility._common import add_work_arg, bench_path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--num", type=int, default=100, help="pairs")
    add_work_arg(ap)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    t = time.time()
    ds = SyntheticScenes(seed=a.seed, num_samples=a.num, height=320, width=576)
    s = [ds[i] for i in range(a.num)]
    print(sorted(s[0].keys()), time.time() - t)
    np.savez(bench_path(a.work, a.seed), img1=np.stack([x["img1"] for x in s]), img2=np.stack([x["img2"] for x in s]),
             flow_f=np.stack([x["flow_f"] for x in s]), flow_b=np.stack([x["flow_b"] for x in s]),
             valid_f=np.stack([np.asarray(x.get("valid_f", np.ones(x["flow_f"].shape[:2]))) for x in s]),
             cat=np.array([ds.category_of(i) for i in range(a.num)]))
    print("wrote", bench_path(a.work, a.seed))


if __name__ == "__main__":
    main()
