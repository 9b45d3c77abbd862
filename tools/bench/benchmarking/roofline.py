"""Roofline estimates for accelerators (mode roofline): XLA's FLOP and byte counts of every jitted
call the Predictor and the train step make, against an H100 SXM and a TPU v5e chip; no timing.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from camflow_jax import models
from camflow_jax.predictor import Predictor
from camflow_jax.training import loop
from camflow_jax.training.feed import make_train_dataset
from tools.bench import accel
from tools.bench.benchmarking.common import BenchmarkOptions, apply_groups, load_config, parse_groups
from tools.bench.benchmarking.training import build_train


def inference_predictor(config, groups, dtype: str):
    """A :class:`~camflow_jax.predictor.Predictor` of ``config``'s network structure and size with
    ``groups`` bases (static bases from the config's ``bases`` section, random weights drawn
    as the trainer draws them) computing in ``dtype``."""
    config = config.copy_and_resolve_references()
    apply_groups(config, groups)
    model_config = loop.model_config_from(config)
    model = models.build_model(model_config)
    variables = models.init_variables(model, jax.random.key(0), config.model.height, config.model.width)
    return Predictor(model, variables, None, model_config, dtype=dtype)


def _analysed(calls, fast: bool) -> list[dict]:
    """Cost analysis of each distinct captured call (the two refinement directions share one)."""
    out, seen = [], {}
    for c in calls:
        shapes = jax.tree.map(lambda a: (getattr(a, "shape", None), str(getattr(a, "dtype", ""))), c.args)
        key = (c.name, repr(sorted(c.kwargs.items())), str(shapes))
        if key not in seen:
            t0 = time.perf_counter()
            compiled = c.lower().compile(compiler_options={"xla_backend_optimization_level": 0} if fast else None)
            seen[key] = {**accel.cost_of(compiled), "compile_s": round(time.perf_counter() - t0, 1)}
        out.append({"function": c.name, **seen[key]})
    return out


def _roofline_rows(name: str, dtype: str, parts: list[dict], pairs: int) -> dict:
    flops = sum(p["flops"] or 0.0 for p in parts)
    nbytes = sum(p["bytes_accessed"] or 0.0 for p in parts)
    return {"measurement": "roofline", "computation": name, "dtype": dtype, "pairs_per_call": pairs,
            "flops_per_pair": flops / pairs, "bytes_accessed_per_pair": nbytes / pairs, "calls": parts,
            "estimates": {k: {**accel.roofline(flops / pairs, nbytes / pairs, k, dtype),
                              "pairs_per_s_upper_bound": pairs / accel.roofline(flops, nbytes, k, dtype)["lower_bound_s"]}
                          for k in accel.DEVICES}}


def bench_roofline(opts: BenchmarkOptions) -> list[dict]:
    """Roofline estimates per pair (tools.bench.accel.roofline) for one H100 SXM and one TPU v5e
    chip, float32 and bfloat16: the Predictor's jitted calls for one ``--height`` x ``--width``
    pair (flows-only network, network with confidence, flows-only + refinement; ``--groups``
    bases, default 12,12) and the real train step at ``--train-size`` / ``--train-batch``
    (default: the inference size, batch 2). FLOPs and bytes from XLA's cost analysis of the
    CPU compilation; a while loop's body (one refinement iteration per level) is counted once."""
    rows = []
    groups = parse_groups(opts.groups) or [12, 12]
    rng = np.random.default_rng(0)
    h, w = opts.height, opts.width
    img1 = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    img2 = np.roll(img1, (2, 3), axis=(0, 1))
    dtypes = ("float32", "bfloat16")
    refine_parts = None
    for dtype in dtypes:
        config = load_config(opts.config, h, w, 1, dtype, opts.arch)
        pred = inference_predictor(config, groups, dtype)
        flows = _analysed(accel.capture_jitted_calls(pred, img1, img2, refine=False), opts.fast_compile)
        conf = _analysed(accel.capture_jitted_calls(pred, img1, img2, refine=False, confidence=True),
                         opts.fast_compile)
        if refine_parts is None:  # the refinement is float32 whatever the network computes in
            # per pair: the static bases' pyramid is built once per image size (cached)
            refine_calls = [c for c in accel.capture_jitted_calls(pred, img1, img2, refine=True)
                            if c.name not in ("_forward", "_basis_pyramid")]
            refine_parts = _analysed(refine_calls, opts.fast_compile)
        for name, parts in (("infer_flows_only", flows), ("infer_with_confidence", conf),
                            ("infer_flows_only_refined", flows + refine_parts)):
            r = _roofline_rows(name, dtype, parts, 1)
            r.update(height=h, width=w, groups=groups, arch=opts.arch)
            rows.append(r)
    th, tw = (int(v) for v in (opts.train_size or f"{h}x{w}").lower().split("x"))
    tb = opts.train_batch or 2
    for dtype in dtypes:
        config = load_config(opts.config, th, tw, tb, dtype, opts.arch)
        t = build_train(config)
        lowered = t["p_train"].lower(t["state"], _train_batch_shapes(config, t), t["static"])
        t0 = time.perf_counter()
        compiled = lowered.compile(compiler_options={"xla_backend_optimization_level": 0}
                                   if opts.fast_compile else None)
        part = {"function": "train_step", **accel.cost_of(compiled),
                "compile_s": round(time.perf_counter() - t0, 1)}
        r = _roofline_rows("train_step", dtype, [part], tb)
        r.update(height=th, width=tw, groups=list(t["model_config"]["group_sizes"]), arch=opts.arch)
        rows.append(r)
    return rows


def _train_batch_shapes(config, t):
    """The train step's batch as ShapeDtypeStructs (one host batch's structure, not its data)."""
    host = next(iter(make_train_dataset(config, t["source"], read_threads=0, prefetch=1)))
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), dict(host))
