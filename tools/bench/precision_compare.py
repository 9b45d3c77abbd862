"""The network's precision policies (exact | default | bfloat16) compared on held-out synthetic
pairs, with the shipped model (or a checkpoint), network alone (and refined, with --refined):

    python -m tools.bench precision_compare [--checkpoint DIR] [--pairs 6] [--refined] [--speed-rounds 15] [--out result.json]

Prints one JSON object: per policy the mean EPE against the ground truth and the distances of
its flows, coefficients and confidence maps from the 'exact' policy's
(:func:`tools.bench.precision.compare_policies`); with ``--speed-rounds N``, also the
released-structure network's flows-only forward at ``--speed-size`` under each policy, timed
interleaved, and whether XLA compiled the same program for them
(:func:`tools.bench.precision.forward_times`). docs/performance.md, "Precision
policy", has the results. On a CPU 'exact' and 'default' are both float32; on a GPU 'default'
is TF32.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from camflow_jax.predictor import Predictor
from tools.bench import precision
from tools.bench.benchmarking import machine_info
from tools.bench.timing import load_average


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=None, help="model directory (default: the shipped model)")
    p.add_argument("--pairs", type=int, default=6, help="held-out pairs (synthetic, seed 1000)")
    p.add_argument("--speed-rounds", type=int, default=0, help="interleaved timed forwards per policy (0: none)")
    p.add_argument("--speed-size", default="128x256", metavar="HxW", help="input size of the timed forwards")
    p.add_argument("--refined", action="store_true", help="also the refined flows' EPE per policy")
    p.add_argument("--out", default=None, help="also write the result here")
    args = p.parse_args(argv)
    pred = Predictor.load(args.checkpoint)
    res = {"machine": {**machine_info(), "loadavg_before": load_average()},
           **precision.compare_policies(pred, args.pairs, refined=args.refined)}
    if args.speed_rounds:
        h, w = (int(v) for v in args.speed_size.lower().split("x"))
        res["speed"] = precision.forward_times(h, w, args.speed_rounds)
    res["machine"]["loadavg_after"] = load_average()
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
