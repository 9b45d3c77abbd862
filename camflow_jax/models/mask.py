"""Confidence (mask) network (docs/design.md, "Mask network").

Input concat[F_a, warp(F_b, m_ab)] ``[B, H, W, 2]``. Dense stack: each conv3x3 (+bias) ->
LeakyReLU(0.1) output is concatenated in front of its input (2 -> 10 -> 26 -> 58 -> 74 -> 82
channels), then conv3x3 82 -> 1 and ReLU. The output s >= 0 is a per-pixel log-variance;
the confidence is d = exp(-s).
"""

from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from camflow_jax.models.layers import Dtype, conv3x3


class MaskNet(nn.Module):
    """The dense conv stack on ``[B, H, W, 2]`` inputs -> ``[B, H, W, 1]`` float32 (s >= 0).

    An even batch (the model's [forward; backward] layout) runs as two independent chains of
    B/2 samples with the same weights: XLA:CPU executes independent ops concurrently, and two
    chains of full-resolution thin convolutions keep a few cores busier than one chain whose
    ops each split over the cores. Samples never mix, so the result is the same.
    """

    channels: Sequence[int] = (8, 16, 32, 16, 8)
    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cin = x.shape[-1]
        convs = []
        for i, c in enumerate(self.channels):
            convs.append(conv3x3(c, cin, dtype=self.dtype, precision=self.precision, name=f"conv_{i}"))
            cin += c
        conv_out = conv3x3(1, cin, dtype=self.dtype, precision=self.precision, name="conv_out")

        def chain(x):
            x = x.astype(self.dtype)
            for conv in convs:
                x = jnp.concatenate([nn.leaky_relu(conv(x), 0.1), x], axis=-1)
            return nn.relu(conv_out(x)).astype(jnp.float32)

        b = x.shape[0]
        if b < 2 or b % 2:
            return chain(x)
        return jnp.concatenate([chain(x[: b // 2]), chain(x[b // 2:])], axis=0)
