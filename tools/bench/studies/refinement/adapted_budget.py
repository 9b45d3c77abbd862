"""Does a better start let the refinement stop sooner? The refinement from the shipped network and
from an adapted one (``python -m tools.bench adaptation ... --save DIR``), at the default iteration
budget and at smaller ones, on the pairs of a shaken clip the adaptation never saw (every second
pair of the last third), against the exact motion (docs/adaptation.md, "Results").

    python -m tools.bench.studies.refinement.adapted_budget --adapted DIR --clip vtest --out F.json

Per predictor and budget: the mean end-point error of the refined flow against the exact flow,
the refinement's time (the refined call minus the network-alone call, medians over the pairs,
compiled before timing) and its iterations.
"""

from __future__ import annotations

import argparse
import json
import sys

from camflow_jax.predictor import Predictor
from camflow_jax.refine import RefineConfig
from tools.bench import timing
from tools.bench.adaptation import score_pairs, shaken_clip

#: Iteration budgets (per level, coarsest first; the detail level's): the default, and two that
#: cut it to about two thirds and a half.
BUDGETS = {"default": ((8, 10, 10), 6), "two_thirds": ((4, 7, 8), 4), "half": ((3, 5, 6), 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--adapted", required=True, help="an adapted checkpoint folder")
    p.add_argument("--clip", default="vtest")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=2)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    clip, _ = shaken_clip(a.clip, a.frames, a.seed)
    n_train = (2 * len(clip.frames)) // 3
    test = list(range(n_train, len(clip.frames) - 1, a.eval_every))
    res = {"args": vars(a), "machine": timing.host_info(), "load_before": timing.load_average(), "rows": []}
    preds = {"shipped": Predictor.from_pretrained(), "adapted": Predictor.from_checkpoint(a.adapted)}
    for budget, (its, detail) in BUDGETS.items():
        cfg = RefineConfig(iterations=its, detail_iterations=detail)
        for name, pred in preds.items():
            pred.refine_config = cfg
            s = score_pairs(pred, clip, test)
            row = {"model": name, "budget": budget, "iterations_budget": list(its), "detail_iterations": detail,
                   **{k: s[k] for k in ("net", "refined", "refine_seconds", "net_seconds", "iterations")}}
            res["rows"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    timing.write_result(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
