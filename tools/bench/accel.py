"""Accelerator readiness checked on a CPU-only machine: lowering for GPU/TPU and roofline estimates.

Two questions can be answered without the accelerator:

- *Does our code lower for it?* :func:`export_for` runs ``jax.export`` with ``platforms=
  ["cuda"]`` / ``["tpu"]`` on a jitted function (with its shardings: a function jitted over a
  multi-device mesh exports for that many devices). A CPU-only custom call, an unsupported dtype
  or a host callback fails here, at trace/lowering time, with no device needed.
- *How fast could it be at best?* :func:`roofline` turns XLA's cost analysis (FLOPs and bytes
  accessed of the compiled computation) into a lower bound on one device's time:
  ``max(flops / peak FLOP/s, bytes / HBM bandwidth)``. The counts come from the CPU compilation
  (fusion decisions differ per backend, so the bytes are an estimate), and a ``while`` loop's body
  is counted once. It is an estimate and a lower bound, never a measurement.

:func:`capture_jitted_calls` records the jitted functions a :class:`~camflow_jax.predictor.Predictor`
calls for one pair, with their arguments, without executing them (each call is answered with
zeros of the right shapes), so the exported / analysed functions are exactly the Predictor's.
jax is imported inside the functions: importing this module starts no backend.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Sequence

__all__ = ["DeviceSpec", "DEVICES", "JittedCall", "capture_jitted_calls", "export_for", "cost_of",
           "roofline", "uses_float64"]


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """Public peak numbers of one accelerator (dense, no sparsity), with where they come from."""

    name: str
    peak_flops: dict           # compute dtype name -> FLOP/s
    hbm_bytes_per_s: float
    source: str
    note: str = ""


#: The two targets of docs/performance.md's roofline table.
DEVICES = {
    "h100_sxm": DeviceSpec(
        name="NVIDIA H100 SXM5 (one GPU)",
        # Datasheet: BF16 Tensor Core 1,979 TFLOPS *with sparsity* (989 dense); FP32 67 TFLOPS
        # (CUDA cores); TF32 Tensor Core 989 with sparsity (494.7 dense); HBM3 3.35 TB/s.
        peak_flops={"bfloat16": 989e12, "float32": 67e12, "tf32": 494.7e12},
        hbm_bytes_per_s=3.35e12,
        source="NVIDIA H100 Tensor Core GPU datasheet, SXM column (https://www.nvidia.com/en-us/data-center/h100/)",
        note="float32 uses the 67 TFLOP/s CUDA-core peak (strict fp32); XLA may run f32 dots and convs "
             "as TF32 on tensor cores (494.7 TFLOP/s dense), which would lower the compute bound."),
    "tpu_v5e": DeviceSpec(
        name="Google Cloud TPU v5e (one chip)",
        # Cloud TPU docs, v5e system architecture: 197 TFLOP/s bf16 per chip, HBM2 16 GB at 819 GB/s.
        peak_flops={"bfloat16": 197e12, "float32": 197e12},
        hbm_bytes_per_s=819e9,
        source="Cloud TPU v5e documentation, key chip specifications (https://cloud.google.com/tpu/docs/v5e)",
        note="no fp32 peak is published; the MXU multiplies in bf16, and jax's default matmul precision on "
             "TPU runs f32 dots and convs as bf16 passes, so the float32 row uses the bf16 peak (at "
             "precision=HIGHEST XLA uses several bf16 passes and the compute bound grows accordingly)."),
}


@dataclasses.dataclass
class JittedCall:
    """One call of a jitted function: ``fn(*args, **kwargs)`` (static arguments in kwargs)."""

    name: str
    fn: Any
    args: tuple
    kwargs: dict

    def lower(self):
        return self.fn.lower(*self.args, **self.kwargs)


def _is_jitted(obj) -> bool:
    return callable(obj) and hasattr(obj, "lower") and hasattr(obj, "trace")


def capture_jitted_calls(pred, img1, img2, **call_kwargs) -> list[JittedCall]:
    """The jitted functions ``pred(img1, img2, **call_kwargs)`` calls, in call order, with their
    arguments. Nothing is computed: each jitted attribute of ``pred`` is replaced, for the
    duration of the call, by a recorder answering with zeros of the traced output shapes (the
    host code around them still runs: resizing, the SIFT start of the refinement). The
    returned calls can be lowered, compiled, cost-analysed or exported."""
    import jax
    import numpy as np

    from camflow_jax.compilation.memo import BoundedMemo

    # the Predictor's own jitted calls and those of the objects it holds (its PairRefiner)
    owners = [pred] + [v for v in vars(pred).values() if hasattr(v, "__dict__") and not _is_jitted(v)
                       and any(_is_jitted(x) for x in vars(v).values())]
    names = [(o, k) for o in owners for k, v in vars(o).items() if _is_jitted(v)]
    if not names:
        raise ValueError("capture_jitted_calls: the predictor has no jitted functions")
    calls: list[JittedCall] = []

    def recorder(name, fn):
        def call(*args, **kwargs):
            # the jax.jit itself (an ExportedJit wraps one: camflow_jax.compilation.exported)
            calls.append(JittedCall(name, getattr(fn, "jitted", fn), args, kwargs))
            out = fn.trace(*args, **kwargs).out_info
            return jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), out)
        return call

    saved = {(id(o), k): (o, k, getattr(o, k)) for o, k in names}
    # The caches (e.g. the static bases per size) are emptied for the call, so the jitted work
    # behind them is recorded too, and restored after it: the zeros the recorders answer with
    # must never be cached as results.
    caches = [(o, k, c) for o in owners for k, c in vars(o).items() if isinstance(c, BoundedMemo)]
    try:
        for o, k, fn in saved.values():
            setattr(o, k, recorder(k, fn))
        for o, k, c in caches:
            setattr(o, k, BoundedMemo(c.size))
        with warnings.catch_warnings(), np.errstate(all="ignore"):  # host maths on the zero answers
            warnings.simplefilter("ignore", RuntimeWarning)
            pred(img1, img2, **call_kwargs)
    finally:
        for o, k, fn in saved.values():
            setattr(o, k, fn)
        for o, k, c in caches:
            setattr(o, k, c)
    return calls


def export_for(fn, platform: str, *args, **kwargs):
    """``jax.export.export(fn, platforms=[platform])(*args, **kwargs)``: the ``Exported`` of a
    jitted ``fn`` for ``platform`` ('cuda', 'tpu', 'rocm', 'cpu'); needs no such device."""
    from jax import export

    return export.export(fn, platforms=[platform])(*args, **kwargs)


def uses_float64(exported) -> list[str]:
    """The input/output avals of an ``Exported`` holding float64/int64 (an x64 leak: slow or
    unsupported on accelerators), as strings."""
    bad = []
    for kind, avals in (("in", exported.in_avals), ("out", exported.out_avals)):
        for a in avals:
            if str(a.dtype) in ("float64", "int64", "complex128"):
                bad.append(f"{kind}: {a}")
    return bad


def cost_of(compiled_or_lowered) -> dict:
    """``{'flops', 'bytes_accessed', 'transcendentals'}`` from XLA's cost analysis (summed over
    modules; None where the backend gives none)."""
    try:
        cost = compiled_or_lowered.cost_analysis()
    except Exception:  # noqa: BLE001 - some backends do not implement it
        cost = None
    if isinstance(cost, dict):
        cost = [cost]
    out = {}
    for key, name in (("flops", "flops"), ("bytes accessed", "bytes_accessed"), ("transcendentals", "transcendentals")):
        vals = [float(c[key]) for c in (cost or []) if c and key in c]
        out[name] = sum(vals) if vals else None
    return out


def roofline(flops: float, bytes_accessed: float, device: DeviceSpec | str, dtype: str = "float32") -> dict:
    """Lower bound on one device's time for a computation of ``flops`` and ``bytes_accessed``:
    ``max(flops / peak(dtype), bytes / bandwidth)``, with both terms, the arithmetic intensity
    (FLOP/byte) and which bound binds."""
    spec = DEVICES[device] if isinstance(device, str) else device
    if dtype not in spec.peak_flops:
        raise ValueError(f"roofline: no {dtype} peak for {spec.name}; known: {sorted(spec.peak_flops)}")
    t_compute = float(flops) / spec.peak_flops[dtype]
    t_memory = float(bytes_accessed) / spec.hbm_bytes_per_s
    return {"device": spec.name, "dtype": dtype, "peak_flops": spec.peak_flops[dtype],
            "hbm_bytes_per_s": spec.hbm_bytes_per_s, "compute_s": t_compute, "memory_s": t_memory,
            "lower_bound_s": max(t_compute, t_memory),
            "bound": "compute" if t_compute >= t_memory else "memory",
            "arithmetic_intensity": float(flops) / float(bytes_accessed) if bytes_accessed else None}


def export_all(calls: Sequence[JittedCall], platforms: Sequence[str]) -> dict:
    """``{platform: [(call name, Exported), ...]}`` of every captured call."""
    return {p: [(c.name, export_for(c.fn, p, *c.args, **c.kwargs)) for c in calls] for p in platforms}
