"""Shallow per-image features and the feature pyramid (docs/design.md, "Features and pyramid")."""

from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from camflow_jax.models.layers import Dtype, batch_norm, conv3x3, gelu


class ShallowFeatures(nn.Module):
    """F = ReLU(BN(conv)) x 3 with channels 1 -> 4 -> 8 -> 1 (no conv bias).

    Maps a normalized gray image ``[B, H, W, 1]`` to a one-channel feature map of the same
    size. The released model names this ``fea_extra``; it is meant to absorb luminance changes.
    """

    channels: Sequence[int] = (4, 8, 1)
    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        c_in = x.shape[-1]
        for i, c in enumerate(self.channels):
            x = conv3x3(c, c_in, use_bias=False, dtype=self.dtype, precision=self.precision, name=f"conv_{i}")(x)
            x = batch_norm(train, self.dtype, name=f"bn_{i}")(x)
            x = nn.relu(x)
            c_in = c
        return x


class FeaturePyramid(nn.Module):
    """Stage i (i = 0..L-1) at 1/2^(i+1) resolution with ``base * 2^i`` channels:
    conv3x3 stride 2 (+bias) -> GELU -> conv3x3 (+bias) -> GELU.

    Returns the list of stage outputs ordered fine to coarse (stage 0 first).
    """

    base_channels: int = 12
    num_stages: int = 3
    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> list[jax.Array]:
        outs = []
        c_in = x.shape[-1]
        for i in range(self.num_stages):
            c = self.base_channels * 2**i
            p = self.precision
            x = gelu(conv3x3(c, c_in, stride=2, dtype=self.dtype, precision=p, name=f"stage_{i}_down")(x))
            x = gelu(conv3x3(c, c, dtype=self.dtype, precision=p, name=f"stage_{i}_conv")(x))
            outs.append(x)
            c_in = c
        return outs
