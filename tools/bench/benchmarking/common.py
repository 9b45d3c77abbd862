"""Shared pieces of the benchmarks: :class:`BenchmarkOptions`, the machine's description (the
host's from :mod:`tools.bench.timing`, the harness's timing core, with the JAX backend's),
compiling a jitted function and summarizing its timings, XLA's FLOP and memory counts, and the
configs they measure.
"""

from __future__ import annotations

import dataclasses
import resource
import statistics
import sys
import time

import flax
import jax
import jaxlib
import optax

from camflow_jax import configs
from camflow_jax.models import NETWORK_FIELDS, ModelConfig, basis_set
from camflow_jax.models import precision as precision_lib
from camflow_jax.training import loop
from tools.bench import accel, timing

MODES = ("infer", "train", "all", "refine", "refine_batch", "refine_trips", "roofline", "flows_only", "release",
         "profile", "export")
PROFILE_TARGETS = ("all", "forward", "train")

# Fields of ``Compiled.memory_analysis()`` reported when the installed jaxlib has them.
_MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
                  "temp_size_in_bytes", "generated_code_size_in_bytes", "peak_memory_in_bytes",
                  "host_argument_size_in_bytes", "host_output_size_in_bytes", "host_temp_size_in_bytes")


@dataclasses.dataclass
class BenchmarkOptions:
    """What :func:`run` measures; the fields are ``python -m tools.bench benchmark``'s flags (see its help),
    in its order, and are recorded as ``args`` in the report."""

    mode: str = "infer"                 # one of MODES
    height: int = 320
    width: int = 576
    batch: int = 1                      # infer; the large-batch inference and train step of 'all'
    groups: str | None = None           # e.g. "12,12" (inference default) or "12,12,12"
    dtype: str = "float32"              # float32 | bfloat16: the older spelling of precision
    precision: str | None = None        # exact | default | bfloat16 (None: from dtype: exact | bfloat16)
    per_sample_bases: bool = False      # inference: [B, N, H, W, 2] bases as CamFlow+ passes them
    config: str = "synthetic"           # training config (name or file) of the train step
    arch: str = "release"               # 'release' structure or the config's 'config' one
    train_batch: int | None = None      # train batch (default: batch)
    train_size: str | None = None       # "HxW" of the train measurements (default: height x width)
    repeats: int = 20                   # timed calls (train modes: steps)
    warmup: int = 2                     # untimed calls after compilation
    prefetch_buffer: int | None = None  # train_data: batches ahead (default: data.prefetch)
    prefetch_threads: int | None = None  # train_data: read threads (default: data.read_threads)
    render: str | None = None           # train modes: data.render, 'host' or 'device' (default: the config's)
    fast_compile: bool = False          # XLA backend optimization level 0: for tests, not timings
    release_code: str | None = None     # release: a clone of github.com/lhaippp/CamFlow-Code
    release_train: bool = False         # release: the train steps instead of the forwards
    profile: str = "all"                # profile: 'forward' (both forwards), 'train' (the step) or 'all'
    profile_top: int = 40               # profile: rows of each table in the report
    batched_refinement: str = "auto"    # refine_batch: 'auto' (the Predictor's), 'on' or 'off'
    out: str | None = None              # JSON file for all results and machine info



def _peak_rss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) if sys.platform == "darwin" else int(r) * 1024  # Linux reports KiB


def machine_info() -> dict:
    """The machine a benchmark ran on: :func:`tools.bench.timing.host_info` and the JAX
    backend's device and versions (``platform``: the device's, e.g. ``cpu`` or ``gpu``)."""
    dev = jax.devices()[0]
    return {"platform": dev.platform, "device": str(dev), "device_kind": dev.device_kind,
            "device_count": jax.device_count(), **timing.host_info(),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__,
            "optax": optax.__version__}


def compile_fn(fn, *args, fast: bool = False):
    """(compiled, lower seconds, compile seconds) of ``fn`` (a jitted function) for ``args``."""
    t0 = time.perf_counter()
    lowered = fn.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile(compiler_options={"xla_backend_optimization_level": 0} if fast else None)
    return compiled, t1 - t0, time.perf_counter() - t1


def flops_of(compiled) -> float | None:
    """Total FLOPs of a compiled computation from XLA's cost analysis
    (:func:`tools.bench.accel.cost_of`); None when the backend gives none."""
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
    """The network's structure fields (camflow_jax.models.ModelConfig), but the precision
    policy (--precision sets it)."""
    return tuple(k for k in NETWORK_FIELDS if k != "precision")


def precision_of(opts: BenchmarkOptions) -> str:
    """The precision policy measured: ``--precision``, else the one ``--dtype`` names."""
    return _policy_name(opts.precision or opts.dtype)


def _policy_name(name: str) -> str:
    """A policy name, or the policy a compute dtype name ('float32', 'bfloat16') stands for."""
    return name if name in precision_lib.POLICIES else precision_lib.from_legacy_dtype(name)


def compute_fields(precision: str) -> dict:
    """A result's ``precision`` (the policy) and ``dtype`` (its compute dtype) entries."""
    return {"precision": precision, "dtype": precision_lib.policy(precision).dtype}


def load_config(path, height: int, width: int, batch: int, precision: str | None = None, arch: str = "config"):
    """``get_config()`` of a config file, with model.height/width, batch_size (and the precision
    policy: a policy name, or 'float32' / 'bfloat16' for 'exact' / 'bfloat16') set;
    ``arch='release'`` also sets the network structure keys to the released CamFlow's."""
    config = configs.load(str(path))
    config.model.height, config.model.width, config.batch_size = int(height), int(width), int(batch)
    if precision:
        config.model.precision = _policy_name(precision)
    if arch == "release":
        for k in arch_keys():
            if k in config.model:
                config.model[k] = type(config.model[k])(getattr(ModelConfig(), k))
    elif arch != "config":
        raise ValueError(f"arch must be 'release' or 'config', got {arch!r}")
    return config


def arch_summary(config) -> dict:
    m = config.model
    return {k: (list(m[k]) if isinstance(m[k], (tuple, list)) else m[k]) for k in arch_keys() if k in m}


def parse_groups(groups) -> list[int] | None:
    if groups is None or groups == "":
        return None
    if isinstance(groups, str):
        return [int(g) for g in groups.split(",")]
    return [int(g) for g in groups]


def apply_groups(config, groups: list[int]) -> None:
    """Sets ``config.bases`` so the trainer's model has these group sizes: [homography,
    stochastic] (CamFlow) or [homography, stochastic, depth] (CamFlow+; depth = 3 x sigmas)."""
    if len(groups) not in (2, 3):
        raise ValueError(f"train mode: --groups needs 2 or 3 sizes (homography,stochastic[,depth]), got {groups}")
    config.bases.num_homography, config.bases.num_stochastic = groups[0], groups[1]
    config.bases.use_depth = len(groups) == 3
    got = loop.model_config_from(config)["group_sizes"]
    if [g for g in got] != [g for g in groups if g]:
        raise ValueError(f"train mode: --groups {groups} gives group sizes {got} "
                         f"(the depth group has 3 x {len(basis_set.depth_sigmas(config.bases.depth_sigmas, config.model.width))} bases)")


def train_config(opts: BenchmarkOptions, config):
    """The train measurements' config: ``config`` (the inference size and batch), reloaded at
    ``--train-size`` / ``--train-batch`` where given, with ``--render`` and ``--groups`` applied."""
    if opts.train_size or opts.train_batch:
        th, tw = (int(v) for v in (opts.train_size or f"{opts.height}x{opts.width}").lower().split("x"))
        config = load_config(opts.config, th, tw, opts.train_batch or opts.batch, precision_of(opts), opts.arch)
    if opts.render:
        config.data.render = opts.render
    groups = parse_groups(opts.groups)
    if groups:
        apply_groups(config, groups)
    return config
