"""Benchmark measurements: inference latency/throughput, train-step throughput and memory, XLA
FLOP counts, and the test-time refinement's cost. The command line is ``python
tools/benchmark.py`` (what each mode measures, and the commands behind docs/performance.md,
are in its help); it parses the arguments into :class:`BenchmarkOptions` and prints each result
of :func:`run` as one JSON line.

Each function is lowered and compiled once (``jax.jit(f).lower(...).compile()``); the compiled
object is what is timed (:func:`compile_fn`). Every measurement reports median/mean/min
seconds per call and per pair, pairs/s and process CPU seconds (:func:`timing_summary`), lower
and compile seconds, FLOPs from XLA's cost analysis (:func:`flops_of`), memory
(:func:`memory_of`) and the load average before/after. jax is imported inside the functions,
so importing this module starts no backend.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["MODES", "BenchmarkOptions", "run", "bench_infer", "bench_train", "bench_refine", "build_train",
           "load_config", "apply_groups", "arch_keys", "machine_info", "compile_fn", "flops_of", "memory_of",
           "timing_summary", "bench_roofline", "inference_predictor", "bench_flows_only", "flows_only_setup",
           "train_setup"]

MODES = ("infer", "train", "all", "refine", "roofline", "flows_only")

# Fields of ``Compiled.memory_analysis()`` reported when the installed jaxlib has them.
_MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
                  "temp_size_in_bytes", "generated_code_size_in_bytes", "peak_memory_in_bytes",
                  "host_argument_size_in_bytes", "host_output_size_in_bytes", "host_temp_size_in_bytes")


@dataclasses.dataclass
class BenchmarkOptions:
    """What :func:`run` measures; the fields are ``tools/benchmark.py``'s flags (see its help),
    in its order, and are recorded as ``args`` in the report."""

    mode: str = "infer"                 # one of MODES
    height: int = 320
    width: int = 576
    batch: int = 1                      # infer; the large-batch inference and train step of 'all'
    groups: str | None = None           # e.g. "12,12" (inference default) or "12,12,12"
    dtype: str = "float32"              # float32 | bfloat16
    per_sample_bases: bool = False      # inference: [B, N, H, W, 2] bases as CamFlow+ passes them
    config: str = "synthetic"           # training config (name or file) of the train step
    arch: str = "release"               # 'release' structure or the config's 'config' one
    train_batch: int | None = None      # train batch (default: batch)
    train_size: str | None = None       # "HxW" of the train measurements (default: height x width)
    repeats: int = 20                   # timed calls (train modes: steps)
    warmup: int = 2                     # untimed calls after compilation
    prefetch_buffer: int | None = None  # train_data: batches ahead (default: data.prefetch)
    prefetch_threads: int | None = None  # train_data: read threads (default: data.read_threads)
    fast_compile: bool = False          # XLA backend optimization level 0: for tests, not timings
    out: str | None = None              # JSON file for all results and machine info


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------

def _loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def _peak_rss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) if sys.platform == "darwin" else int(r) * 1024  # Linux reports KiB


def machine_info() -> dict:
    import flax
    import jax
    import jaxlib
    import optax

    dev = jax.devices()[0]
    return {"platform": dev.platform, "device": str(dev), "device_kind": dev.device_kind,
            "device_count": jax.device_count(), "cpu_count": os.cpu_count(),
            "processor": platform.processor() or platform.machine(), "python": platform.python_version(),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__,
            "optax": optax.__version__, "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def compile_fn(fn, *args, fast: bool = False):
    """(compiled, lower seconds, compile seconds) of ``fn`` (a jitted function) for ``args``."""
    t0 = time.perf_counter()
    lowered = fn.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile(compiler_options={"xla_backend_optimization_level": 0} if fast else None)
    return compiled, t1 - t0, time.perf_counter() - t1


def flops_of(compiled) -> float | None:
    """Total FLOPs of a compiled computation from XLA's cost analysis
    (:func:`camflow_jax.accel.cost_of`); None when the backend gives none."""
    from camflow_jax import accel

    return accel.cost_of(compiled)["flops"]


def memory_of(compiled) -> dict:
    """``compiled.memory_analysis()`` sizes, the device's peak bytes in use (GPU/TPU) and the
    process peak RSS."""
    out = {}
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001
        m = None
    if m is not None:
        for f in _MEMORY_FIELDS:
            v = getattr(m, f, None)
            if isinstance(v, (int, float)):
                out[f] = int(v)
    import jax

    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001
        stats = None
    if stats and "peak_bytes_in_use" in stats:
        out["device_peak_bytes_in_use"] = int(stats["peak_bytes_in_use"])
    out["process_peak_rss_bytes"] = _peak_rss_bytes()
    return out


def timing_summary(times, cpu, batch, flops) -> dict:
    """Median/mean/min seconds per call of ``times`` (wall) and ``cpu`` (process CPU seconds),
    per pair of ``batch``, pairs/s, and FLOPs per call / per pair / per second (None without
    ``flops``)."""
    med = statistics.median(times)
    return {"median_s": round(med, 4), "mean_s": round(statistics.mean(times), 4),
            "min_s": round(min(times), 4), "median_s_per_pair": round(med / batch, 4),
            "pairs_per_s": round(batch / med, 3),
            "median_process_cpu_s": round(statistics.median(cpu), 4),
            "mean_process_cpu_s": round(statistics.mean(cpu), 4),
            "times_s": [round(t, 4) for t in times],
            "flops": flops, "flops_per_pair": None if flops is None else flops / batch,
            "flops_per_s": None if flops is None else flops / med}


def arch_keys() -> tuple[str, ...]:
    """The network's structure fields (camflow_jax.models.ModelConfig), but dtype (--dtype sets it)."""
    from camflow_jax.models import NETWORK_FIELDS  # lazily: jax must not start before the flags are read

    return tuple(k for k in NETWORK_FIELDS if k != "dtype")


def load_config(path, height: int, width: int, batch: int, dtype: str | None = None, arch: str = "config"):
    """``get_config()`` of a config file, with model.height/width, batch_size (and dtype) set;
    ``arch='release'`` also sets the network structure keys to the released CamFlow's."""
    from camflow_jax import configs

    config = configs.load(str(path))
    config.model.height, config.model.width, config.batch_size = int(height), int(width), int(batch)
    if dtype:
        config.model.dtype = dtype
    if arch == "release":
        from camflow_jax.models import ModelConfig

        for k in arch_keys():
            if k in config.model:
                config.model[k] = type(config.model[k])(getattr(ModelConfig(), k))
    elif arch != "config":
        raise ValueError(f"arch must be 'release' or 'config', got {arch!r}")
    return config


def _arch(config) -> dict:
    m = config.model
    return {k: (list(m[k]) if isinstance(m[k], (tuple, list)) else m[k]) for k in arch_keys() if k in m}


def _parse_groups(groups) -> list[int] | None:
    if groups is None or groups == "":
        return None
    if isinstance(groups, str):
        return [int(g) for g in groups.split(",")]
    return [int(g) for g in groups]


def apply_groups(config, groups: list[int]) -> None:
    """Sets ``config.bases`` so the trainer's model has these group sizes: [homography,
    stochastic] (CamFlow) or [homography, stochastic, depth] (CamFlow+; depth = 3 x sigmas)."""
    from camflow_jax import trainer

    if len(groups) not in (2, 3):
        raise ValueError(f"train mode: --groups needs 2 or 3 sizes (homography,stochastic[,depth]), got {groups}")
    config.bases.num_homography, config.bases.num_stochastic = groups[0], groups[1]
    config.bases.use_depth = len(groups) == 3
    got = trainer.model_config_from(config)["group_sizes"]
    if [g for g in got] != [g for g in groups if g]:
        raise ValueError(f"train mode: --groups {groups} gives group sizes {got} "
                         f"(the depth group has 3 x {len(trainer.depth_sigmas(config))} bases)")


# ----------------------------------------------------------------------------------------------
# Inference
# ----------------------------------------------------------------------------------------------

def bench_infer(opts: BenchmarkOptions, batch: int, config) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from camflow_jax.models import build_model, init_variables

    groups = _parse_groups(opts.groups) or [12, 12]
    model = build_model({**_arch(config), "group_sizes": groups, "dtype": opts.dtype})
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
    t0 = time.perf_counter()
    jax.block_until_ready(fwd(*call_args))
    first_s = time.perf_counter() - t0
    for _ in range(opts.warmup):
        jax.block_until_ready(fwd(*call_args))
    load_before = _loadavg()
    times, cpu = [], []
    for _ in range(opts.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(fwd(*call_args))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    dev = jax.devices()[0]
    return {
        "measurement": "infer",
        "device": str(dev), "platform": dev.platform, "cpu_count": os.cpu_count(),
        "height": h, "width": w, "batch": b, "groups": groups, "dtype": opts.dtype,
        "per_sample_bases": bool(opts.per_sample_bases), "arch": opts.arch, **_arch(config),
        "params": int(sum(x.size for x in jax.tree.leaves(variables["params"]))),
        "repeats": opts.repeats, "warmup": opts.warmup,
        # compile_s: lowering + XLA compilation (the old tool's first-call time also included
        # one execution, reported separately as first_call_s).
        "lower_s": round(lower_s, 3), "compile_s": round(lower_s + compile_s, 3),
        "first_call_s": round(first_s, 3),
        **timing_summary(times, cpu, b, flops_of(fwd)),
        "memory": memory_of(fwd),
        "loadavg_before": load_before, "loadavg_after": _loadavg(),
    }


def flows_only_setup(opts: BenchmarkOptions, config, batch: int | None = None) -> dict:
    """Mode flows_only's network and its two compiled forwards (also mode release's): the
    ``--groups`` network (default 12,12) of ``config``'s structure with random weights, random
    gray inputs [B, H, W, 1] and random static bases [N, H, W, 2] at ``--height`` x ``--width``;
    ``fns[True]`` computes flows, coefficients and the mask net's log-variances (confidence) of
    both directions, ``fns[False]`` the flows-only path. Returns {'groups', 'model', 'variables',
    'g1', 'g2', 'bases', 'fns', 'compile_s'}."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from camflow_jax.models import build_model, init_variables

    groups = _parse_groups(opts.groups) or [12, 12]
    model = build_model({**_arch(config), "group_sizes": groups, "dtype": opts.dtype})
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
    import jax
    import numpy as np

    s = flows_only_setup(opts, config)
    groups, variables, g1, g2, bases, fns = (s[k] for k in ("groups", "variables", "g1", "g2", "bases", "fns"))
    b, h, w = opts.batch, opts.height, opts.width
    full, flows = (fns[True](variables, g1, g2, bases), fns[False](variables, g1, g2, bases))
    same = bool(np.array_equal(np.asarray(full["flow_f"]), np.asarray(flows["flow_f"])))
    for _ in range(opts.warmup):
        for conf in (True, False):
            jax.block_until_ready(fns[conf](variables, g1, g2, bases))
    load_before = _loadavg()
    times = {True: [], False: []}
    for _ in range(opts.repeats):
        for conf in (True, False):
            t0 = time.perf_counter()
            jax.block_until_ready(fns[conf](variables, g1, g2, bases))
            times[conf].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"measurement": "flows_only", "height": h, "width": w, "batch": b, "groups": groups,
            "dtype": opts.dtype, "arch": opts.arch, **_arch(config), "repeats": opts.repeats,
            "warmup": opts.warmup, "flows_identical": same,
            "with_confidence_median_s": round(med[True], 4), "flows_only_median_s": round(med[False], 4),
            "saved_fraction": round(1 - med[False] / med[True], 3),
            "paired_saved_median_s": round(statistics.median(np.subtract(times[True], times[False])), 4),
            "with_confidence_flops": flops_of(fns[True]), "flows_only_flops": flops_of(fns[False]),
            "with_confidence_s": [round(t, 4) for t in times[True]],
            "flows_only_s": [round(t, 4) for t in times[False]],
            "loadavg_before": load_before, "loadavg_after": _loadavg()}


# ----------------------------------------------------------------------------------------------
# Test-time refinement (the Predictor's, shipped model)
# ----------------------------------------------------------------------------------------------

def bench_refine(opts: BenchmarkOptions) -> dict:
    """The refinement's added time per pair: ``pred(...)`` (flows-only network + refinement, the
    default) against the network alone, flows-only (``refine=False``, the default output) and
    with the confidence maps (``confidence=True``: the full network), interleaved."""
    import numpy as np

    from camflow_jax.data.synthetic import SyntheticScenes
    from camflow_jax.predictor import Predictor

    src = SyntheticScenes(seed=1000, num_samples=2, height=opts.height, width=opts.width)
    pairs = [(s["img1"], s["img2"], {"depth1": s["depth1"], "depth2": s["depth2"], "intrinsics": s["K"]})
             for s in (src[0], src[1])]
    pred = Predictor.from_pretrained()
    jitted = ("_forward", "_pyramid", "_refine_bases_jit", "_refine_motion", "_fit_homography")

    def cache_sizes():
        return {k: getattr(getattr(pred, k, None), "_cache_size", lambda: None)() for k in jitted}

    calls = {"net_flows_only": dict(refine=False), "net_with_confidence": dict(refine=False, confidence=True),
             "refined": dict(refine=True)}
    first = []
    for i, (a, b, cam) in enumerate(pairs):  # a second pair of the same size must not recompile
        for name, kw in calls.items():
            t0 = time.perf_counter()
            pred(a, b, **cam, **kw)
            first.append({"pair": i, "call": name, "seconds": round(time.perf_counter() - t0, 3),
                          "jit_cache_sizes": cache_sizes()})
    a, b, cam = pairs[0]
    for _ in range(opts.warmup):
        for kw in calls.values():
            pred(a, b, **cam, **kw)
    load_before = _loadavg()
    times = {k: [] for k in calls}
    info = None
    for _ in range(opts.repeats):  # interleaved, so load changes hit all alike
        for name, kw in calls.items():
            t0 = time.perf_counter()
            out = pred(a, b, **cam, **kw)
            times[name].append(time.perf_counter() - t0)
            info = out.get("refine_info", info)
    med = {k: statistics.median(v) for k, v in times.items()}
    added = med["refined"] - med["net_flows_only"]
    return {
        "measurement": "refine", "height": opts.height, "width": opts.width,
        "repeats": opts.repeats, "warmup": opts.warmup, "first_calls": first,
        "net_median_s": round(med["net_flows_only"], 4),
        "net_with_confidence_median_s": round(med["net_with_confidence"], 4),
        "refined_median_s": round(med["refined"], 4),
        "added_median_s": round(added, 4),
        "added_fraction_of_net": round(added / med["net_flows_only"], 3),
        "added_fraction_of_net_with_confidence": round(added / med["net_with_confidence"], 3),
        "paired_added_median_s": round(statistics.median(np.subtract(times["refined"], times["net_flows_only"])), 4),
        "net_s": [round(t, 4) for t in times["net_flows_only"]],
        "net_with_confidence_s": [round(t, 4) for t in times["net_with_confidence"]],
        "refined_s": [round(t, 4) for t in times["refined"]],
        "refine_info": {k: info[k] for k in ("iterations", "start", "improved", "working_size_hw")},
        "loadavg_before": load_before, "loadavg_after": _loadavg(),
    }


# ----------------------------------------------------------------------------------------------
# Roofline estimates for accelerators (camflow_jax.accel): XLA's counts, no timing
# ----------------------------------------------------------------------------------------------

def inference_predictor(config, groups, dtype: str):
    """A :class:`~camflow_jax.predictor.Predictor` of ``config``'s network structure and size with
    ``groups`` bases (static bases from the config's ``bases`` section, random weights drawn
    as the trainer draws them) computing in ``dtype``."""
    import jax

    from camflow_jax import models, trainer
    from camflow_jax.predictor import Predictor

    config = config.copy_and_resolve_references()
    apply_groups(config, groups)
    model_config = trainer.model_config_from(config)
    model = models.build_model(model_config)
    variables = models.init_variables(model, jax.random.key(0), config.model.height, config.model.width)
    return Predictor(model, variables, None, model_config, dtype=dtype)


def _analysed(calls, fast: bool) -> list[dict]:
    """Cost analysis of each distinct captured call (the two refinement directions share one)."""
    import jax

    from camflow_jax import accel

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
    from camflow_jax import accel

    flops = sum(p["flops"] or 0.0 for p in parts)
    nbytes = sum(p["bytes_accessed"] or 0.0 for p in parts)
    return {"measurement": "roofline", "computation": name, "dtype": dtype, "pairs_per_call": pairs,
            "flops_per_pair": flops / pairs, "bytes_accessed_per_pair": nbytes / pairs, "calls": parts,
            "estimates": {k: {**accel.roofline(flops / pairs, nbytes / pairs, k, dtype),
                              "pairs_per_s_upper_bound": pairs / accel.roofline(flops, nbytes, k, dtype)["lower_bound_s"]}
                          for k in accel.DEVICES}}


def bench_roofline(opts: BenchmarkOptions) -> list[dict]:
    """Roofline estimates per pair (camflow_jax.accel.roofline) for one H100 SXM and one TPU v5e
    chip, float32 and bfloat16: the Predictor's jitted calls for one ``--height`` x ``--width``
    pair (flows-only network, network with confidence, flows-only + refinement; ``--groups``
    bases, default 12,12) and the real train step at ``--train-size`` / ``--train-batch``
    (default: the inference size, batch 2). FLOPs and bytes from XLA's cost analysis of the
    CPU compilation; a while loop's body (one refinement iteration per level) is counted once."""
    import numpy as np

    from camflow_jax import accel

    rows = []
    groups = _parse_groups(opts.groups) or [12, 12]
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
            refine_calls = [c for c in accel.capture_jitted_calls(pred, img1, img2, refine=True)
                            if c.name != "_forward"]
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
    import jax

    from camflow_jax import trainer

    host = next(iter(trainer.make_train_dataset(config, t["source"], read_threads=0, prefetch=1)))
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), dict(host))


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------

def build_train(config):
    """Everything ``train_and_evaluate`` builds before its loop (through the trainer's own setup
    functions): jitted step, state, static bases, the training source."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    from camflow_jax import checkpoint, models, trainer
    from camflow_jax.data import pipeline

    trainer.validate_config(config)
    model_config = trainer.model_config_from(config)
    model = models.build_model(model_config)
    source = pipeline.make_source(config.data, config.model.height, config.model.width, "train")
    steps_per_epoch = config.optim.steps_per_epoch or max(len(source) // config.batch_size, 1)
    mesh = trainer.make_mesh()
    repl, data_sharding = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    tx = trainer.make_optimizer(config, steps_per_epoch)
    state = trainer.init_train_state(config, model, tx, jax.random.key(config.seed), repl)
    static = jax.device_put(jnp.asarray(np.asarray(checkpoint.model_bases(model_config))), repl)
    p_train, _ = trainer.jit_steps(model, tx, config, repl, data_sharding)
    return {"model_config": model_config, "params": models.count_params(state["params"]), "state": state,
            "static": static, "p_train": p_train, "source": source,
            "to_global": lambda batch: trainer.host_to_global(batch, data_sharding)}


def _mem_available_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def train_setup(opts: BenchmarkOptions, config) -> dict:
    """The real train step compiled on one fixed device-resident batch (mode train's, also mode
    release's): :func:`build_train` of ``config``, the pipeline's first host batch, the step
    compiled for it; raises MemoryError where XLA's memory analysis says it does not fit. Returns
    {'t' (build_train's dict), 'host_batch', 'first_batch_s', 'fixed', 'batch_bytes', 'step',
    'lower_s', 'compile_s', 'flops', 'memory'}."""
    import jax
    import numpy as np

    from camflow_jax import trainer

    t = build_train(config)
    t0 = time.perf_counter()
    host_batch = next(iter(trainer.make_train_dataset(config, t["source"], read_threads=0, prefetch=1)))
    first_batch_s = time.perf_counter() - t0
    fixed = t["to_global"](host_batch)  # one real batch, resident on the device(s)
    jax.block_until_ready(fixed)
    batch_bytes = int(sum(np.asarray(v).nbytes for v in host_batch.values()))
    step, lower_s, compile_s = compile_fn(t["p_train"], t["state"], fixed, t["static"], fast=opts.fast_compile)
    flops, memory = flops_of(step), memory_of(step)
    need = sum(memory.get(k, 0) for k in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes"))
    available = _mem_available_bytes()
    if jax.devices()[0].platform == "cpu" and available and need > 0.85 * available:
        raise MemoryError(f"the train step needs {need / 2**30:.1f} GiB (XLA memory analysis) but only "
                          f"{available / 2**30:.1f} GiB are available: use a smaller --train-batch or --train-size")
    return {"t": t, "host_batch": host_batch, "first_batch_s": first_batch_s, "fixed": fixed,
            "batch_bytes": batch_bytes, "step": step, "lower_s": lower_s, "compile_s": compile_s,
            "flops": flops, "memory": memory}


def bench_train(opts: BenchmarkOptions, config) -> list[dict]:
    """[train (fixed batch), train_data (grain pipeline)] measurements of one compiled step."""
    import jax
    import numpy as np

    from camflow_jax import trainer

    s = train_setup(opts, config)
    t, step, fixed, host_batch = s["t"], s["step"], s["fixed"], s["host_batch"]
    first_batch_s, batch_bytes, lower_s, compile_s = s["first_batch_s"], s["batch_bytes"], s["lower_s"], s["compile_s"]
    flops, memory = s["flops"], s["memory"]
    to_global, static = t["to_global"], t["static"]
    b = config.batch_size
    state = t["state"]
    common = {"device": str(jax.devices()[0]), "platform": jax.devices()[0].platform,
              "cpu_count": os.cpu_count(), "height": config.model.height, "width": config.model.width,
              "batch": b, "groups": list(t["model_config"]["group_sizes"]),
              "dtype": str(config.model.dtype), "per_sample_depth_bases": bool(config.bases.use_depth),
              "arch": opts.arch, **_arch(config), "params": t["params"], "config": str(opts.config), "repeats": opts.repeats, "warmup": opts.warmup,
              "lower_s": round(lower_s, 3), "compile_s": round(lower_s + compile_s, 3)}

    # (i) one fixed device-resident batch: no input pipeline.
    t0 = time.perf_counter()
    state, terms = step(state, fixed, static)
    jax.block_until_ready((state, terms))
    first_s = time.perf_counter() - t0
    for _ in range(opts.warmup):
        state, terms = step(state, fixed, static)
        jax.block_until_ready((state, terms))
    load_before = _loadavg()
    times, cpu = [], []
    for _ in range(opts.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        state, terms = step(state, fixed, static)
        jax.block_until_ready((state, terms))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    loss = float(jax.device_get(terms["total"]))
    res_fixed = {"measurement": "train", **common, "first_call_s": round(first_s, 3),
                 **timing_summary(times, cpu, b, flops), "loss_finite": bool(np.isfinite(loss)),
                 "memory": memory, "loadavg_before": load_before, "loadavg_after": _loadavg()}

    # (ii) fed from the trainer's grain pipeline as its loop does: next batch, transfer, step,
    # without blocking, so host-side data work overlaps the device work of the previous step.
    # --prefetch-threads / --prefetch-buffer replace the config's read options.
    overrides = {"read_threads": opts.prefetch_threads, "prefetch": opts.prefetch_buffer}
    it = iter(trainer.make_train_dataset(config, t["source"], **overrides))
    t0 = time.perf_counter()
    batch = to_global(next(it))
    iter_first_s = time.perf_counter() - t0
    state, terms = step(state, batch, static)
    for _ in range(opts.warmup):
        state, terms = step(state, to_global(next(it)), static)
    jax.block_until_ready((state, terms))
    load_before = _loadavg()
    data_s = []
    t_start, c_start = time.perf_counter(), time.process_time()
    for _ in range(opts.repeats):
        t0 = time.perf_counter()
        batch = to_global(next(it))
        data_s.append(time.perf_counter() - t0)
        state, terms = step(state, batch, static)
    jax.block_until_ready((state, terms))
    total, total_cpu = time.perf_counter() - t_start, time.process_time() - c_start
    per_step = total / opts.repeats
    res_data = {"measurement": "train_data", **common, "data_workers": int(config.data.num_workers),
                "prefetch_buffer": int(opts.prefetch_buffer if opts.prefetch_buffer is not None
                                       else config.data.prefetch),
                "prefetch_threads": int(opts.prefetch_threads if opts.prefetch_threads is not None
                                        else config.data.read_threads),
                "pipeline_as_trainer": all(v is None for v in overrides.values()),
                "batch_bytes": batch_bytes,
                "first_batch_s": round(first_batch_s, 3), "iterator_first_batch_s": round(iter_first_s, 3),
                "mean_s": round(per_step, 4), "median_s_per_pair": round(per_step / b, 4),
                "pairs_per_s": round(b / per_step, 3), "mean_process_cpu_s": round(total_cpu / opts.repeats, 4),
                "median_data_s": round(statistics.median(data_s), 4),
                "mean_data_s": round(statistics.mean(data_s), 4),
                "pipeline_slowdown": round(per_step / res_fixed["median_s"], 3),
                "flops": flops, "flops_per_pair": None if flops is None else flops / b,
                "flops_per_s": None if flops is None else flops / per_step,
                "memory": memory_of(step), "loadavg_before": load_before, "loadavg_after": _loadavg()}
    return [res_fixed, res_data]


# ----------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------

def run(opts: BenchmarkOptions, on_result: Callable[[dict], None] | None = None) -> dict:
    """Runs the measurements of ``opts.mode``; returns {'machine', 'args', 'results'} (args: the
    options; results: one dict per measurement, each also passed to ``on_result`` as soon as it
    is measured) and writes it to ``opts.out`` when given."""
    if opts.mode not in MODES:
        raise ValueError(f"--mode must be one of {MODES}, got {opts.mode!r}")
    load_start = _loadavg()
    machine = machine_info()
    results = []

    def emit(r):
        results.append(r)
        if on_result is not None:
            on_result(r)

    if opts.mode == "refine":
        emit(bench_refine(opts))
    elif opts.mode == "roofline":
        for r in bench_roofline(opts):
            emit(r)
    else:
        config = load_config(opts.config, opts.height, opts.width, opts.batch, opts.dtype, opts.arch)
    if opts.mode == "infer":
        emit(bench_infer(opts, opts.batch, config))
    if opts.mode == "flows_only":
        emit(bench_flows_only(opts, config))
    if opts.mode == "all":
        emit(bench_infer(opts, 1, config))
        emit(bench_infer(opts, opts.batch, config))
    if opts.mode in ("train", "all"):
        if opts.train_size or opts.train_batch:
            th, tw = (int(v) for v in (opts.train_size or f"{opts.height}x{opts.width}").lower().split("x"))
            config = load_config(opts.config, th, tw, opts.train_batch or opts.batch, opts.dtype, opts.arch)
        groups = _parse_groups(opts.groups)
        if groups:
            apply_groups(config, groups)
        for r in bench_train(opts, config):
            emit(r)
    machine.update(loadavg_before=load_start, loadavg_after=_loadavg())
    out = {"machine": machine, "args": dataclasses.asdict(opts), "results": results}
    if opts.out:
        path = Path(opts.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2) + "\n")
    return out
