"""Development pairs: the refined Predictor's mean EPE on valid pixels with RefineConfig(**SETTINGS).

SyntheticScenes(SEED) at 320x576, the first N pairs (the eleventh round used seeds 7 and 8, 100
pairs each; never the benchmark set's seed 1000), with each pair's depth and K (d) or without
them (n). Prints one JSON line: the mean, the pairs over 2 px, the mean iterations per direction
and every pair's EPE.
Usage: python -m tools.bench.studies.refinement.dev_pairs '{"cauchy_width": 0.7, "iterations": [8, 10, 10]}' SEED N d|n
"""
import json
import sys
import warnings

import numpy as np

from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.evaluation import metrics
from camflow_jax.predictor import Predictor
from camflow_jax.refine import RefineConfig


def main():
    warnings.simplefilter("ignore")
    kw = json.loads(sys.argv[1])
    seed, n, depth = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "d"
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in kw.items()}
    cfg = RefineConfig(**kw)
    src = SyntheticScenes(seed=seed, num_samples=n, height=320, width=576)
    pred = Predictor.from_pretrained()
    e, its = [], []
    for i in range(n):
        s = src[i]
        cam = dict(depth1=s["depth1"], depth2=s["depth2"], intrinsics=s["K"]) if depth else {}
        o = pred(s["img1"], s["img2"], refine=cfg, **cam)
        e.append(metrics.epe_valid(o["flow_f"], s["flow_f"], s["valid_f"]))
        its.append(np.asarray(o["refine_info"]["iterations"]).sum(-1).mean())
    e = np.array(e)
    print(json.dumps({"cfg": sys.argv[1], "seed": seed, "depth": depth, "mean": round(float(e.mean()), 3),
                      "over2": int((e > 2).sum()), "its": round(float(np.mean(its)), 1), "epe": [round(x, 3) for x in e]}))


if __name__ == "__main__":
    main()
