"""The network's precision policy: one setting for its compute dtype and its matmul/convolution
precision (docs/performance.md, "Precision policy").

    "exact"     float32 compute; every dot and convolution at ``jax.lax.Precision.HIGHEST``
                (true float32 products on every backend). The default: parity with the
                released weights and accuracy hold on a GPU or TPU as on the CPU.
    "default"   float32 compute at the backend's default precision: float32 on a CPU, TF32
                tensor-core products on recent NVIDIA GPUs (Ampere and later), bfloat16 passes
                on a TPU. ``jax.default_matmul_precision`` (a context manager / config option)
                sets that default for the whole program, so it applies here and nowhere else.
    "bfloat16"  bfloat16 compute (matmuls, convolutions, norms; parameters stay float32 and
                are cast where used), dots at the backend's default precision.

It is the ``precision`` field of :class:`camflow_jax.models.ModelConfig` (``model.json``'s
``model_config.precision``, ``config.model.precision`` in a training config,
``Predictor(precision=...)``). Whatever the policy, the parts around the network are float32
at HIGHEST: the preprocessing, the combination of bases into flows (in the network too), the
warps, the losses, the homography fit and the refinement.

Importing this module imports no JAX (the training configs read :data:`POLICIES`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

EXACT, DEFAULT, BFLOAT16 = "exact", "default", "bfloat16"
#: The policies, by name.
POLICIES = (EXACT, DEFAULT, BFLOAT16)
#: What a model config without the field (an older ``model.json``) gets.
DEFAULT_POLICY = EXACT

#: The compute dtype older ``model.json`` files and calls named instead (``dtype``): the policy
#: each reads as. 'float32' reads as :data:`DEFAULT_POLICY` ('exact').
LEGACY_DTYPES = {"float32": DEFAULT_POLICY, "bfloat16": BFLOAT16}


@dataclasses.dataclass(frozen=True)
class Policy:
    """A policy's two parts: ``dtype`` (the compute dtype's name) and ``highest`` (dots and
    convolutions at ``Precision.HIGHEST``; else the backend's default)."""

    name: str
    dtype: str
    highest: bool

    @property
    def jnp_dtype(self) -> Any:
        import jax.numpy as jnp

        return getattr(jnp, self.dtype)

    @property
    def dot_precision(self) -> Any:
        """The ``precision=`` argument of every dot, einsum and convolution of the network
        (``jax.lax.Precision.HIGHEST`` or None, the default)."""
        import jax

        return jax.lax.Precision.HIGHEST if self.highest else None


_POLICIES = {
    EXACT: Policy(EXACT, "float32", True),
    DEFAULT: Policy(DEFAULT, "float32", False),
    BFLOAT16: Policy(BFLOAT16, "bfloat16", False),
}


def policy(name: str) -> Policy:
    """The :class:`Policy` named ``name`` (ValueError naming the choices otherwise)."""
    if name not in _POLICIES:
        raise ValueError(f"precision must be one of {list(POLICIES)}, got {name!r}")
    return _POLICIES[name]


def from_legacy_dtype(dtype: str, current: str | None = None) -> str:
    """The policy an older ``dtype`` setting means: 'bfloat16' -> 'bfloat16'; 'float32' ->
    ``current`` when that policy computes in float32, else :data:`DEFAULT_POLICY`."""
    if dtype not in LEGACY_DTYPES:
        raise ValueError(f"dtype must be one of {sorted(LEGACY_DTYPES)} (the precision policy "
                         f"{list(POLICIES)} replaces it), got {dtype!r}")
    if dtype == "float32" and current is not None and policy(current).dtype == "float32":
        return current
    return LEGACY_DTYPES[dtype]
