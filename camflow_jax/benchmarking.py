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

import contextlib
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
           "load_config", "apply_groups", "arch_keys", "cpu_model", "machine_info", "compile_fn", "flops_of", "memory_of",
           "timing_summary", "bench_roofline", "inference_predictor", "bench_flows_only", "flows_only_setup",
           "train_setup", "ReleaseUnavailable", "check_release", "import_release", "build_release",
           "bench_release", "bench_release_train", "PROFILE_TARGETS", "hlo_op_names", "op_group", "trace_op_times",
           "profile_summary", "bench_profile"]

MODES = ("infer", "train", "all", "refine", "roofline", "flows_only", "release", "profile")
PROFILE_TARGETS = ("all", "forward", "train")

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
    release_code: str | None = None     # release: a clone of github.com/lhaippp/CamFlow-Code
    release_train: bool = False         # release: the train steps instead of the forwards
    profile: str = "all"                # profile: 'forward' (both forwards), 'train' (the step) or 'all'
    profile_top: int = 40               # profile: rows of each table in the report
    out: str | None = None              # JSON file for all results and machine info


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------

def _loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def _peak_rss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) if sys.platform == "darwin" else int(r) * 1024  # Linux reports KiB


def cpu_model(path: str = "/proc/cpuinfo") -> str | None:
    """The CPU's model name as the kernel reports it (the first ``model name`` line of
    ``/proc/cpuinfo``), or None where there is none (another OS, an unreadable file). Timings
    on two machines of one core count but different CPUs do not compare; the name says which."""
    try:
        with open(path) as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name":
                    return value.strip() or None
    except OSError:
        return None
    return None


def machine_info() -> dict:
    import flax
    import jax
    import jaxlib
    import optax

    dev = jax.devices()[0]
    return {"platform": dev.platform, "device": str(dev), "device_kind": dev.device_kind,
            "device_count": jax.device_count(), "cpu_count": os.cpu_count(),
            "processor": platform.processor() or platform.machine(), "cpu_model": cpu_model(),
            "python": platform.python_version(),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__,
            "optax": optax.__version__, "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
            "xla_flags": os.environ.get("XLA_FLAGS"),
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


def _train_config(opts: BenchmarkOptions, config):
    """The train measurements' config: ``config`` (the inference size and batch), reloaded at
    ``--train-size`` / ``--train-batch`` where given, with ``--groups`` applied."""
    if opts.train_size or opts.train_batch:
        th, tw = (int(v) for v in (opts.train_size or f"{opts.height}x{opts.width}").lower().split("x"))
        config = load_config(opts.config, th, tw, opts.train_batch or opts.batch, opts.dtype, opts.arch)
    groups = _parse_groups(opts.groups)
    if groups:
        apply_groups(config, groups)
    return config


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
# Per-op profile
# ----------------------------------------------------------------------------------------------

def hlo_op_names(compiled) -> dict[str, str]:
    """Instruction name -> ``op_name`` metadata (the jax scope path, e.g.
    ``jit(train_step)/transpose(jvp(CamFlow))/mask_net/conv_2/conv_general_dilated``) of every
    instruction of a compiled function's optimized HLO. XLA:CPU's profiler events carry these
    instruction names (one event per thunk: a fusion, a convolution, a dot, a copy...)."""
    import re

    pattern = re.compile(r'^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*?metadata=\{[^}]*?op_name="([^"]*)"')
    names = {}
    for line in compiled.as_text().splitlines():
        m = pattern.match(line)
        if m:
            names.setdefault(m.group(1), m.group(2))
    return names


def op_group(op_name: str, depth: int = 4) -> str:
    """``'F'``/``'B'`` (forward, or backward: the path passes through a ``transpose(...)``) and the
    first ``depth`` module names of an ``op_name`` path, transformation wrappers (``jit(f)`` at the
    top, ``jvp(...)``, ``transpose(...)``, ``vmap(...)``) removed and digits as ``#``:
    ``jit(train_step)/transpose(jvp(CamFlow))/met/encoder_level_1/stage_0_block_2/attn/...`` ->
    ``'B CamFlow/met/encoder_level_#/stage_#_block_#'``."""
    import re

    parts = op_name.split("/")
    backward = "transpose(" in op_name
    if parts and parts[0].startswith("jit("):
        parts = parts[1:]
    clean = []
    for part in parts:
        while True:
            m = re.match(r"^[A-Za-z_]\w*\((.*)$", part)
            if not m:
                break
            part = m.group(1)
        part = part.rstrip(")")
        if part:
            clean.append(re.sub(r"\d+", "#", part))
    return ("B " if backward else "F ") + "/".join(clean[:max(int(depth), 1)])


def trace_op_times(fn, args, calls: int = 3, logdir: str | None = None) -> dict[str, float]:
    """Milliseconds per call of every event name in a ``jax.profiler`` trace of ``calls`` calls of
    ``fn(*args)`` (each waited for), summed over threads. For a compiled XLA:CPU function the
    names are HLO instruction names (:func:`hlo_op_names` maps them to jax scopes). Caveats: the
    duration is the dispatching thread's, so work a library runs on its own threads (Eigen's
    convolutions) is undercounted, and concurrent ops on both cores are counted in full."""
    import gzip
    import tempfile

    import jax

    def traced(d):
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(fn(*args))
        files = sorted(Path(d).rglob("perfetto_trace.json.gz")) or sorted(Path(d).rglob("*.trace.json.gz"))
        if not files:
            raise RuntimeError(f"jax.profiler wrote no trace under {d}")
        with gzip.open(files[-1], "rt") as f:
            events = json.load(f)
        return events["traceEvents"] if isinstance(events, dict) else events

    if logdir is None:
        with tempfile.TemporaryDirectory(prefix="camflow_profile_") as d:
            events = traced(d)
    else:
        events = traced(logdir)
    out: dict[str, float] = {}
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            out[e.get("name", "")] = out.get(e.get("name", ""), 0.0) + float(e["dur"]) / 1000.0 / calls
    return out


def profile_summary(times: dict[str, float], names: dict[str, str], depth: int = 4, top: int = 40) -> dict:
    """Events of :func:`trace_op_times` that are instructions of ``names`` (:func:`hlo_op_names`),
    summed per :func:`op_group` and listed per instruction, largest first (``top`` rows each):
    ``{'attributed_ms', 'groups': [[group, ms]], 'instructions': [[name, ms, op_name]]}``."""
    groups: dict[str, float] = {}
    rows = []
    for name, ms in times.items():
        op = names.get(name)
        if op is None:
            continue
        key = op_group(op, depth)
        groups[key] = groups.get(key, 0.0) + ms
        rows.append([name, round(ms, 3), op])
    rows.sort(key=lambda r: -r[1])
    ordered = sorted(groups.items(), key=lambda kv: -kv[1])
    return {"attributed_ms": round(sum(groups.values()), 2),
            "groups": [[k, round(v, 3)] for k, v in ordered[:top]],
            "instructions": rows[:top]}


def _profiled(name: str, call, compiled, args, opts: BenchmarkOptions, common: dict) -> dict:
    """Times ``call(*args)`` (``--repeats`` after ``--warmup``), then traces up to 3 calls and
    attributes them to ``compiled``'s instructions."""
    import jax

    for _ in range(max(opts.warmup, 1)):
        jax.block_until_ready(call(*args))
    load_before = _loadavg()
    times = []
    for _ in range(opts.repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(call(*args))
        times.append(time.perf_counter() - t0)
    calls = max(min(opts.repeats, 3), 1)
    summary = profile_summary(trace_op_times(call, args, calls), hlo_op_names(compiled), top=opts.profile_top)
    return {"measurement": "profile", "function": name, **common,
            "median_s": round(statistics.median(times), 4) if times else None, "traced_calls": calls,
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES"), **summary,
            "loadavg_before": load_before, "loadavg_after": _loadavg()}


def bench_profile(opts: BenchmarkOptions, config) -> list[dict]:
    """Per-op profiles (``--profile``): 'forward' = mode flows_only's two compiled forwards (with
    confidence and flows-only), 'train' = the real train step of mode train on its fixed batch
    (``--train-batch``/``--train-size`` as there), 'all' = both. Each is timed (``--repeats``
    calls after ``--warmup``), then up to 3 calls are traced; the report has the milliseconds
    per call of each module group (:func:`op_group`, forward and backward apart) and of the
    largest instructions."""
    if opts.profile not in PROFILE_TARGETS:
        raise ValueError(f"--profile must be one of {PROFILE_TARGETS}, got {opts.profile!r}")
    out = []
    if opts.profile in ("all", "forward"):
        s = flows_only_setup(opts, config)
        args = (s["variables"], s["g1"], s["g2"], s["bases"])
        common = {"height": opts.height, "width": opts.width, "batch": opts.batch, "groups": s["groups"],
                  "dtype": opts.dtype, "arch": opts.arch, **_arch(config)}
        for conf, name in ((True, "forward_with_confidence"), (False, "forward_flows_only")):
            out.append(_profiled(name, s["fns"][conf], s["fns"][conf], args, opts, common))
    if opts.profile in ("all", "train"):
        config = _train_config(opts, config)
        s = train_setup(opts, config)
        t, step = s["t"], s["step"]
        held = {"state": t["state"]}  # the step donates its state: each call continues from the last

        def train_call(batch, static):
            held["state"], terms = step(held["state"], batch, static)
            return held["state"], terms

        common = {"height": config.model.height, "width": config.model.width, "batch": config.batch_size,
                  "groups": list(t["model_config"]["group_sizes"]), "dtype": str(config.model.dtype),
                  "arch": opts.arch, **_arch(config), "config": str(opts.config)}
        out.append(_profiled("train_step", train_call, step, (s["fixed"], t["static"]), opts, common))
    return out


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
    jitted = ("_forward", "_basis_pyramid", "_refine_images", "_refine_direction")

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
        # the same ratio per interleaved round, then its median: less moved by the machine's
        # drift over a run than the ratio of the two medians
        "paired_added_fraction_of_net": round(statistics.median(
            np.subtract(times["refined"], times["net_flows_only"]) / np.asarray(times["net_flows_only"])), 3),
        "net_s": [round(t, 4) for t in times["net_flows_only"]],
        "net_with_confidence_s": [round(t, 4) for t in times["net_with_confidence"]],
        "refined_s": [round(t, 4) for t in times["refined"]],
        "refine_info": {k: info.get(k) for k in ("iterations", "start", "improved", "working_size_hw", "detail_size_hw")},
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
    from camflow_jax.data import pipeline

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
    res_data = {"measurement": "train_data", **common,
                "data_workers": pipeline.resolve_num_workers(config.data.num_workers),
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
# Against the authors' released PyTorch model (mode release)
# ----------------------------------------------------------------------------------------------

class ReleaseUnavailable(RuntimeError):
    """Mode release cannot run: no ``--release-code``, a path that does not hold the authors'
    release, or no PyTorch. ``tools/benchmark.py`` prints the message on one line and exits 2."""


#: Files of github.com/lhaippp/CamFlow-Code that mode release imports or reads.
RELEASE_FILES = ("model/__init__.py", "model/net.py", "model/swin_multi.py", "model/utils.py",
                 "model/flow_utils.py", "experiments/params.json")
#: ... and those the train comparison (``--release-train``) also needs.
RELEASE_LOSS_FILES = ("loss/__init__.py", "loss/losses.py")
#: Train comparison: skipped with a message where less memory than this is available.
RELEASE_TRAIN_MIN_AVAILABLE = 12 * 2**30

RELEASE_FORWARD_COMPUTES = (
    "CamFlow.forward of the release's model/net.py in eval mode under torch.no_grad(), batch 1, "
    "imgs_gray_full = imgs_gray_patch (both at --height x --width): the shallow feature net "
    "(fea_extra) on both images; the SwinTransformer h_net twice, once per direction (each: its "
    "3-level conv feature pyramid of both images, a Swin encoder per level with the second image "
    "warped by the flow so far, the 12 + 12 class-attention basis tokens, heads -> 24 "
    "coefficients); flows = bases x coefficients; both features warped by the flows; the mask net "
    "(FlowMaskEstimator) once per direction; both masks warped; both images warped and their "
    "features recomputed (fil_features); the flows (bilinear) and masks (nearest) resized to "
    "imgs_gray_full's size (the same size here), the fused mask (computed, not returned), the flows "
    "permuted to [B, H, W, 2]. It returns flow_f, flow_b [1, H, W, 2], mask_f, mask_b [1, 1, H, W], "
    "the warped images, the inputs passed through and fil_features.")
OURS_FULL_COMPUTES = (
    "camflow_jax's network (mode flows_only's compiled model.apply(..., confidence=True)), batch 1: "
    "shallow features of both images, the motion estimation transformer for both directions in one "
    "batch, flows = bases x coefficients, the second image's features warped by each direction's "
    "flow and the mask net once per direction; it returns flow_f, flow_b [1, H, W, 2], the 24 "
    "coefficients per direction, the log-variances logvar_f, logvar_b [1, H, W, 1], the features and "
    "a zero translational flow (no depth group). It does not warp the images, recompute features of "
    "warped images, warp the masks or fuse them, as the release's forward does.")
OURS_FLOWS_COMPUTES = (
    "the same compiled network with confidence=False (the flows-only path the Predictor runs by "
    "default): everything above but the feature warp and the mask net.")


def check_release(path, train: bool = False) -> Path:
    """The release's root, after checking that it holds :data:`RELEASE_FILES` (and the loss files
    for ``train``) with the CamFlow network, and that PyTorch imports; raises ReleaseUnavailable
    otherwise. The path is checked first, so no torch import is paid for a wrong path."""
    if not path:
        raise ReleaseUnavailable("--mode release needs --release-code PATH, a clone of "
                                 "https://github.com/lhaippp/CamFlow-Code")
    root = Path(path).expanduser()
    need = RELEASE_FILES + (RELEASE_LOSS_FILES if train else ())
    missing = [f for f in need if not (root / f).is_file()]
    if missing:
        raise ReleaseUnavailable(f"--release-code {path} does not hold the released CamFlow code (missing "
                                 f"{', '.join(missing)}): clone https://github.com/lhaippp/CamFlow-Code there")
    net_py = (root / "model" / "net.py").read_text(encoding="utf-8", errors="replace")
    if "class CamFlow(" not in net_py or "def fetch_net(" not in net_py:
        raise ReleaseUnavailable(f"--release-code {path}: model/net.py defines no CamFlow network "
                                 "(class CamFlow, fetch_net); it is not the lhaippp/CamFlow-Code release")
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise ReleaseUnavailable(f"--mode release needs PyTorch to run the released model ({e}): "
                                 "pip install torch") from None
    return root.resolve()


def _not_installed(what: str):
    def call(*args, **kwargs):
        raise NotImplementedError(f"{what}: a stand-in of tools/benchmark.py --mode release for a package "
                                  "that is not installed; the benchmarked paths never call it")
    return call


def _release_shims(root: Path) -> list[str]:
    """Stand-ins, in ``sys.modules``, for what the release imports but does not need on the
    benchmarked paths, where the package is not installed: timm (trunc_normal_ = torch's,
    to_2tuple; DropPath only with drop_path > 0, which the release's params.json does not set),
    torchvision.utils.save_image / imageio / kornia.geometry (the training-time image dumps, the
    unused training_warp and evaluation helpers), einops.rearrange (the unused mask_predictor),
    mlflow (its loss logging; active_run() is None) and model/DLT.py (DLT_solve of the unused
    BasesHomo Net; the file is not in the repository). Returns the names shimmed."""
    import importlib.util
    import types

    import torch

    def installed(name):
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    def to_2tuple(x):
        return tuple(x) if isinstance(x, (list, tuple)) else (x, x)

    class DropPath(torch.nn.Identity):
        def __init__(self, drop_prob=0.0, *args, **kwargs):
            if drop_prob > 0:
                raise NotImplementedError("DropPath with drop_prob > 0: a stand-in of tools/benchmark.py "
                                          "--mode release (timm is not installed)")
            super().__init__()

    packages = {
        "timm": {"models": {"layers": dict(trunc_normal_=torch.nn.init.trunc_normal_, to_2tuple=to_2tuple,
                                           DropPath=DropPath)}},
        "torchvision": {"utils": dict(save_image=_not_installed("torchvision.utils.save_image"))},
        "kornia": {"geometry": dict(warp_perspective=_not_installed("kornia.geometry.warp_perspective"),
                                    linalg=dict(transform_points=_not_installed("kornia transform_points")))},
        "einops": dict(rearrange=_not_installed("einops.rearrange")),
        "imageio": dict(get_writer=_not_installed("imageio.get_writer"), mimsave=_not_installed("imageio.mimsave")),
        "mlflow": dict(active_run=lambda: None, log_metric=_not_installed("mlflow.log_metric"),
                       set_experiment=_not_installed("mlflow.set_experiment"),
                       start_run=_not_installed("mlflow.start_run")),
    }

    def build(name, spec):
        mod = types.ModuleType(name, f"stand-in of tools/benchmark.py --mode release ({name} is not installed)")
        sys.modules[name] = mod
        for k, v in spec.items():
            setattr(mod, k, build(f"{name}.{k}", v) if isinstance(v, dict) else v)
        return mod

    shimmed = []
    for name, spec in packages.items():
        if name not in sys.modules and not installed(name):
            build(name, spec)
            shimmed.append(name)
    if not (root / "model" / "DLT.py").is_file() and "model.DLT" not in sys.modules:
        mod = types.ModuleType("model.DLT", "stand-in: model/DLT.py is not in the release")
        mod.DLT_solve = _not_installed("model.DLT.DLT_solve")
        sys.modules["model.DLT"] = mod
        shimmed.append("model.DLT")
    return shimmed


def import_release(root: Path, train: bool = False) -> dict:
    """Imports the release's ``model.net`` (and ``loss.losses`` for ``train``) from ``root``
    after :func:`_release_shims`; its packages are the top-level names ``model`` and ``loss``,
    which must not be taken by other modules. Returns {'net', 'losses', 'shims'}."""
    import importlib

    for name in ("model", "loss"):
        mod = sys.modules.get(name)
        if mod is not None and not str(getattr(mod, "__file__", "") or "").startswith(str(root)):
            raise ReleaseUnavailable(f"a module named {name!r} other than the release's is already imported "
                                     f"({getattr(mod, '__file__', mod)}); run mode release in a fresh process")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    shims = _release_shims(root)
    with contextlib.redirect_stdout(sys.stderr):  # the release prints; stdout carries JSON lines
        net = importlib.import_module("model.net")
        losses = importlib.import_module("loss.losses") if train else None
    return {"net": net, "losses": losses, "shims": shims}


def build_release(root: Path, net, height: int, width: int, workdir: Path):
    """The release's network as ``fetch_net`` builds it from experiments/params.json (CamFlow, 24
    bases, embed 24, depths (2, 4, 6), ...), with random weights (its own init) and random bases
    saved where its constructor loads them; returns (model, params, overrides). Overrides of
    params.json: crop_size = [height, width]; basis_dir = ``workdir`` (the constructor otherwise
    generates its bases with ``.cuda()``); sup_weight = 1 where absent (the net_stg 4 loss reads
    it, params.json does not set it)."""
    import types

    import numpy as np
    import torch

    params = json.loads((root / "experiments" / "params.json").read_text())
    overrides = {"crop_size": [int(height), int(width)], "basis_dir": str(workdir) + os.sep}
    if "sup_weight" not in params:
        overrides["sup_weight"] = 1.0
    params.update(overrides)
    params = types.SimpleNamespace(**params)
    n = int(params.num_basis)
    rng = np.random.default_rng(0)
    torch.save(torch.from_numpy(rng.uniform(-1, 1, (1, n, 2 * height * width)).astype(np.float32)),
               workdir / f"basis_{n}.pt")
    torch.manual_seed(0)
    with contextlib.redirect_stdout(sys.stderr):
        model = net.fetch_net(params)
    overrides["basis_dir"] = "a temporary directory holding random bases [1, 24, 2*H*W]"
    return model, params, overrides


def _ratio_summary(ours, theirs) -> dict:
    per_round = [a / b for a, b in zip(ours, theirs)]
    return {"of_medians": round(statistics.median(ours) / statistics.median(theirs), 4),
            "per_round": [round(r, 4) for r in per_round], "median": round(statistics.median(per_round), 4),
            "min": round(min(per_round), 4), "max": round(max(per_round), 4)}


def _timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def _torch_info(torch) -> dict:
    return {"torch": torch.__version__, "torch_num_threads": torch.get_num_threads(),
            "torch_num_interop_threads": torch.get_num_interop_threads()}


def bench_release(opts: BenchmarkOptions, config, release: dict) -> dict:
    """The release's forward (torch, no_grad, eval) against our full forward and our flows-only
    forward at batch 1, interleaved round by round (release, full, flows-only, release, ...)."""
    import tempfile

    import jax
    import numpy as np
    import torch

    s = flows_only_setup(opts, config, batch=1)
    fns, variables, g1, g2, bases = (s[k] for k in ("fns", "variables", "g1", "g2", "bases"))
    h, w = opts.height, opts.width
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        rel, params, overrides = build_release(release["root"], release["net"], h, w, Path(tmp))
        build_s = time.perf_counter() - t0
    rel.eval()
    gray = torch.from_numpy(np.concatenate([np.asarray(g1), np.asarray(g2)], axis=-1)).permute(0, 3, 1, 2).contiguous()
    batch = {"imgs_gray_patch": gray, "imgs_gray_full": gray.clone(),
             "imgs_rgb_full": gray.repeat(1, 3, 1, 1).contiguous()}

    def release_forward():
        with torch.no_grad():
            return rel(batch)

    calls = {"release": release_forward,
             "ours_full": lambda: jax.block_until_ready(fns[True](variables, g1, g2, bases)),
             "ours_flows_only": lambda: jax.block_until_ready(fns[False](variables, g1, g2, bases))}
    first = {}
    for name, fn in calls.items():
        first[name] = round(_timed(fn)[0], 3)
    out = release_forward()
    shapes = {k: list(v.shape) for k, v in out.items() if hasattr(v, "shape")}
    finite = bool(all(torch.isfinite(out[k]).all() for k in ("flow_f", "flow_b", "mask_f", "mask_b")))
    for _ in range(opts.warmup):
        for fn in calls.values():
            fn()
    load_before = _loadavg()
    times = {k: [] for k in calls}
    cpu = {k: [] for k in calls}
    for _ in range(opts.repeats):  # interleaved: load changes hit all three alike, never two at once
        for name, fn in calls.items():
            t, c = _timed(fn)
            times[name].append(t)
            cpu[name].append(c)
    load_after = _loadavg()
    full_r, flows_r = (_ratio_summary(times[k], times["release"]) for k in ("ours_full", "ours_flows_only"))
    return {
        "measurement": "release", "height": h, "width": w, "batch": 1, "groups": s["groups"],
        "dtype": opts.dtype, "arch": opts.arch, **_arch(config), "repeats": opts.repeats, "warmup": opts.warmup,
        "order_per_round": list(calls), **_torch_info(torch),
        "release": {"code": str(release["root"]), "net_type": params.net_type, "num_basis": int(params.num_basis),
                    "params_json_overrides": overrides, "shims": release["shims"],
                    "params": int(sum(p.numel() for p in rel.parameters())), "build_s": round(build_s, 3),
                    "output_shapes": shapes, "flows_and_masks_finite": finite,
                    "computes": RELEASE_FORWARD_COMPUTES},
        "ours": {"params": int(sum(x.size for x in jax.tree.leaves(variables["params"]))),
                 "compile_s": {"full": round(s["compile_s"][True], 3), "flows_only": round(s["compile_s"][False], 3)},
                 "full_computes": OURS_FULL_COMPUTES, "flows_only_computes": OURS_FLOWS_COMPUTES,
                 "flops": {"full": flops_of(fns[True]), "flows_only": flops_of(fns[False])}},
        "first_call_s": first,
        "release_median_s": round(statistics.median(times["release"]), 4),
        "ours_full_median_s": round(statistics.median(times["ours_full"]), 4),
        "ours_flows_only_median_s": round(statistics.median(times["ours_flows_only"]), 4),
        "ratio_full": full_r, "ratio_flows_only": flows_r,
        "targets": {"full_at_most": 0.3, "flows_only_at_most": 0.2,
                    "full_met": full_r["median"] <= 0.3, "flows_only_met": flows_r["median"] <= 0.2},
        **{f"{k}_timing": timing_summary(times[k], cpu[k], 1, None) for k in calls},
        "loadavg_before": load_before, "loadavg_after": load_after,
    }


RELEASE_STEP_CONTAINS = (
    "torch, batch {b}: CamFlow.forward in train mode with step=1 (step % 2000 == 0 would write its "
    "debug images), the whole forward as in inference but at the network size; loss/losses.py "
    "compute_losses at params.json's net_stg 4: the Laplace NLL of both flows against "
    "flow_gt_patch (random labels here) with the masks as log-variances, plus the "
    "feature-consistency NLL of both directions (features against warped features), the latter "
    "scaled by the (not gradient-stopped) supervised/unsupervised ratio x unsup_weight 100, "
    "sup_weight 1 added (params.json lacks it); backward; one torch.optim.Adam step (lr = "
    "params.json's learning_rate) over the parameters left trainable by _freeze_feature_extractor "
    "(the shallow feature net is frozen). The repository holds no training script: Adam is a "
    "stand-in for its optimizer. The step excludes data loading, as ours does.")
OURS_STEP_CONTAINS = (
    "camflow_jax's jitted train step exactly as the trainer builds it from --config ({config}) with "
    "--groups 12,12 (CamFlow, 24 static bases, no depth bases) and the released width, on one "
    "fixed device-resident batch of {b}: the uint8 RGB pair's preprocessing to gray, the forward in "
    "train mode (BatchNorm statistics updated), the loss of the config (weights motion : feature : "
    "smooth = {weights}; with configs/synthetic.py the motion NLL of both flows only, so our loss "
    "lacks the release's feature-consistency term and is cheaper by that much), backward, Adam "
    "with the epoch schedule (frozen: {frozen}), and the gradient and parameter norms.")


def bench_release_train(opts: BenchmarkOptions, release: dict) -> dict:
    """The release's train step in torch (forward, its net_stg 4 loss, backward, Adam) against our
    real train step (mode train's, CamFlow 24 bases at the released width), interleaved; skipped
    with a message where less than 12 GiB are available."""
    import tempfile

    import jax
    import numpy as np
    import torch

    from camflow_jax import train_steps

    th, tw = (int(v) for v in (opts.train_size or f"{opts.height}x{opts.width}").lower().split("x"))
    b = opts.train_batch or 2
    base = {"measurement": "release_train", "height": th, "width": tw, "batch": b}
    available = _mem_available_bytes()
    if available is not None and available < RELEASE_TRAIN_MIN_AVAILABLE:
        return {**base, "skipped": f"{available / 2**30:.1f} GiB available, the train comparison needs at least "
                                   f"{RELEASE_TRAIN_MIN_AVAILABLE / 2**30:.0f} GiB (our 320x576 batch-2 step alone "
                                   "takes ~8 GB of XLA scratch)"}
    config = load_config(opts.config, th, tw, b, opts.dtype, opts.arch)
    apply_groups(config, [12, 12])
    ours = train_setup(opts, config)
    state, fixed, static, step = ours["t"]["state"], ours["fixed"], ours["t"]["static"], ours["step"]

    with tempfile.TemporaryDirectory() as tmp:
        rel, params, overrides = build_release(release["root"], release["net"], th, tw, Path(tmp))
    rel.train()
    trainable = [p for p in rel.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable, lr=float(params.learning_rate))
    rng = np.random.default_rng(0)
    gray = torch.from_numpy(rng.standard_normal((b, 2, th, tw)).astype(np.float32))
    data = {"imgs_gray_patch": gray, "imgs_gray_full": gray.clone(), "imgs_rgb_full": gray.repeat(1, 3, 1, 1),
            "flow_gt_patch": torch.from_numpy(rng.normal(0, 2, (b, 4, th, tw)).astype(np.float32))}
    compute_losses = release["losses"].compute_losses
    losses_seen = {"release": [], "ours": []}

    def release_step():
        opt.zero_grad(set_to_none=True)
        with contextlib.redirect_stdout(sys.stderr):  # its NLL prints on non-finite elements
            loss = compute_losses(data, rel(data, step=1), params)["total"]
        loss.backward()
        opt.step()
        losses_seen["release"].append(float(loss.detach()))

    def ours_step():
        nonlocal state
        state, terms = step(state, fixed, static)
        jax.block_until_ready((state, terms))
        losses_seen["ours"].append(float(terms["total"]))

    calls = {"release": release_step, "ours": ours_step}
    first = {name: round(_timed(fn)[0], 3) for name, fn in calls.items()}
    for _ in range(opts.warmup):
        for fn in calls.values():
            fn()
    load_before = _loadavg()
    times, cpu = {k: [] for k in calls}, {k: [] for k in calls}
    for _ in range(opts.repeats):
        for name, fn in calls.items():
            t, c = _timed(fn)
            times[name].append(t)
            cpu[name].append(c)
    load_after = _loadavg()
    ratio = _ratio_summary(times["ours"], times["release"])
    weights = ":".join(f"{float(config.loss[k]):g}" for k in ("motion", "feature", "smooth"))
    return {
        **base, "groups": [12, 12], "dtype": opts.dtype, "arch": opts.arch, **_arch(config),
        "config": str(opts.config), "repeats": opts.repeats, "warmup": opts.warmup,
        "order_per_round": list(calls), **_torch_info(torch),
        "release": {"code": str(release["root"]), "params_json_overrides": overrides, "shims": release["shims"],
                    "params": int(sum(p.numel() for p in rel.parameters())),
                    "trainable_params": int(sum(p.numel() for p in trainable)),
                    "step_contains": RELEASE_STEP_CONTAINS.format(b=b)},
        "ours": {"params": ours["t"]["params"], "compile_s": round(ours["lower_s"] + ours["compile_s"], 3),
                 "flops": ours["flops"], "memory": ours["memory"],
                 "step_contains": OURS_STEP_CONTAINS.format(
                     config=opts.config, b=b, weights=weights,
                     frozen=list(train_steps.frozen_prefixes(config)) or "nothing")},
        "losses_finite": {k: bool(np.all(np.isfinite(v))) for k, v in losses_seen.items()},
        "first_call_s": first,
        "release_median_s": round(statistics.median(times["release"]), 4),
        "ours_median_s": round(statistics.median(times["ours"]), 4),
        "ratio": ratio, "target": {"at_most": 0.6, "met": ratio["median"] <= 0.6},
        **{f"{k}_timing": timing_summary(times[k], cpu[k], b, None) for k in calls},
        "loadavg_before": load_before, "loadavg_after": load_after,
    }


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
    release = None
    if opts.mode == "release":  # before jax starts: a missing torch or release fails at once
        if opts.arch != "release" or (_parse_groups(opts.groups) or [12, 12]) != [12, 12]:
            raise ValueError("--mode release compares the released structure: --arch release, --groups 12,12")
        root = check_release(opts.release_code, train=opts.release_train)
        release = {"root": root, **import_release(root, train=opts.release_train)}
    machine = machine_info()
    results = []

    def emit(r):
        results.append(r)
        if on_result is not None:
            on_result(r)

    if opts.mode == "refine":
        emit(bench_refine(opts))
    elif opts.mode == "profile":
        config = load_config(opts.config, opts.height, opts.width, opts.batch, opts.dtype, opts.arch)
        for r in bench_profile(opts, config):
            emit(r)
    elif opts.mode == "roofline":
        for r in bench_roofline(opts):
            emit(r)
    else:
        config = load_config(opts.config, opts.height, opts.width, opts.batch, opts.dtype, opts.arch)
    if opts.mode == "infer":
        emit(bench_infer(opts, opts.batch, config))
    if opts.mode == "flows_only":
        emit(bench_flows_only(opts, config))
    if opts.mode == "release":
        emit(bench_release_train(opts, release) if opts.release_train else bench_release(opts, config, release))
    if opts.mode == "all":
        emit(bench_infer(opts, 1, config))
        emit(bench_infer(opts, opts.batch, config))
    if opts.mode in ("train", "all"):
        for r in bench_train(opts, _train_config(opts, config)):
            emit(r)
    machine.update(loadavg_before=load_start, loadavg_after=_loadavg())
    out = {"machine": machine, "args": dataclasses.asdict(opts), "results": results}
    if opts.out:
        path = Path(opts.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2) + "\n")
    return out
