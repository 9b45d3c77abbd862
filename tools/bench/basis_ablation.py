"""Basis-count ablation (the paper's 8 / 12 / 24 / 36 bases) on the synthetic benchmark:

    python -m tools.bench basis_ablation --workdir=workdirs/ablation --out=workdirs/ablation/eval

This script parses the arguments and prints; the work, and what the variants are, is
:mod:`tools.bench.ablation` (docs/evaluation.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository root (configs/)


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
    from camflow_jax import configs
    from camflow_jax.compilation import cache
    from tools.bench.ablation import run_ablation

    cache.enable()  # compiled programs kept per user (docs/performance.md, "Compile once")

    run_ablation(configs.load(args.config), args.workdir, out=args.out,
                 variants=[v.strip() for v in args.variants.split(",") if v.strip()], steps=args.steps,
                 num=args.num, baselines=[m.strip() for m in args.baselines.split(",") if m.strip()],
                 eval_only=args.eval_only, log=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
