"""Benchmark measurements (one module per mode family; their public names are re-exported here): inference latency/throughput, train-step throughput and memory, XLA
FLOP counts, and the test-time refinement's cost. The command line is ``python -m
tools.bench benchmark`` (what each mode measures, and the commands behind docs/performance.md,
are in its help); it parses the arguments into :class:`BenchmarkOptions` and prints each result
of :func:`run` as one JSON line.

Each function is lowered and compiled once (``jax.jit(f).lower(...).compile()``); the compiled
object is what is timed (:func:`compile_fn`), by the harness's timing core
(:mod:`tools.bench.timing`: :func:`~tools.bench.timing.repeat`,
:func:`~tools.bench.timing.interleaved`, the load average, the host). Every measurement reports
median/mean/min seconds per call and per pair, pairs/s and process CPU seconds
(:func:`timing_summary`), lower and compile seconds, FLOPs from XLA's cost analysis
(:func:`flops_of`), memory (:func:`memory_of`) and the load average before/after. jax is
imported inside the functions, so importing this module starts no backend.
"""

# the modes, one module each; this package re-exports their public names
from tools.bench.benchmarking.common import (  # noqa: F401
    MODES,
    PROFILE_TARGETS,
    BenchmarkOptions,
    apply_groups,
    arch_keys,
    compile_fn,
    flops_of,
    load_config,
    machine_info,
    memory_of,
    timing_summary,
)
from tools.bench.benchmarking.export import bench_export  # noqa: F401
from tools.bench.benchmarking.inference import (  # noqa: F401
    bench_flows_only,
    bench_infer,
    bench_refine,
    bench_refine_batch,
    bench_refine_trips,
    flows_only_setup,
)
from tools.bench.benchmarking.profile import (  # noqa: F401
    bench_profile,
    hlo_op_names,
    op_group,
    profile_summary,
    trace_op_times,
)
from tools.bench.benchmarking.release import (  # noqa: F401
    ReleaseUnavailable,
    bench_release,
    bench_release_train,
    build_release,
    check_release,
    import_release,
)
from tools.bench.benchmarking.roofline import bench_roofline, inference_predictor  # noqa: F401
from tools.bench.benchmarking.run import run  # noqa: F401
from tools.bench.benchmarking.training import bench_train, build_train, train_setup  # noqa: F401

__all__ = ['MODES', 'BenchmarkOptions', 'run', 'bench_infer', 'bench_train', 'bench_refine', 'bench_refine_batch', 'bench_refine_trips', 'build_train', 'load_config', 'apply_groups', 'arch_keys', 'machine_info', 'compile_fn', 'flops_of', 'memory_of', 'timing_summary', 'bench_roofline', 'inference_predictor', 'bench_flows_only', 'flows_only_setup', 'train_setup', 'ReleaseUnavailable', 'check_release', 'import_release', 'build_release', 'bench_release', 'bench_release_train', 'PROFILE_TARGETS', 'hlo_op_names', 'op_group', 'trace_op_times', 'profile_summary', 'bench_profile', 'bench_export']
