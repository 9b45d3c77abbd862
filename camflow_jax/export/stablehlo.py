"""StableHLO: a JAX function as a serialized :mod:`jax.export` artifact.

``jax.export`` traces and lowers the function once, for each platform asked for (``cpu``,
``cuda``, ``rocm``, ``tpu``: lowering needs no such device here), and ``Exported.serialize()``
writes the StableHLO module with its calling convention, input and output shapes as one
flatbuffer. ``jax.export.deserialize(bytes).call(*arrays)`` runs it in any process with a
compatible jax (no Flax, no camflow_jax); other StableHLO consumers (XLA's PJRT C API, IREE)
read the module itself (``Exported.mlir_module_serialized``, StableHLO portable bytecode).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
from jax import export

__all__ = ["PLATFORMS", "parse_platforms", "export_function", "load", "describe"]

#: The platforms ``jax.export`` lowers for.
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


def parse_platforms(text: str) -> tuple[str, ...]:
    """``"cpu,cuda"`` as ``("cpu", "cuda")``: known names, no repeats, at least one."""
    names = tuple(p.strip().lower() for p in str(text).split(",") if p.strip())
    bad = [p for p in names if p not in PLATFORMS]
    if not names or bad or len(set(names)) != len(names):
        raise ValueError(f"--platforms must be distinct names from {','.join(PLATFORMS)} separated by "
                         f"commas (e.g. cpu,cuda), got {text!r}")
    return names


def export_function(fn: Callable, inputs: Mapping[str, Any], platforms: Sequence[str]) -> export.Exported:
    """``fn`` (of the arrays ``inputs``, name -> ``jax.ShapeDtypeStruct``, in call order)
    traced and lowered for ``platforms``; its constants (the weights) are embedded."""
    return export.export(jax.jit(fn), platforms=tuple(platforms))(*inputs.values())


def load(data: bytes) -> export.Exported:
    """A serialized artifact read back (``jax.export.deserialize``)."""
    return export.deserialize(bytearray(data))


def describe(exported: export.Exported, input_names: Sequence[str], output_names: Sequence[str]) -> dict:
    """What the manifest says of an artifact: platforms, calling convention, inputs, outputs."""

    def arrays(names, avals):
        return [{"name": n, "shape": list(a.shape), "dtype": str(a.dtype)} for n, a in zip(names, avals)]

    return {"platforms": list(exported.platforms),
            "calling_convention_version": int(exported.calling_convention_version),
            "inputs": arrays(input_names, exported.in_avals),
            "outputs": arrays(output_names, exported.out_avals)}
