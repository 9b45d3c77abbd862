"""Basis-count ablation (the paper's 8 / 12 / 24 / 36 bases) on the synthetic benchmark: the
work behind ``python -m tools.bench basis_ablation`` (docs/evaluation.md).

:func:`run_ablation` trains one model per basis set with the same config, budget and seed, then
evaluates them side by side on held-out synthetic scenes with
:func:`camflow_jax.evaluation.benchmark.evaluate` (the network alone, ``camflow_net``: the
ablation compares trained networks, not the test-time refinement):

    8   first-order homography bases only (BasesHomo style)
    12  second-order homography bases only
    24  + 12 stochastic bases (CamFlow)
    36  + 12 depth-translational bases from depth and K (CamFlow+)

A variant whose workdir already holds the final checkpoint is not retrained (training resumes
from the latest checkpoint otherwise), so an interrupted ablation picks up where it stopped.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence

from camflow_jax.evaluation.benchmark import evaluate
from camflow_jax.models import checkpoint
from camflow_jax.training.loop import train_and_evaluate

__all__ = ["VARIANTS", "variant_config", "run_ablation"]

#: name: (num_homography, num_stochastic, use_depth)
VARIANTS = {
    "8": (8, 0, False),
    "12": (12, 0, False),
    "24": (12, 12, False),
    "36": (12, 12, True),
}


def variant_config(base, name: str, num_steps: int | None):
    """A copy of the training config ``base`` with the bases of variant ``name`` (a key of
    :data:`VARIANTS`) and, when given, ``num_steps``; ``base`` is left as it is."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose from {sorted(VARIANTS, key=int)}")
    c = base.copy_and_resolve_references()
    c.bases.num_homography, c.bases.num_stochastic, c.bases.use_depth = VARIANTS[name]
    if num_steps is not None:
        c.num_steps = num_steps
    return c


def run_ablation(base, workdir, out=None, variants: Sequence[str] = ("8", "12", "24", "36"),
                 steps: int | None = None, num: int = 100,
                 baselines: Sequence[str] = ("identity", "sift_magsac"), eval_only: bool = False,
                 log: Callable[[str], None] | None = None) -> dict:
    """Trains the ``variants`` of the training config ``base`` into ``WORKDIR/bN`` (each
    skipped when its workdir already holds the final step, or with ``eval_only``), then
    evaluates ``baselines`` and ``camflow_net:bN`` on ``num`` held-out synthetic pairs into
    ``out`` (default ``WORKDIR/eval``); the training seconds of the variants trained in this
    call go to ``OUT/train_seconds.json``. ``log`` receives one progress line per variant.

    Returns ``{"trained": {"bN": seconds}, "found": ["bN", ...] (reused workdirs), "out": out,
    "evaluation": evaluate()'s result}``.
    """
    import jax


    say = log or (lambda line: None)
    workdir = str(workdir)
    names = list(variants)
    timings, found = {}, []
    for name in names:
        cfg = variant_config(base, name, steps)
        wd = os.path.join(workdir, f"b{name}")
        if eval_only or checkpoint.latest_step(os.path.join(wd, "checkpoints")) == cfg.num_steps:
            say(f"[b{name}] trained workdir found: {wd}")
            found.append(f"b{name}")
            continue
        say(f"[b{name}] training {cfg.num_steps} steps into {wd}")
        t0 = time.perf_counter()
        train_and_evaluate(cfg, wd)
        timings[f"b{name}"] = time.perf_counter() - t0
        jax.clear_caches()

    out = str(out) if out else os.path.join(workdir, "eval")
    ckpts = ",".join(f"b{n}={os.path.join(workdir, f'b{n}')}" for n in names)
    methods = list(baselines) + [f"camflow_net:b{n}" for n in names]
    result = evaluate("synthetic", methods, checkpoints=ckpts, num=num, seed=int(base.data.eval_seed),
                      size=(int(base.model.height), int(base.model.width)), out_dir=out)
    if timings:
        with open(os.path.join(out, "train_seconds.json"), "w") as f:
            json.dump(timings, f, indent=1)
    return {"trained": timings, "found": found, "out": out, "evaluation": result}
