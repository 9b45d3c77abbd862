"""Confidence (mask) network (DESIGN §6.6).

Input concat[F_a, warp(F_b, m_ab)] ``[B, H, W, 2]``. Dense stack: each conv3x3 (+bias) ->
LeakyReLU(0.1) output is concatenated in front of its input (2 -> 10 -> 26 -> 58 -> 74 -> 82
channels), then conv3x3 82 -> 1 and ReLU. The output s >= 0 is a per-pixel log-variance;
the confidence is d = exp(-s).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import flax.linen as nn

from camflow_jax.models.layers import Dtype, conv3x3


class MaskNet(nn.Module):
    channels: Sequence[int] = (8, 16, 32, 16, 8)
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.astype(self.dtype)
        for i, c in enumerate(self.channels):
            y = nn.leaky_relu(conv3x3(c, x.shape[-1], dtype=self.dtype, name=f"conv_{i}")(x), 0.1)
            x = jnp.concatenate([y, x], axis=-1)
        s = conv3x3(1, x.shape[-1], dtype=self.dtype, name="conv_out")(x)
        return nn.relu(s).astype(jnp.float32)
