"""Which refinement start wins: 30 held-out synthetic pairs (SyntheticScenes seed 1000, the first 30
of the benchmark set, 320x576, with each sample's depth and K), default RefineConfig()
(starts=("network",)) against RefineConfig(starts=STARTS) (default network,homography,zero). EPE
in the benchmark's published all-pixel form (evaluation.protocols.score_sample), per pair and as
the mean of the category means (AVG).
Usage: python -m tools.bench.studies.refinement.starts N OUT.json [STARTS, e.g. network,zero]
"""
import collections
import json
import sys
import time

import numpy as np

from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.evaluation import protocols
from camflow_jax.predictor import Predictor
from camflow_jax.refine import RefineConfig


def main(n, out, starts="network,homography,zero"):
    src = SyntheticScenes(seed=1000, num_samples=100, height=320, width=576)  # the benchmark set
    pred = Predictor.from_pretrained()
    multi = RefineConfig(starts=tuple(starts.split(",")))
    rows, wins = [], collections.Counter()
    for i in range(n):
        s = src[i]
        cam = dict(depth1=s["depth1"], depth2=s["depth2"], intrinsics=s["K"])
        t0 = time.perf_counter()
        d = pred(s["img1"], s["img2"], **cam)
        t1 = time.perf_counter()
        m = pred(s["img1"], s["img2"], **cam, refine=multi)
        t2 = time.perf_counter()

        def ep(f):
            return protocols.score_sample("synthetic", s, f, None, "masked")["epe"]

        r = {"index": i, "category": str(s["category"]), "net": ep(d["net_flow_f"]), "default": ep(d["flow_f"]),
             "multi": ep(m["flow_f"]), "start_multi": m["refine_info"]["start"],
             "cost_default": d["refine_info"]["cost_after"], "cost_multi": m["refine_info"]["cost_after"],
             "s_default": t1 - t0, "s_multi": t2 - t1}
        for direction, st in zip(("fwd", "bwd"), r["start_multi"]):
            wins[(direction, st)] += 1
        rows.append(r)
        print(json.dumps(r), flush=True)
    summary = {"wins": {f"{k[0]}:{k[1]}": v for k, v in sorted(wins.items())},
               "mean": {k: float(np.mean([r[k] for r in rows])) for k in ("net", "default", "multi", "s_default", "s_multi")},
               "avg_of_categories": {k: float(np.mean([np.mean([r[k] for r in rows if r["category"] == c])
                                                        for c in sorted({r["category"] for r in rows})]))
                                     for k in ("net", "default", "multi")},
               "per_category": {c: {k: float(np.mean([r[k] for r in rows if r["category"] == c]))
                                    for k in ("net", "default", "multi")} for c in sorted({r["category"] for r in rows})},
               "starts": starts,
               "multi_better": sum(r["multi"] < r["default"] - 1e-6 for r in rows),
               "multi_worse": sum(r["multi"] > r["default"] + 1e-6 for r in rows)}
    print(json.dumps(summary))
    json.dump({"rows": rows, "summary": summary}, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], *sys.argv[3:4])
