"""The benchmark's entry point: :func:`run` runs the modes :class:`BenchmarkOptions` asks for and
hands each result to a callback (``python -m tools.bench benchmark`` prints them as JSON lines).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from camflow_jax.export import onnx as onnx_lib
from tools.bench.benchmarking.common import (
    MODES,
    BenchmarkOptions,
    load_config,
    machine_info,
    parse_groups,
    precision_of,
    train_config,
)
from tools.bench.benchmarking.export import bench_export
from tools.bench.benchmarking.inference import (
    bench_flows_only,
    bench_infer,
    bench_refine,
    bench_refine_batch,
    bench_refine_trips,
)
from tools.bench.benchmarking.profile import bench_profile
from tools.bench.benchmarking.release import (
    bench_release,
    bench_release_train,
    check_release,
    import_release,
)
from tools.bench.benchmarking.roofline import bench_roofline
from tools.bench.benchmarking.training import bench_train
from tools.bench.timing import load_average


def run(opts: BenchmarkOptions, on_result: Callable[[dict], None] | None = None) -> dict:
    """Runs the measurements of ``opts.mode``; returns {'machine', 'args', 'results'} (args: the
    options; results: one dict per measurement, each also passed to ``on_result`` as soon as it
    is measured) and writes it to ``opts.out`` when given."""
    if opts.mode not in MODES:
        raise ValueError(f"--mode must be one of {MODES}, got {opts.mode!r}")
    load_start = load_average()
    release = None
    if opts.mode == "release":  # before jax starts: a missing torch or release fails at once
        if opts.arch != "release" or (parse_groups(opts.groups) or [12, 12]) != [12, 12]:
            raise ValueError("--mode release compares the released structure: --arch release, --groups 12,12")
        root = check_release(opts.release_code, train=opts.release_train)
        release = {"root": root, **import_release(root, train=opts.release_train)}
    if opts.mode == "export":  # a missing converter or runtime fails at once
        for name in ("jax2onnx", "onnx", "onnxruntime"):
            onnx_lib.require(name)
    machine = machine_info()
    results = []

    def emit(r):
        results.append(r)
        if on_result is not None:
            on_result(r)

    if opts.mode == "refine":
        emit(bench_refine(opts))
    elif opts.mode == "refine_batch":
        emit(bench_refine_batch(opts))
    elif opts.mode == "refine_trips":
        emit(bench_refine_trips(opts))
    elif opts.mode == "export":
        emit(bench_export(opts))
    elif opts.mode == "profile":
        config = load_config(opts.config, opts.height, opts.width, opts.batch, precision_of(opts), opts.arch)
        for r in bench_profile(opts, config):
            emit(r)
    elif opts.mode == "roofline":
        for r in bench_roofline(opts):
            emit(r)
    else:
        config = load_config(opts.config, opts.height, opts.width, opts.batch, precision_of(opts), opts.arch)
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
        for r in bench_train(opts, train_config(opts, config)):
            emit(r)
    machine.update(loadavg_before=load_start, loadavg_after=load_average())
    out = {"machine": machine, "args": dataclasses.asdict(opts), "results": results}
    if opts.out:
        path = Path(opts.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2) + "\n")
    return out
