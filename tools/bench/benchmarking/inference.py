"""Inference benchmarks: the network's forward at a batch size (mode infer), the flows-only
path (mode flows_only), the Predictor's test-time refinement (mode refine) and its batched
calls (mode refine_batch).
"""

from __future__ import annotations

import os
import statistics

import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.models import build_model, init_variables
from camflow_jax.predictor import Predictor
from camflow_jax.refine import active_stages
from tools.bench.benchmarking.common import (
    BenchmarkOptions,
    arch_summary,
    compile_fn,
    compute_fields,
    flops_of,
    memory_of,
    parse_groups,
    precision_of,
    timing_summary,
)
from tools.bench.timing import interleaved, load_average, repeat, timed, warm_interleaved


def bench_infer(opts: BenchmarkOptions, batch: int, config) -> dict:
    groups = parse_groups(opts.groups) or [12, 12]
    model = build_model({**arch_summary(config), "group_sizes": groups, "precision": precision_of(opts)})
    n, b, h, w = sum(groups), batch, opts.height, opts.width
    rng = np.random.default_rng(0)
    g1 = jnp.asarray(rng.standard_normal((b, h, w, 1), np.float32))
    g2 = jnp.asarray(rng.standard_normal((b, h, w, 1), np.float32))
    shape = (b, n, h, w, 2) if opts.per_sample_bases else (n, h, w, 2)
    bases = jnp.asarray(rng.uniform(-1, 1, shape).astype(np.float32))
    bases_b = bases if opts.per_sample_bases else None
    variables = init_variables(model, jax.random.key(0), h, w)
    call_args = (variables, g1, g2, bases, bases_b)

    fwd, lower_s, compile_s = compile_fn(jax.jit(lambda v, a, c, bs, bb: model.apply(v, a, c, bs, bb)),
                                         *call_args, fast=opts.fast_compile)
    call = lambda: jax.block_until_ready(fwd(*call_args))  # noqa: E731
    first_s = timed(call)[0]
    for _ in range(opts.warmup):
        call()
    load_before = load_average()
    times, cpu = repeat(call, opts.repeats)
    dev = jax.devices()[0]
    return {
        "measurement": "infer",
        "device": str(dev), "platform": dev.platform, "cpu_count": os.cpu_count(),
        "height": h, "width": w, "batch": b, "groups": groups, **compute_fields(precision_of(opts)),
        "per_sample_bases": bool(opts.per_sample_bases), "arch": opts.arch, **arch_summary(config),
        "params": int(sum(x.size for x in jax.tree.leaves(variables["params"]))),
        "repeats": opts.repeats, "warmup": opts.warmup,
        # compile_s: lowering + XLA compilation (the old tool's first-call time also included
        # one execution, reported separately as first_call_s).
        "lower_s": round(lower_s, 3), "compile_s": round(lower_s + compile_s, 3),
        "first_call_s": round(first_s, 3),
        **timing_summary(times, cpu, b, flops_of(fwd)),
        "memory": memory_of(fwd),
        "loadavg_before": load_before, "loadavg_after": load_average(),
    }


def flows_only_setup(opts: BenchmarkOptions, config, batch: int | None = None) -> dict:
    """Mode flows_only's network and its two compiled forwards (also mode release's): the
    ``--groups`` network (default 12,12) of ``config``'s structure with random weights, random
    gray inputs [B, H, W, 1] and random static bases [N, H, W, 2] at ``--height`` x ``--width``;
    ``fns[True]`` computes flows, coefficients and the mask net's log-variances (confidence) of
    both directions, ``fns[False]`` the flows-only path. Returns {'groups', 'model', 'variables',
    'g1', 'g2', 'bases', 'fns', 'compile_s'}."""
    groups = parse_groups(opts.groups) or [12, 12]
    model = build_model({**arch_summary(config), "group_sizes": groups, "precision": precision_of(opts)})
    b, h, w = opts.batch if batch is None else batch, opts.height, opts.width
    rng = np.random.default_rng(0)
    g1 = jnp.asarray(rng.standard_normal((b, h, w, 1), np.float32))
    g2 = jnp.asarray(rng.standard_normal((b, h, w, 1), np.float32))
    bases = jnp.asarray(rng.uniform(-1, 1, (sum(groups), h, w, 2)).astype(np.float32))
    variables = init_variables(model, jax.random.key(0), h, w)
    fns, compile_s = {}, {}
    for conf in (True, False):
        fns[conf], lower_s, comp_s = compile_fn(
            jax.jit(lambda v, a, c, bs, conf=conf: model.apply(v, a, c, bs, confidence=conf)),
            variables, g1, g2, bases, fast=opts.fast_compile)
        compile_s[conf] = lower_s + comp_s
    return {"groups": groups, "model": model, "variables": variables, "g1": g1, "g2": g2, "bases": bases,
            "fns": fns, "compile_s": compile_s}


def bench_flows_only(opts: BenchmarkOptions, config) -> dict:
    """The network forward with the mask net (confidence) and without it (the flows-only path),
    both compiled, timed interleaved (``--repeats`` each after ``--warmup``) so that load changes
    hit both alike; same random weights, inputs and ``--groups`` as mode infer."""
    s = flows_only_setup(opts, config)
    groups, variables, g1, g2, bases, fns = (s[k] for k in ("groups", "variables", "g1", "g2", "bases", "fns"))
    b, h, w = opts.batch, opts.height, opts.width
    full, flows = (fns[True](variables, g1, g2, bases), fns[False](variables, g1, g2, bases))
    same = bool(np.array_equal(np.asarray(full["flow_f"]), np.asarray(flows["flow_f"])))
    for _ in range(opts.warmup):
        for conf in (True, False):
            jax.block_until_ready(fns[conf](variables, g1, g2, bases))
    load_before = load_average()
    times, _ = interleaved({conf: (lambda conf=conf: jax.block_until_ready(fns[conf](variables, g1, g2, bases)))
                            for conf in (True, False)}, opts.repeats)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"measurement": "flows_only", "height": h, "width": w, "batch": b, "groups": groups,
            **compute_fields(precision_of(opts)), "arch": opts.arch, **arch_summary(config), "repeats": opts.repeats,
            "warmup": opts.warmup, "flows_identical": same,
            "with_confidence_median_s": round(med[True], 4), "flows_only_median_s": round(med[False], 4),
            "saved_fraction": round(1 - med[False] / med[True], 3),
            "paired_saved_median_s": round(statistics.median(np.subtract(times[True], times[False])), 4),
            "with_confidence_flops": flops_of(fns[True]), "flows_only_flops": flops_of(fns[False]),
            "with_confidence_s": [round(t, 4) for t in times[True]],
            "flows_only_s": [round(t, 4) for t in times[False]],
            "loadavg_before": load_before, "loadavg_after": load_average()}



def bench_refine(opts: BenchmarkOptions) -> dict:
    """The refinement's added time per pair: ``pred(...)`` (flows-only network + refinement, the
    default) against the network alone, flows-only (``refine=False``, the default output) and
    with the confidence maps (``confidence=True``: the full network), interleaved."""
    src = SyntheticScenes(seed=1000, num_samples=2, height=opts.height, width=opts.width)
    pairs = [(s["img1"], s["img2"], {"depth1": s["depth1"], "depth2": s["depth2"], "intrinsics": s["K"]})
             for s in (src[0], src[1])]
    pred = Predictor.from_pretrained(precision=precision_of(opts))
    jitted = ("_forward", "_basis_pyramid", "_refine_images", "_direction_bases", "_refine_direction")

    def cache_sizes():
        return {k: getattr(getattr(pred, k, None), "_cache_size", lambda: None)() for k in jitted}

    calls = {"net_flows_only": dict(refine=False), "net_with_confidence": dict(refine=False, confidence=True),
             "refined": dict(refine=True)}
    first = []
    for i, (a, b, cam) in enumerate(pairs):  # a second pair of the same size must not recompile
        for name, kw in calls.items():
            seconds = timed(lambda a=a, b=b, cam=cam, kw=kw: pred(a, b, **cam, **kw))[0]
            first.append({"pair": i, "call": name, "seconds": round(seconds, 3), "jit_cache_sizes": cache_sizes()})
    a, b, cam = pairs[0]
    for _ in range(opts.warmup):
        for kw in calls.values():
            pred(a, b, **cam, **kw)
    load_before = load_average()
    last = {}  # each call's last output: the refined one's refine_info is reported

    def call(name, kw):
        def run():
            last[name] = pred(a, b, **cam, **kw)
        return run

    times, _ = interleaved({name: call(name, kw) for name, kw in calls.items()}, opts.repeats)  # load hits all alike
    info = next((o["refine_info"] for o in reversed(last.values()) if "refine_info" in o), None)
    med = {k: statistics.median(v) for k, v in times.items()}
    added = med["refined"] - med["net_flows_only"]
    return {
        "measurement": "refine", "height": opts.height, "width": opts.width, **compute_fields(pred.precision),
        "repeats": opts.repeats, "warmup": opts.warmup, "first_calls": first,
        "net_median_s": round(med["net_flows_only"], 4),
        "net_with_confidence_median_s": round(med["net_with_confidence"], 4),
        "refined_median_s": round(med["refined"], 4),
        "added_median_s": round(added, 4),
        "added_fraction_of_net": round(added / med["net_flows_only"], 3),
        "added_fraction_of_net_with_confidence": round(added / med["net_with_confidence"], 3),
        "paired_added_median_s": round(statistics.median(np.subtract(times["refined"], times["net_flows_only"])), 4),
        # the same ratio per interleaved round, then its median: less moved by the machine's
        # drift over a run than the ratio of the two medians
        "paired_added_fraction_of_net": round(statistics.median(
            np.subtract(times["refined"], times["net_flows_only"]) / np.asarray(times["net_flows_only"])), 3),
        "net_s": [round(t, 4) for t in times["net_flows_only"]],
        "net_with_confidence_s": [round(t, 4) for t in times["net_with_confidence"]],
        "refined_s": [round(t, 4) for t in times["refined"]],
        "refine_info": {k: info.get(k) for k in ("iterations", "start", "improved", "working_size_hw", "detail_size_hw")},
        "loadavg_before": load_before, "loadavg_after": load_average(),
    }


#: refine_batch: the streamed measurement's batches per call
STREAM_BATCHES = 4


def bench_refine_batch(opts: BenchmarkOptions) -> dict:
    """``Predictor.predict_batch`` at ``opts.batch`` pairs per call (the shipped model, CamFlow+
    with depth, 8-bit pairs of ``height x width``), the network alone and refined, and refined
    over :data:`STREAM_BATCHES` batches in one call (the host prepares a batch while the device
    computes the one before), against the single-pair call on the batch's first pair,
    interleaved: pairs/s of each, and the refinement's added time as a fraction of the
    network's at the batch and at one pair."""
    b = opts.batch
    src = SyntheticScenes(seed=1000, num_samples=b, height=opts.height, width=opts.width)
    u8 = lambda x: np.clip(np.round(np.asarray(x, np.float32)), 0, 255).astype(np.uint8)  # noqa: E731
    samples = [{**s, "img1": u8(s["img1"]), "img2": u8(s["img2"])} for s in (src[i] for i in range(b))]
    batch = {"images1": [s["img1"] for s in samples], "images2": [s["img2"] for s in samples],
             "depths1": [s["depth1"] for s in samples], "depths2": [s["depth2"] for s in samples],
             "intrinsics": [s["K"] for s in samples]}
    stream = {k: v * STREAM_BATCHES for k, v in batch.items()}  # batches in a row: host and device overlap
    one = (samples[0]["img1"], samples[0]["img2"])
    cam = {"depth1": samples[0]["depth1"], "depth2": samples[0]["depth2"], "intrinsics": samples[0]["K"]}
    pred = Predictor.from_pretrained(precision=precision_of(opts))
    pred.batched_refinement = {"auto": None, "on": True, "off": False}[opts.batched_refinement]
    calls = {
        "batch_net": lambda: pred.predict_batch(**batch, refine=False, batch_size=b),
        "batch_refined": lambda: pred.predict_batch(**batch, refine=True, batch_size=b),
        "stream_refined": lambda: pred.predict_batch(**stream, refine=True, batch_size=b),
        "single_net": lambda: pred(*one, **cam, refine=False),
        "single_refined": lambda: pred(*one, **cam, refine=True),
    }
    run = warm_interleaved(calls, opts.repeats, opts.warmup)  # so load changes hit all alike
    times = run["wall"]
    med = {k: statistics.median(v) for k, v in times.items()}
    dev = jax.devices()[0]
    return {
        "measurement": "refine_batch", "device": str(dev), "platform": dev.platform, "cpu_count": os.cpu_count(),
        "height": opts.height, "width": opts.width, "batch": b, **compute_fields(pred.precision),
        "batched_refinement": pred.uses_batched_refinement(), "repeats": opts.repeats, "warmup": opts.warmup,
        "first_call_s": run["first"], "median_s": {k: round(v, 4) for k, v in med.items()},
        "batch_net_pairs_per_s": round(b / med["batch_net"], 2),
        "batch_refined_pairs_per_s": round(b / med["batch_refined"], 2),
        "stream_batches": STREAM_BATCHES,
        "stream_refined_pairs_per_s": round(STREAM_BATCHES * b / med["stream_refined"], 2),
        "single_net_pairs_per_s": round(1 / med["single_net"], 2),
        "single_refined_pairs_per_s": round(1 / med["single_refined"], 2),
        "refined_speedup_over_single": round(b / med["batch_refined"] * med["single_refined"], 3),
        "batch_added_fraction_of_net": round((med["batch_refined"] - med["batch_net"]) / med["batch_net"], 3),
        "single_added_fraction_of_net": round((med["single_refined"] - med["single_net"]) / med["single_net"], 3),
        "times_s": {k: [round(t, 4) for t in v] for k, v in times.items()},
        "loadavg_before": run["loadavg_before"], "loadavg_after": run["loadavg_after"],
    }


def _iteration_stats(results: list[dict]) -> np.ndarray:
    """``[directions, levels]`` LM iterations of a batch's refined results (both directions of
    each pair; a level's stages summed, the detail level last where it ran)."""
    return np.array([d for r in results for d in r["refine_info"]["iterations"]], np.int64)


def _epe(results: list[dict], samples: list[dict]) -> list[float]:
    """Each pair's forward mean endpoint error against the renderer's exact flow, valid pixels."""
    out = []
    for r, s in zip(results, samples):
        err = np.linalg.norm(np.asarray(r["flow_f"], np.float64) - s["flow_f"], axis=-1)
        out.append(float(err[np.asarray(s["valid_f"], bool)].mean()))
    return out


def bench_refine_trips(opts: BenchmarkOptions) -> dict:
    """What the batched refinement's loops cost (issue "on the next accelerator"): a batch's
    vmapped ``while_loop`` at each level runs as long as its slowest direction needs, and tests
    its condition every iteration.

    ``Predictor.predict_batch`` forced to one vmapped program (as on an accelerator), the shipped
    model with depth on ``opts.batch`` held-out synthetic pairs (seed 1000) at ``height x
    width``: the iterations each direction ran per level (mean, median, the batch's largest; a
    level's stages summed), then, timed interleaved with the default: ``capped``, each stage's
    budget cut to the median direction's share (the time the slowest directions cost, and what
    cutting them does to the forward EPE against the exact flow and to the final robust cost),
    and ``unrolled`` (``RefineConfig.loop``: the full budget as straight-line code, the same
    results without a loop test per iteration)."""
    b = opts.batch
    src = SyntheticScenes(seed=1000, num_samples=b, height=opts.height, width=opts.width)
    u8 = lambda x: np.clip(np.round(np.asarray(x, np.float32)), 0, 255).astype(np.uint8)  # noqa: E731
    samples = [src[i] for i in range(b)]
    batch = {"images1": [u8(s["img1"]) for s in samples], "images2": [u8(s["img2"]) for s in samples],
             "depths1": [s["depth1"] for s in samples], "depths2": [s["depth2"] for s in samples],
             "intrinsics": [s["K"] for s in samples]}
    pred = Predictor.from_pretrained(precision=precision_of(opts))
    pred.batched_refinement = True
    cfg = pred.refine_config
    default = pred.predict_batch(**batch, refine=cfg, batch_size=b)
    its = _iteration_stats(default)
    levels = cfg.levels
    stages = [len(active_stages(a, pred.basis_groups)) for a in cfg.active]
    budget = list(cfg.iterations) + ([cfg.detail_iterations] if its.shape[1] > levels else [])
    stages += [1] * (len(budget) - levels)
    caps = [max(1, min(n, int(np.ceil(np.median(its[:, li]) / k)))) for li, (n, k) in enumerate(zip(budget, stages))]
    configs = {"default": cfg,
               "capped": cfg.replace(iterations=tuple(caps[:levels]),
                                     **({"detail_iterations": caps[levels]} if len(caps) > levels else {})),
               "unrolled": cfg.replace(loop="unrolled")}
    last = {}  # each variant's latest results (every call returns the same)

    def call(name):
        last[name] = pred.predict_batch(**batch, refine=configs[name], batch_size=b)

    run = warm_interleaved({name: (lambda n=name: call(n)) for name in configs}, opts.repeats, opts.warmup)
    times = run["wall"]
    med = {k: statistics.median(v) for k, v in times.items()}
    capped, unrolled = last["capped"], last["unrolled"]
    cost = lambda rs: np.array([c for r in rs for c in r["refine_info"]["cost_after"]])  # noqa: E731
    c0, c1 = cost(default), cost(capped)
    e0, e1 = _epe(default, samples), _epe(capped, samples)
    dev = jax.devices()[0]
    return {
        "measurement": "refine_trips", "device": str(dev), "platform": dev.platform, "cpu_count": os.cpu_count(),
        "height": opts.height, "width": opts.width, "batch": b, "directions": int(its.shape[0]),
        **compute_fields(pred.precision), "repeats": opts.repeats, "warmup": opts.warmup,
        "budget_per_stage": budget, "stages": stages,
        "iterations_mean": [round(float(x), 2) for x in its.mean(0)],
        "iterations_median": [float(x) for x in np.median(its, 0)],
        "iterations_max": [int(x) for x in its.max(0)],
        # the share of the batch's iterations beyond what the mean direction needed (levels alike)
        "trips_beyond_mean": round(1.0 - float(its.mean(0).sum() / its.max(0).sum()), 3),
        "capped_per_stage": caps, "capped_is_default": configs["capped"] == cfg, "capped_iterations_max": [int(x) for x in _iteration_stats(capped).max(0)],
        "first_call_s": run["first"], "median_s": {k: round(v, 4) for k, v in med.items()},
        "capped_time_ratio": round(med["capped"] / med["default"], 3),
        "unrolled_time_ratio": round(med["unrolled"] / med["default"], 3),
        "unrolled_same_iterations": bool(np.array_equal(_iteration_stats(unrolled), its)),
        "unrolled_largest_flow_change_px": round(max(float(np.abs(np.asarray(u["flow_f"]) - np.asarray(d["flow_f"])).max())
                                                     for u, d in zip(unrolled, default)), 5),
        "epe_default_mean": round(float(np.mean(e0)), 4), "epe_capped_mean": round(float(np.mean(e1)), 4),
        "epe_capped_worse_pairs": int(sum(x1 > x0 + 0.01 for x0, x1 in zip(e0, e1))),
        "cost_capped_over_default_median": round(float(np.median(c1 / c0)), 4),
        "cost_capped_worse_directions": int(np.sum(c1 > c0 * 1.01)),
        "times_s": {k: [round(t, 4) for t in v] for k, v in times.items()},
        "loadavg_before": run["loadavg_before"], "loadavg_after": run["loadavg_after"],
    }
