"""Development experiment (calls without depth): would forward-backward consistency pick between
the network start and a zero start better than the photometric cost does?

For each development pair (SyntheticScenes(seed), 320x576, depth and K withheld) the Predictor
refines once from the network's coefficients (the default) and once from zero motion. Each run
records the valid-pixel mean EPE of flow_f, the final robust cost of each direction and the
forward-backward consistency |F_f(x) + F_b(x + F_f(x))| (mean and median over pixels whose
sample stays in the frame: the library's warp and validity rule). Then it scores selection
rules. The refinement runs with the tenth round's settings (Cauchy width 2.385, coarsest
iterations 12), the default when this was measured.
Usage: python -m tools.bench.studies.refinement.fb_select SEED N OUT.json
"""
import json
import sys
import warnings

import numpy as np

from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.evaluation import metrics
from camflow_jax.geometry import host
from camflow_jax.predictor import Predictor
from camflow_jax.refine import RefineConfig


def fb_error(ff, fb):
    e = np.linalg.norm(ff + host.warp(fb, ff), axis=-1)[host.warp_validity(ff) > 0]
    return float(e.mean()), float(np.median(e))


def cost(r):
    return r["cost_f"] + r["cost_b"]


RULES = {
    "network start (default)": lambda r: False,
    "zero start": lambda r: True,
    "lower cost": lambda r: cost(r["zero"]) < cost(r["network"]),
    "lower fb mean": lambda r: r["zero"]["fb"][0] < r["network"]["fb"][0],
    "lower fb median": lambda r: r["zero"]["fb"][1] < r["network"]["fb"][1],
    "lower fb mean and lower cost": lambda r: (r["zero"]["fb"][0] < r["network"]["fb"][0]
                                               and cost(r["zero"]) < cost(r["network"])),
    "fb mean under half": lambda r: r["zero"]["fb"][0] < 0.5 * r["network"]["fb"][0],
}


def main(seed, n, out):
    warnings.simplefilter("ignore")  # the no-depth warning, once per pair
    src = SyntheticScenes(seed=seed, num_samples=n, height=320, width=576)
    pred = Predictor.from_pretrained()
    tenth = RefineConfig(cauchy_width=2.3849, iterations=(12, 10, 10))
    cfgs = {"network": tenth, "zero": tenth.replace(starts=("zero",))}
    rows = []
    for i in range(n):
        s = src[i]
        r = {"index": i, "category": str(s["category"])}
        for name, c in cfgs.items():
            o = pred(s["img1"], s["img2"], refine=c)
            costs = np.ravel(o["refine_info"]["cost_after"])
            r[name] = {"epe": metrics.epe_valid(o["flow_f"], s["flow_f"], s["valid_f"]),
                       "cost_f": float(costs[0]), "cost_b": float(costs[-1]),
                       "fb": fb_error(o["flow_f"], o["flow_b"])}
        rows.append(r)
    net = np.array([r["network"]["epe"] for r in rows])
    summary = {}
    for name, rule in RULES.items():
        e = np.array([r["zero"]["epe"] if rule(r) else r["network"]["epe"] for r in rows])
        summary[name] = {"mean_epe": float(e.mean()), "zero_chosen": int(sum(rule(r) for r in rows)),
                         "better_by_0.1": int(np.sum(e < net - 0.1)), "worse_by_0.1": int(np.sum(e > net + 0.1))}
    summary["oracle (the better start per pair)"] = {
        "mean_epe": float(np.minimum(net, [r["zero"]["epe"] for r in rows]).mean())}
    print(json.dumps(summary, indent=1))
    json.dump({"seed": seed, "rows": rows, "summary": summary}, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
