"""Motion Estimation Transformer: basis coefficients from a feature pair.

See docs/design.md, "Motion Estimation Transformer".

For levels l = 0..L-1 (coarse to fine, the level-l maps are at 1/2^(L-l) resolution):
  1. l > 0: m = sum_k w_k b_k (coefficients accumulated so far), resized to the level
     (align-corners, values scaled), and image-2's level feature is warped by it;
  2. tokens = concat(feature1, warped feature2), encoded by the level's Swin encoder down to
     the common 1/2^L grid with ``D = embed_dim * 2^(L-1)`` channels;
  3. each basis group g (homography, stochastic, depth...) has n_g learned query tokens T_g
     (dim D) that carry across levels. One class-attention block per level and group:
        u = LN1([T; X]);  T += g1 * proj(MHA(q = u[:n_g], k = v = u));
        T += g2 * MLP1(LN2(T));  T = MLP2(LN3(T));
     then a LayerNorm per group (shared by the levels): T <- LN_g(T);
  4. a head per group (shared by the levels) maps each token to one coefficient:
     h = Linear(GELU(Linear(T))) in R^{n_g}; w += 2^(L-l) * h.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from camflow_jax.geometry import device
from camflow_jax.models.config import ModelConfig
from camflow_jax.models.features import FeaturePyramid
from camflow_jax.models.layers import Dtype, Mlp, dense, gelu, layer_norm
from camflow_jax.models.swin import SwinEncoder, softmax_attend


class ClassAttention(nn.Module):
    """Queries from the first ``n`` rows (the class tokens), keys/values from all rows."""

    num_heads: int
    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, u: jax.Array, n: int) -> jax.Array:
        b, m, c = u.shape
        hd, p = c // self.num_heads, self.precision
        q = dense(c, dtype=self.dtype, precision=p, name="q")(u[:, :n]).reshape(b, n, self.num_heads, hd)
        k = dense(c, dtype=self.dtype, precision=p, name="k")(u).reshape(b, m, self.num_heads, hd)
        v = dense(c, dtype=self.dtype, precision=p, name="v")(u).reshape(b, m, self.num_heads, hd)
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))  # head-major [B, heads, rows, d]
        logits = jnp.einsum("bhnd,bhmd->bhnm", q * (hd ** -0.5), k, precision=p).astype(jnp.float32)
        out = softmax_attend(logits, v, p).transpose(0, 2, 1, 3).reshape(b, n, c)
        return dense(c, dtype=self.dtype, precision=p, name="proj")(out)


class ClassAttentionBlock(nn.Module):
    """LayerScale class-attention block (CaiT style) with a second, non-residual MLP."""

    num_heads: int
    mlp_ratio: float = 3.0
    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, tokens: jax.Array, x: jax.Array) -> jax.Array:
        n, c = tokens.shape[1], tokens.shape[2]
        # LayerScale init as in the release: 1e-5 for narrow blocks, 1e-6 otherwise.
        g0 = 1e-5 if c <= 24 else 1e-6
        gamma1 = self.param("gamma_1", nn.initializers.constant(g0), (c,), jnp.float32)
        gamma2 = self.param("gamma_2", nn.initializers.constant(g0), (c,), jnp.float32)
        hidden = int(c * self.mlp_ratio)
        u = layer_norm(self.dtype, name="ln1")(jnp.concatenate([tokens, x.astype(tokens.dtype)], axis=1))
        tokens = tokens + gamma1 * ClassAttention(self.num_heads, self.dtype, self.precision, name="attn")(u, n)
        tokens = tokens + gamma2 * Mlp(hidden, c, self.dtype, self.precision, name="mlp1")(
            layer_norm(self.dtype, name="ln2")(tokens))
        return Mlp(hidden, c, self.dtype, self.precision, name="mlp2")(layer_norm(self.dtype, name="ln3")(tokens))


class CoefficientHead(nn.Module):
    """Linear(D, D) -> GELU -> Linear(D, 1): one coefficient per token."""

    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        h = gelu(dense(tokens.shape[-1], dtype=self.dtype, precision=self.precision, name="hidden")(tokens))
        return dense(1, dtype=self.dtype, precision=self.precision, name="out")(h)[..., 0].astype(jnp.float32)


def combine_directional(coeffs: jax.Array, bases: jax.Array) -> jax.Array:
    """sum_k w_k b_k for the batched two-direction layout.

    coeffs ``[2B, N]``; bases ``[1, N, H, W, 2]`` (shared) or ``[2B, N, H, W, 2]``, or the pair
    ``(bases_f, bases_b)`` of ``[B, N, H, W, 2]`` each (the forward rows combine the first, the
    backward rows the second: the same sums without concatenating the sets).
    Returns ``[2B, H, W, 2]`` float32, at HIGHEST precision whatever the network's policy: the
    flows are outputs (a TF32 sum of bases spanning tens of pixels is off by ~1e-2 px), and the
    product, N multiply-adds per pixel, is bound by reading the bases, not by arithmetic.
    """
    coeffs, hi = coeffs.astype(jnp.float32), jax.lax.Precision.HIGHEST
    if isinstance(bases, tuple):
        half = coeffs.shape[0] // 2
        return jnp.concatenate([combine_directional(coeffs[:half], bases[0]),
                                combine_directional(coeffs[half:], bases[1])], axis=0)
    if bases.shape[0] == 1:
        return jnp.einsum("bn,nhwc->bhwc", coeffs, bases[0].astype(jnp.float32), precision=hi)
    return jnp.einsum("bn,bnhwc->bhwc", coeffs, bases.astype(jnp.float32), precision=hi)


class MotionEstimationTransformer(nn.Module):
    """Feature pyramid + per-level Swin encoders + per-group token stacks and heads.

    ``__call__(f_a, bases, train, f_b=None)``: shallow features of the reference / target images
    ``[B', H, W, 1]`` and the bases ``[1 or B', N, H, W, 2]``; returns coefficients ``[B', N]``.
    With ``f_b=None`` the batch is ``[F1; F2]`` and the targets are ``[F2; F1]``.
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, f_a: jax.Array, bases: jax.Array, train: bool = False,
                 f_b: jax.Array | None = None) -> jax.Array:
        cfg, dtype, prec = self.config, self.config.jnp_dtype, self.config.dot_precision
        num_levels = len(cfg.depths)
        dim = cfg.embed_dim * 2 ** (num_levels - 1)
        b = f_a.shape[0]
        h_full = f_a.shape[1]

        pyramid = FeaturePyramid(cfg.embed_dim // 2, num_levels, dtype, prec, name="pyramid")
        pyr_a = pyramid(f_a)
        if f_b is None:
            # Batched two-direction pass: the targets are the references with the batch halves
            # swapped, so the pyramid is computed once and its halves swapped.
            if b % 2:
                raise ValueError(f"f_b=None needs an even batch [img1s; img2s], got {b}")
            pyr_b = [jnp.roll(p, b // 2, axis=0) for p in pyr_a]
        else:
            pyr_b = pyramid(f_b)

        # Class-attention heads per encoder index i (the release's blocks list [1, 2, .., L-1, L-1]).
        ca_heads = [cfg.num_heads[min(i + 1, num_levels - 1)] for i in range(num_levels)]
        groups = list(zip(cfg.group_names, cfg.group_sizes))
        tokens = {
            name: jnp.broadcast_to(
                self.param(f"tokens_{name}", nn.initializers.normal(0.02), (n, dim), jnp.float32)
                .astype(dtype)[None], (b, n, dim))
            for name, n in groups
        }
        norms = {name: layer_norm(dtype, name=f"norm_{name}") for name, _ in groups}
        heads = {name: CoefficientHead(dtype, prec, name=f"head_{name}") for name, _ in groups}

        coeffs = jnp.zeros((b, cfg.num_bases), jnp.float32)
        for level in range(num_levels):
            i = num_levels - 1 - level  # pyramid / encoder index (0 = finest)
            x1, x2 = pyr_a[i], pyr_b[i]
            h, w = x1.shape[1:3]
            if level > 0:
                flow = combine_directional(coeffs, bases)
                flow = device.resize_flow(flow, h, w)
                x2 = device.warp(x2.astype(jnp.float32), flow).astype(x1.dtype)
            x = jnp.concatenate([x1, x2], axis=-1)
            x = SwinEncoder(cfg.depths[i], cfg.layer_depth[i], cfg.num_heads[i], cfg.window_size,
                            cfg.mlp_ratio, dtype, prec, name=f"encoder_level_{level}")(x, train)
            x = x.reshape(b, -1, x.shape[-1])
            hs = []
            for name, _ in groups:
                t = ClassAttentionBlock(ca_heads[i], cfg.mlp_ratio, dtype, prec,
                                        name=f"ca_{name}_level_{level}")(tokens[name], x)
                tokens[name] = norms[name](t)
                hs.append(heads[name](tokens[name]))
            coeffs = coeffs + jnp.concatenate(hs, axis=1) * float(h_full // h)
        return coeffs
