"""Exposure compensation on the synthetic benchmark: SyntheticScenes(seed=1000), 320x576, exact
flows, with image 2 unchanged, darkened to 60/50/40 % or put through gamma 1.8; the refined
shipped camflow (no depth) through Predictor.predict_batch; per pair the EPE over valid_f and the
plausibility report. Then the first 30 pairs of each change again with the compensation off
(photometric.MAX_SHIFT = inf). The table "100-pair benchmark ... image 2" of docs/estimation.md.

Needs ``WORK/bench1000.npz`` from :mod:`.render_benchmark`. Writes ``WORK/exposure_benchmark.json``
(or ``--json``) after each change.

Usage: python -m tools.bench.studies.plausibility.exposure_benchmark [N=100] [--work DIR] [--json OUT]
"""
import argparse
import json
import os
import time

import numpy as np

from camflow_jax.geometry import photometric as P
from camflow_jax.predictor import Predictor
from tools.bench.studies.plausibility._common import add_work_arg, darken, load_bench

CHANGES = ("none", "0.6", "0.5", "0.4", "g1.8")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=100, help="pairs (the uncompensated runs take at most 30)")
    add_work_arg(ap)
    ap.add_argument("--json", help="output (default WORK/exposure_benchmark.json)")
    a = ap.parse_args()
    out_path = a.json or os.path.join(a.work, "exposure_benchmark.json")
    b = load_bench(a.work, 1000)
    pred = Predictor.from_pretrained()
    res = {}

    def run(tag, k, m):
        t = time.time()
        outs = pred.predict_batch(list(b["img1"][:m]), [darken(c, k) for c in b["img2"][:m]], batch_size=2)
        rows = []
        for i, o in enumerate(outs):
            p = o["plausibility"]
            epe = float(np.linalg.norm(o["flow_f"] - b["flow_f"][i], axis=-1)[b["valid_f"][i] > 0].mean())
            rows.append({"epe": epe, "plausible": p["plausible"], "reasons": p["reasons"], "notes": p["notes"],
                         "matched": p["exposure_matched"], "shift": p["exposure_shift"], "fb": p["fb_error"],
                         "corr": p["correlation"]})
        res[tag] = rows
        e = np.array([r["epe"] for r in rows])
        print(f"{tag}: {m} pairs {time.time() - t:.0f} s; EPE mean {e.mean():.3f} median {np.median(e):.3f}; "
              f"implausible {sum(not r['plausible'] for r in rows)}; matched {sum(r['matched'] for r in rows)}",
              flush=True)
        with open(out_path, "w") as f:
            json.dump(res, f)

    for k in CHANGES:
        run(k, k, a.n)
    P.MAX_SHIFT = np.inf
    for k in CHANGES:
        run(f"{k} uncompensated", k, min(a.n, 30))
    print("wrote", out_path)


if __name__ == "__main__":
    main()
