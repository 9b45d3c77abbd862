"""Mode ``export``: the exported network in ONNX Runtime against the same function in JAX.

The shipped model (``Predictor.from_pretrained()``) is exported as ``python -m camflow_jax.export``
does (:mod:`camflow_jax.export`) at ``--height`` x ``--width`` and ``--batch``; on the example pair
(a held-out synthetic scene with its depth bases) four callers are timed in blocks: each
caller runs ``--warmup`` untimed calls, then ``--repeats`` timed ones, before the next caller
starts, and the sequence of blocks runs twice (so that a change of load over the run reaches
every caller). Blocks, not calls interleaved one by one: ONNX Runtime's worker threads keep
spinning for a while after a call, and a JAX call right after one took 1.35x the time of the
same call after another JAX call (0.180 against 0.133 s at 128x256, load 2.8).

* ``jax``: ``jax.jit`` of the exported flows function, compiled (what the Predictor's network
  pass computes at that size: both directions, flows only);
* ``stablehlo``: the serialized CPU artifact, deserialized and compiled;
* ``onnx``: ``network.onnx`` as written (Einsum rewritten as MatMul) in ONNX Runtime's CPU
  session, its default threads;
* ``onnx_nospin``: the same file in a session whose threads do not spin between calls;
* ``onnx_einsum``: the same conversion without the rewrite.

Reported per call: median, min, process CPU seconds; the largest flow difference of each
runtime from ``jax`` on the pair; conversion, lowering and session-creation seconds; file
sizes; ONNX Runtime's thread count and version.
"""

from __future__ import annotations

import copy
import statistics
import time

import jax
import numpy as np

from camflow_jax.export import bundle, network, stablehlo
from camflow_jax.export import onnx as onnx_lib
from camflow_jax.predictor import Predictor
from tools.bench.benchmarking.common import BenchmarkOptions
from tools.bench.timing import load_average, repeat

__all__ = ["bench_export", "ROUNDS"]

#: How many times the sequence of timing blocks runs.
ROUNDS = 2


def _seconds(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - t0, 3)


def bench_export(opts: BenchmarkOptions) -> dict:
    pred = Predictor.from_pretrained()
    spec = network.export_spec(pred, (opts.height, opts.width), opts.batch)
    static = network.static_bases_at(pred, spec)
    flows = network.flows_function(pred, spec)
    shapes = spec.flow_shapes()
    ex = bundle.example_pair(spec)
    build = jax.jit(network.depth_bases_function(pred, spec, static))
    feeds = {"img1": ex["img1"], "img2": ex["img2"], "bases_f": np.asarray(build(ex["depth1"], ex["K"])),
             "bases_b": np.asarray(build(ex["depth2"], ex["K"]))}
    args = tuple(feeds.values())
    # the ONNX files are converted from the export's own form (layers.onnx_form), as the export ships them
    onnx_flows = network.flows_function(pred, spec, onnx=True)
    raw, convert_s = _seconds(lambda: onnx_lib.convert_raw(onnx_flows, shapes, network.FLOW_OUTPUTS, name="camflow"))
    plain = onnx_lib.finish(copy.deepcopy(raw), matmul=False)
    model = onnx_lib.finish(raw, matmul=True)
    exported, export_s = _seconds(lambda: stablehlo.export_function(flows, shapes, ("cpu",)))
    blob = exported.serialize()
    jitted = jax.jit(flows)
    _, jax_compile_s = _seconds(lambda: jax.block_until_ready(jitted(*args)))
    artifact = jax.jit(stablehlo.load(blob).call)
    _, stablehlo_compile_s = _seconds(lambda: jax.block_until_ready(artifact(*args)))
    sessions = {}
    session_s = {}
    for name, m, spin in (("onnx", model, True), ("onnx_nospin", model, False), ("onnx_einsum", plain, True)):
        sessions[name], session_s[name] = _seconds(lambda m=m, spin=spin: onnx_lib.session(m, spinning=spin))
    calls = {
        "jax": lambda: [np.asarray(x) for x in jax.block_until_ready(jitted(*args))],
        "stablehlo": lambda: [np.asarray(x) for x in jax.block_until_ready(artifact(*args))],
        **{name: (lambda s=s: list(onnx_lib.run(s, feeds).values())) for name, s in sessions.items()},
    }
    outputs = {name: dict(zip(network.FLOW_OUTPUTS, call())) for name, call in calls.items()}
    load_before = load_average()
    wall = {k: [] for k in calls}
    cpu = {k: [] for k in calls}
    block_medians = {k: [] for k in calls}
    for _ in range(ROUNDS):
        for name, call in calls.items():
            for _ in range(opts.warmup):
                call()
            block, block_cpu = repeat(call, opts.repeats)
            wall[name] += block
            cpu[name] += block_cpu
            block_medians[name].append(round(statistics.median(block), 4))
    ref = outputs["jax"]
    ort = onnx_lib.require("onnxruntime")
    return {
        "measurement": "export", "model": pred.description, "height": spec.height, "width": spec.width,
        "batch": spec.batch, "num_bases": spec.num_bases, "precision": pred.precision,
        "repeats": opts.repeats, "warmup": opts.warmup, "rounds": ROUNDS,
        "median_s": {k: round(statistics.median(v), 4) for k, v in wall.items()},
        "min_s": {k: round(min(v), 4) for k, v in wall.items()},
        "median_process_cpu_s": {k: round(statistics.median(v), 4) for k, v in cpu.items()},
        "onnx_over_jax": round(statistics.median(wall["onnx"]) / statistics.median(wall["jax"]), 3),
        "onnx_over_stablehlo": round(statistics.median(wall["onnx"]) / statistics.median(wall["stablehlo"]), 3),
        "onnx_nospin_over_onnx": round(statistics.median(wall["onnx_nospin"]) / statistics.median(wall["onnx"]), 3),
        "onnx_einsum_over_onnx": round(statistics.median(wall["onnx_einsum"]) / statistics.median(wall["onnx"]), 3),
        "block_medians_s": block_medians,
        "max_abs_flow_diff_px": {k: round(max(float(np.max(np.abs(o[f] - ref[f]))) for f in ("flow_f", "flow_b")), 8)
                                 for k, o in outputs.items() if k != "jax"},
        "max_abs_coeff_diff": {k: round(max(float(np.max(np.abs(o[f] - ref[f]))) for f in ("coeffs_f", "coeffs_b")), 8)
                               for k, o in outputs.items() if k != "jax"},
        "mean_abs_flow_f_px": round(float(np.mean(np.linalg.norm(ref["flow_f"], axis=-1))), 3),
        "onnx_nodes": {"onnx": len(model.graph.node), "onnx_einsum": len(plain.graph.node)},
        "onnx_einsum_nodes": {"onnx": sum(n.op_type == "Einsum" for n in model.graph.node),
                              "onnx_einsum": sum(n.op_type == "Einsum" for n in plain.graph.node)},
        "bytes": {"onnx": len(model.SerializeToString()), "stablehlo": len(blob)},
        "seconds": {"jax2onnx_convert": convert_s, "jax_export": export_s, "jax_first_call": jax_compile_s,
                    "stablehlo_first_call": stablehlo_compile_s, "ort_session": session_s},
        "onnxruntime": {"version": ort.__version__,
                        "intra_op_threads": "default (one per physical core)",
                        "spinning": {"onnx": True, "onnx_nospin": False, "onnx_einsum": True},
                        "providers": ["CPUExecutionProvider"]},
        "converter": onnx_lib.versions(),
        "times_s": {k: [round(t, 4) for t in v] for k, v in wall.items()},
        "loadavg_before": load_before, "loadavg_after": load_average(),
    }
