"""Train-step benchmarks (mode train): the real jitted, sharded step of ``train_and_evaluate``,
built the same way, timed on a fixed batch, with its memory.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from camflow_jax import models
from camflow_jax.data import datasets, pipeline
from camflow_jax.models import basis_set
from camflow_jax.training import loop, state, steps
from camflow_jax.training.feed import make_train_dataset, train_feed
from tools.bench.benchmarking.common import (
    BenchmarkOptions,
    arch_summary,
    compile_fn,
    compute_fields,
    flops_of,
    memory_of,
    timing_summary,
)
from tools.bench.timing import load_average, repeat, timed


def build_train(config):
    """Everything ``train_and_evaluate`` builds before its loop (through the trainer's own setup
    functions): jitted step, state, static bases, the training source."""
    loop.validate_config(config)
    model_config = loop.model_config_from(config)
    model = models.build_model(model_config)
    source = datasets.training_source(config.data, config.model.height, config.model.width, "train")
    steps_per_epoch = config.optim.steps_per_epoch or max(len(source) // config.batch_size, 1)
    mesh = steps.make_mesh()
    repl, data_sharding = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    tx = steps.make_optimizer(config, steps_per_epoch)
    tstate = state.init_train_state(config, model, tx, jax.random.key(config.seed), repl)
    static = jax.device_put(jnp.asarray(basis_set.static_bases(model_config)), repl)
    p_train, _ = steps.jit_steps(model, tx, config, repl, data_sharding)
    return {"model_config": model_config, "params": models.count_params(tstate["params"]), "state": tstate,
            "static": static, "p_train": p_train, "source": source, "mesh": mesh,
            "to_global": lambda batch: steps.host_to_global(batch, data_sharding)}


def mem_available_bytes() -> int | None:
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
    t = build_train(config)
    t0 = time.perf_counter()
    host_batch = next(iter(make_train_dataset(config, t["source"], read_threads=0, prefetch=1)))
    first_batch_s = time.perf_counter() - t0
    fixed = t["to_global"](host_batch)  # one real batch, resident on the device(s)
    jax.block_until_ready(fixed)
    batch_bytes = int(sum(np.asarray(v).nbytes for v in host_batch.values()))
    step, lower_s, compile_s = compile_fn(t["p_train"], t["state"], fixed, t["static"], fast=opts.fast_compile)
    flops, memory = flops_of(step), memory_of(step)
    need = sum(memory.get(k, 0) for k in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes"))
    available = mem_available_bytes()
    if jax.devices()[0].platform == "cpu" and available and need > 0.85 * available:
        raise MemoryError(f"the train step needs {need / 2**30:.1f} GiB (XLA memory analysis) but only "
                          f"{available / 2**30:.1f} GiB are available: use a smaller --train-batch or --train-size")
    return {"t": t, "host_batch": host_batch, "first_batch_s": first_batch_s, "fixed": fixed,
            "batch_bytes": batch_bytes, "step": step, "lower_s": lower_s, "compile_s": compile_s,
            "flops": flops, "memory": memory}


def bench_train(opts: BenchmarkOptions, config) -> list[dict]:
    """[train (fixed batch), train_data (the trainer's feed: grain pipeline or device rendering,
    as ``data.render`` says)] measurements of one compiled step."""
    s = train_setup(opts, config)
    t, step, fixed = s["t"], s["step"], s["fixed"]
    first_batch_s, batch_bytes, lower_s, compile_s = s["first_batch_s"], s["batch_bytes"], s["lower_s"], s["compile_s"]
    flops, memory = s["flops"], s["memory"]
    static = t["static"]
    b = config.batch_size
    tstate = t["state"]
    common = {"device": str(jax.devices()[0]), "platform": jax.devices()[0].platform,
              "cpu_count": os.cpu_count(), "height": config.model.height, "width": config.model.width,
              "batch": b, "groups": list(t["model_config"]["group_sizes"]),
              **compute_fields(str(config.model.precision)), "per_sample_depth_bases": bool(config.bases.use_depth),
              "arch": opts.arch, **arch_summary(config), "params": t["params"], "config": str(opts.config), "repeats": opts.repeats, "warmup": opts.warmup,
              "lower_s": round(lower_s, 3), "compile_s": round(lower_s + compile_s, 3)}

    # (i) one fixed device-resident batch: no input pipeline.
    terms = None

    def one_step():
        nonlocal tstate, terms
        tstate, terms = step(tstate, fixed, static)
        jax.block_until_ready((tstate, terms))

    first_s = timed(one_step)[0]
    for _ in range(opts.warmup):
        one_step()
    load_before = load_average()
    times, cpu = repeat(one_step, opts.repeats)
    loss = float(jax.device_get(terms["total"]))
    res_fixed = {"measurement": "train", **common, "first_call_s": round(first_s, 3),
                 **timing_summary(times, cpu, b, flops), "loss_finite": bool(np.isfinite(loss)),
                 "memory": memory, "loadavg_before": load_before, "loadavg_after": load_average()}

    # (ii) fed as the trainer's loop feeds it (training/feed.py, data.render): with 'host', the
    # grain pipeline: next batch, transfer, step, without blocking, so host-side data work
    # overlaps the device work of the previous step (--prefetch-threads / --prefetch-buffer
    # replace the config's read options); with 'device', the batch rendered on the device(s)
    # (dispatched without blocking; the first call compiles the renderer).
    overrides = {"read_threads": opts.prefetch_threads, "prefetch": opts.prefetch_buffer}
    feed = train_feed(config, t["source"], t["mesh"], **overrides)
    it = iter(feed.dataset)
    t0 = time.perf_counter()
    batch = feed.put(next(it))
    jax.block_until_ready(batch)
    iter_first_s = time.perf_counter() - t0
    tstate, terms = step(tstate, batch, static)
    for _ in range(opts.warmup):
        tstate, terms = step(tstate, feed.put(next(it)), static)
    jax.block_until_ready((tstate, terms))
    load_before = load_average()
    data_s = []
    t_start, c_start = time.perf_counter(), time.process_time()
    for _ in range(opts.repeats):
        t0 = time.perf_counter()
        batch = feed.put(next(it))
        data_s.append(time.perf_counter() - t0)
        tstate, terms = step(tstate, batch, static)
    jax.block_until_ready((tstate, terms))
    total, total_cpu = time.perf_counter() - t_start, time.process_time() - c_start
    per_step = total / opts.repeats
    res_data = {"measurement": "train_data", **common, "render": feed.mode, "data_workers": pipeline.resolve_num_workers(config.data.num_workers),
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
                "memory": memory_of(step), "loadavg_before": load_before, "loadavg_after": load_average()}
    return [res_fixed, res_data]
