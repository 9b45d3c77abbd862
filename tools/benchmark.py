"""Inference benchmark: median wall time of the jitted CamFlow forward (both directions + masks).

    python tools/benchmark.py --height 320 --width 576 --batch 1 --groups 12,12 --repeats 20

Random weights (timing does not depend on their values); bases are random static fields.
Prints one JSON line with the median/mean/min seconds per call and per pair, the median
process CPU time per call, the compile time, the device, the configuration and the load
average before/after (timings are only comparable on an otherwise idle machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--height", type=int, default=320)
    p.add_argument("--width", type=int, default=576)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--groups", default="12,12", help="group sizes, e.g. 12,12 (CamFlow) or 12,12,12 (CamFlow+)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--per-sample-bases", action="store_true",
                   help="pass [B, N, H, W, 2] bases (and separate backward bases) as CamFlow+ training does")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    return p.parse_args(argv)


def run(args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from camflow_jax.models import build_model, init_variables

    groups = [int(g) for g in args.groups.split(",")]
    model = build_model({"group_sizes": groups, "dtype": args.dtype})
    n, b, h, w = sum(groups), args.batch, args.height, args.width
    rng = np.random.default_rng(0)
    g1 = jnp.asarray(rng.standard_normal((b, h, w, 1), np.float32))
    g2 = jnp.asarray(rng.standard_normal((b, h, w, 1), np.float32))
    shape = (b, n, h, w, 2) if args.per_sample_bases else (n, h, w, 2)
    bases = jnp.asarray(rng.uniform(-1, 1, shape).astype(np.float32))
    bases_b = bases if args.per_sample_bases else None
    variables = init_variables(model, jax.random.key(0), h, w)

    fwd = jax.jit(lambda v, a, c, bs, bb: model.apply(v, a, c, bs, bb))
    t0 = time.perf_counter()
    jax.block_until_ready(fwd(variables, g1, g2, bases, bases_b))
    compile_s = time.perf_counter() - t0
    for _ in range(args.warmup):
        jax.block_until_ready(fwd(variables, g1, g2, bases, bases_b))
    load_before = os.getloadavg()
    times, cpu = [], []
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(fwd(variables, g1, g2, bases, bases_b))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    med = statistics.median(times)
    return {
        "device": str(jax.devices()[0]), "platform": jax.devices()[0].platform,
        "cpu_count": os.cpu_count(), "height": h, "width": w, "batch": b, "groups": groups,
        "dtype": args.dtype, "per_sample_bases": bool(args.per_sample_bases),
        "repeats": args.repeats, "compile_s": round(compile_s, 3),
        "median_s": round(med, 4), "mean_s": round(statistics.mean(times), 4),
        "min_s": round(min(times), 4), "median_s_per_pair": round(med / b, 4),
        "median_process_cpu_s": round(statistics.median(cpu), 4),
        # Other processes compete for the cores: report the machine's load around the run.
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv=None):
    print(json.dumps(run(parse_args(argv))))


if __name__ == "__main__":
    main()
