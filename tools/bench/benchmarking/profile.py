"""Per-op profiles (mode profile): the forwards and/or the real train step traced with
``jax.profiler``, each thunk matched to its HLO instruction's jax scope and summed per module group.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import statistics
import tempfile
from pathlib import Path

import jax

from tools.bench.benchmarking.common import (
    PROFILE_TARGETS,
    BenchmarkOptions,
    arch_summary,
    compute_fields,
    precision_of,
    train_config,
)
from tools.bench.benchmarking.inference import flows_only_setup
from tools.bench.benchmarking.training import train_setup
from tools.bench.timing import load_average, repeat


def hlo_op_names(compiled) -> dict[str, str]:
    """Instruction name -> ``op_name`` metadata (the jax scope path, e.g.
    ``jit(train_step)/transpose(jvp(CamFlow))/mask_net/conv_2/conv_general_dilated``) of every
    instruction of a compiled function's optimized HLO. XLA:CPU's profiler events carry these
    instruction names (one event per thunk: a fusion, a convolution, a dot, a copy...)."""
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
    for _ in range(max(opts.warmup, 1)):
        jax.block_until_ready(call(*args))
    load_before = load_average()
    times, _ = repeat(lambda: jax.block_until_ready(call(*args)), opts.repeats)
    calls = max(min(opts.repeats, 3), 1)
    summary = profile_summary(trace_op_times(call, args, calls), hlo_op_names(compiled), top=opts.profile_top)
    return {"measurement": "profile", "function": name, **common,
            "median_s": round(statistics.median(times), 4) if times else None, "traced_calls": calls,
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES"), **summary,
            "loadavg_before": load_before, "loadavg_after": load_average()}


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
                  **compute_fields(precision_of(opts)), "arch": opts.arch, **arch_summary(config)}
        for conf, name in ((True, "forward_with_confidence"), (False, "forward_flows_only")):
            out.append(_profiled(name, s["fns"][conf], s["fns"][conf], args, opts, common))
    if opts.profile in ("all", "train"):
        config = train_config(opts, config)
        s = train_setup(opts, config)
        t, step = s["t"], s["step"]
        held = {"state": t["state"]}  # the step donates its state: each call continues from the last

        def train_call(batch, static):
            held["state"], terms = step(held["state"], batch, static)
            return held["state"], terms

        common = {"height": config.model.height, "width": config.model.width, "batch": config.batch_size,
                  "groups": list(t["model_config"]["group_sizes"]), **compute_fields(str(config.model.precision)),
                  "arch": opts.arch, **arch_summary(config), "config": str(opts.config)}
        out.append(_profiled("train_step", train_call, step, (s["fixed"], t["static"]), opts, common))
    return out
