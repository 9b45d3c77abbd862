"""Basis-count ablation (the paper's 8 / 12 / 24 / 36 bases) on the synthetic benchmark.

Trains one model per basis set with the same config, budget and seed (``configs/synthetic.py``
unless ``--config`` says otherwise), then evaluates them side by side on held-out synthetic
scenes with :func:`camflow_jax.evaluation.benchmark.evaluate` (the network alone, `camflow_net`: the ablation compares trained networks, not the test-time refinement):

    python tools/basis_ablation.py --workdir=workdirs/ablation --out=workdirs/ablation/eval

    8   first-order homography bases only (BasesHomo style)
    12  second-order homography bases only
    24  + 12 stochastic bases (CamFlow)
    36  + 12 depth-translational bases from depth and K (CamFlow+)

A variant whose workdir already holds the final checkpoint is not retrained (training resumes
from the latest checkpoint otherwise), so an interrupted ablation picks up where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {  # name: (num_homography, num_stochastic, use_depth)
    "8": (8, 0, False),
    "12": (12, 0, False),
    "24": (12, 12, False),
    "36": (12, 12, True),
}


def variant_config(base, name: str, num_steps: int | None):
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose from {sorted(VARIANTS, key=int)}")
    c = base.copy_and_resolve_references()
    c.bases.num_homography, c.bases.num_stochastic, c.bases.use_depth = VARIANTS[name]
    if num_steps is not None:
        c.num_steps = num_steps
    return c


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "synthetic.py"), help="base training config file")
    p.add_argument("--workdir", required=True, help="one sub-directory per variant goes here")
    p.add_argument("--out", default=None, help="evaluation output (default WORKDIR/eval)")
    p.add_argument("--variants", default="8,12,24,36", help="comma-separated basis counts")
    p.add_argument("--steps", type=int, default=None, help="override num_steps of the config")
    p.add_argument("--num", type=int, default=100, help="held-out synthetic pairs to evaluate")
    p.add_argument("--baselines", default="identity,sift_magsac", help="reference methods evaluated beside")
    p.add_argument("--eval-only", action="store_true", help="evaluate existing workdirs only")
    args = p.parse_args(argv)
    if str(ROOT) not in sys.path:  # camflow_jax and configs from this checkout, installed or not
        sys.path.insert(0, str(ROOT))
    import jax

    from camflow_jax import checkpoint
    from camflow_jax.evaluation.benchmark import evaluate
    from camflow_jax.trainer import train_and_evaluate

    from camflow_jax import configs

    base = configs.load(args.config)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    timings = {}
    for name in names:
        cfg = variant_config(base, name, args.steps)
        wd = os.path.join(args.workdir, f"b{name}")
        if args.eval_only or checkpoint.latest_step(os.path.join(wd, "checkpoints")) == cfg.num_steps:
            print(f"[b{name}] trained workdir found: {wd}")
            continue
        print(f"[b{name}] training {cfg.num_steps} steps into {wd}", flush=True)
        t0 = time.perf_counter()
        train_and_evaluate(cfg, wd)
        timings[f"b{name}"] = time.perf_counter() - t0
        jax.clear_caches()

    out = args.out or os.path.join(args.workdir, "eval")
    ckpts = ",".join(f"b{n}={os.path.join(args.workdir, f'b{n}')}" for n in names)
    methods = [m.strip() for m in args.baselines.split(",") if m.strip()] + [f"camflow_net:b{n}" for n in names]
    evaluate("synthetic", methods, checkpoints=ckpts, num=args.num, seed=int(base.data.eval_seed),
             size=(int(base.model.height), int(base.model.width)), out_dir=out)
    if timings:
        with open(os.path.join(out, "train_seconds.json"), "w") as f:
            json.dump(timings, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
