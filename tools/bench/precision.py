"""The precision policies compared on held-out pairs (docs/performance.md, "Precision policy").

:func:`compare_policies` runs one model's network alone (no refinement) under each policy of
:mod:`camflow_jax.models.precision` on the same held-out synthetic pairs, and reports per policy
the flows' endpoint error against the ground truth and their distance from the first policy's
('exact') flows, coefficients and confidence maps. :func:`forward_times` compiles the network's
flows-only forward under each policy, says whether XLA compiled the same program for two
policies but for the ops' precision annotations, and times the programs interleaved. Run
through ``python -m tools.bench precision_compare``.
"""

from __future__ import annotations

import re
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.models import build_model, init_variables
from camflow_jax.models.precision import POLICIES
from camflow_jax.predictor import Predictor
from tools.bench.timing import interleaved

__all__ = ["compare_policies", "forward_times"]


def _epe(a, b) -> np.ndarray:
    return np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64), axis=-1)


def compare_policies(pred: Predictor, pairs: int = 6, seed: int = 1000, policies=POLICIES,
                     refined: bool = False) -> dict:
    """``{"pairs", "size", "policies": {name: {...}}}`` for ``pred``'s model and weights: per
    policy the mean EPE of flow_f against the ground truth (``epe_px``, per pair in
    ``epe_px_per_pair``; with ``refined``, also after the test-time refinement, which computes
    in float32 whatever the network's policy: ``epe_refined_px``, ``epe_refined_px_per_pair``),
    and against the first policy's outputs the largest and mean endpoint
    distance of both flows (``max_diff_px``, ``mean_diff_px``), the largest coefficient
    difference relative to the largest coefficient (``coeff_rel_diff``) and the largest
    log-variance difference (``logvar_max_diff``); the seconds of the first call (compilation)
    and the median of the others."""
    h, w = pred.height, pred.width
    src = SyntheticScenes(seed=seed, num_samples=pairs, height=h, width=w)
    samples = [src[i] for i in range(pairs)]
    outs, report = {}, {}
    for name in policies:
        p = Predictor(pred.model, pred.variables, pred.static_bases, pred.model_config, precision=name)
        runs, times = [], []
        for s in samples:
            t0 = time.perf_counter()
            runs.append(p(s["img1"], s["img2"], depth1=s["depth1"], depth2=s["depth2"], intrinsics=s["K"],
                          refine=False, confidence=True))
            times.append(time.perf_counter() - t0)
        outs[name] = runs
        epe = [float(_epe(o["flow_f"], s["flow_f"]).mean()) for o, s in zip(runs, samples)]
        report[name] = {"epe_px": float(np.mean(epe)), "epe_px_per_pair": epe,
                        "first_call_s": round(times[0], 2), "median_call_s": round(float(np.median(times[1:] or times)), 3)}
        if refined:
            epe_r = [float(_epe(p(s["img1"], s["img2"], depth1=s["depth1"], depth2=s["depth2"], intrinsics=s["K"])[
                "flow_f"], s["flow_f"]).mean()) for s in samples]
            report[name].update(epe_refined_px=float(np.mean(epe_r)), epe_refined_px_per_pair=epe_r)
    ref = outs[policies[0]]
    for name in policies:
        diff = [_epe(o[k], r[k]) for o, r in zip(outs[name], ref) for k in ("flow_f", "flow_b")]
        coeff = max(float(np.abs(o[k] - r[k]).max() / np.abs(r[k]).max())
                    for o, r in zip(outs[name], ref) for k in ("coeffs_f", "coeffs_b"))
        logvar = max(float(np.abs(o[k] - r[k]).max()) for o, r in zip(outs[name], ref) for k in ("logvar_f", "logvar_b"))
        report[name].update(max_diff_px=max(float(d.max()) for d in diff),
                            mean_diff_px=float(np.mean([d.mean() for d in diff])),
                            coeff_rel_diff=coeff, logvar_max_diff=logvar)
    return {"pairs": pairs, "seed": seed, "size": [h, w], "reference": policies[0], "policies": report}


def _program(compiled) -> str:
    """A compiled module's text without names, metadata and the ops' precision annotations."""
    text = re.sub(r"(metadata=\{[^}]*\})|(\.\d+)", "", compiled.as_text())
    return re.sub(r",?\s*operand_precision=\{[^}]*\}", "", text)


def forward_times(height: int, width: int, rounds: int, groups=(12, 12), policies=POLICIES) -> dict:
    """The network's flows-only forward (the released structure, ``groups`` bases, random
    weights and inputs, batch 1) compiled under each policy and timed interleaved, ``rounds``
    calls each after two untimed ones: ``{"median_s": {policy: s}, "same_program": {"a=b": bool}}``
    where ``same_program`` compares each policy's compiled program with the first one's, the
    ops' precision annotations left out."""
    rng = np.random.default_rng(0)
    g1, g2 = (jnp.asarray(rng.standard_normal((1, height, width, 1), np.float32)) for _ in range(2))
    bases = jnp.asarray(rng.uniform(-1, 1, (sum(groups), height, width, 2)).astype(np.float32))
    fns, programs = {}, {}
    for name in policies:
        model = build_model({"group_sizes": list(groups), "precision": name})
        variables = init_variables(model, jax.random.key(0), height, width)
        fn = jax.jit(lambda v, a, b, bs, m=model: m.apply(v, a, b, bs, confidence=False))
        compiled = fn.lower(variables, g1, g2, bases).compile()
        fns[name], programs[name] = (compiled, variables), _program(compiled)
        for _ in range(2):
            jax.block_until_ready(compiled(variables, g1, g2, bases))
    times, _ = interleaved({name: (lambda c=compiled, v=variables: jax.block_until_ready(c(v, g1, g2, bases)))
                            for name, (compiled, variables) in fns.items()}, rounds)
    first = policies[0]
    return {"size": [height, width], "groups": list(groups), "rounds": rounds,
            "median_s": {k: round(statistics.median(v), 4) for k, v in times.items()},
            # per round, each policy's time over the first's, then the median: less moved by the
            # machine's load changing over the run than the ratio of the medians
            "median_ratio_per_round": {k: round(statistics.median(np.divide(v, times[first])), 3)
                                       for k, v in times.items()},
            "times_s": {k: [round(t, 4) for t in v] for k, v in times.items()},
            "same_program": {f"{first}={k}": programs[k] == programs[first] for k in policies[1:]}}
