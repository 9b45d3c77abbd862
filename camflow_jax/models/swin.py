"""Swin encoder: (shifted) window attention with relative-position bias, conv downsampling.

Tokens are kept as a ``[B, H, W, C]`` map (the release flattens them row-major, which is the
same order). Windows are cut with reshapes/transposes only; the relative-position index and
the shifted-window region mask are static numpy arrays built at trace time.

Window attention for one window of N = ws^2 tokens, per head:
    A = softmax(q k^T * d^-1/2 + B[rel(i, j)] + M),   out = A v
with B a learned table of (2 ws - 1)^2 entries per head indexed by the relative offset and M
the region mask (0 / -100) that keeps cyclically shifted windows from mixing regions that are
not adjacent in the image.

Every product takes ``precision`` (the model config's policy, :mod:`camflow_jax.models.precision`).
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax.models.layers import (
    Dtype,
    Mlp,
    batch_norm,
    conv3x3,
    dense,
    kaiming_normal,
    layer_norm,
    onnx_form_active,
)

MASK_VALUE = -100.0


@functools.lru_cache(maxsize=None)
def relative_position_index(ws: int) -> np.ndarray:
    """``[ws^2, ws^2]`` index into the (2ws-1)^2 bias table (Swin's convention)."""
    coords = np.stack(np.meshgrid(np.arange(ws), np.arange(ws), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + (ws - 1)
    return (rel[..., 0] * (2 * ws - 1) + rel[..., 1]).astype(np.int32)


def window_config(h: int, w: int, window: int, shift: int) -> tuple[int, int]:
    """The release's rule: a map no larger than the window is one unshifted window."""
    if min(h, w) <= window:
        return min(h, w), 0
    return window, shift


@functools.lru_cache(maxsize=None)
def shifted_window_mask(h: int, w: int, ws: int, shift: int) -> np.ndarray:
    """``[nW, ws^2, ws^2]`` additive mask (0 within a region, -100 across regions)."""
    img = np.zeros((h, w), np.float32)
    cnt = 0
    for hs in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
        for wsl in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
            img[hs, wsl] = cnt
            cnt += 1
    win = img.reshape(h // ws, ws, w // ws, ws).transpose(0, 2, 1, 3).reshape(-1, ws * ws)
    diff = win[:, None, :] - win[:, :, None]
    return np.where(diff != 0, MASK_VALUE, 0.0).astype(np.float32)


def softmax_attend(logits: jax.Array, v: jax.Array, precision: Any = None) -> jax.Array:
    """softmax(logits, -1) @ v with the normalisation applied after the product.

    ``logits [..., n, m]`` (float32), ``v [..., m, d]``: (exp(l - max l) @ v) / sum exp(l - max l)
    is the softmax-weighted sum; dividing the [n, d] result instead of the [n, m] weights saves
    a pass over the (large) attention matrix. Under :func:`camflow_jax.models.layers.onnx_form`
    the weights are normalised first (``jax.nn.softmax``: one ONNX ``Softmax`` kernel).
    """
    if onnx_form_active():
        p = jax.nn.softmax(logits, axis=-1)
        return jnp.einsum("...nm,...md->...nd", p.astype(v.dtype), v, precision=precision).astype(v.dtype)
    logits = logits - jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    e = jnp.exp(logits)
    out = jnp.einsum("...nm,...md->...nd", e.astype(v.dtype), v, precision=precision)
    return (out.astype(jnp.float32) / jnp.sum(e, axis=-1, keepdims=True)).astype(v.dtype)


def _window_logits(q, k, bias, mask, precision):
    logits = jnp.einsum("bwhnd,bwhmd->bwhnm", q, k, precision=precision).astype(jnp.float32)
    if onnx_form_active() and mask is not None:
        # The export's form (layers.onnx_form): bias and mask summed first ([nW, heads, N, N],
        # constants of the export, folded by ONNX Runtime), one add over the logits instead of two.
        return logits + (bias[None] + mask[:, None])
    logits = logits + bias
    return logits if mask is None else logits + mask[None, :, None]


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def window_attention(q: jax.Array, k: jax.Array, v: jax.Array, bias: jax.Array,
                     mask: jax.Array | None, precision: Any = None) -> jax.Array:
    """``softmax(q k^T + bias + mask) v`` per window and head.

    ``q, k, v [B, nW, heads, N, d]`` (q already scaled), ``bias [heads, N, N]`` (shared by every
    batch and window), ``mask [nW, N, N]`` or None (not differentiated), ``precision`` that of
    every product, forward and backward. Returns ``[B, nW, heads, N, d]``.

    Called outside differentiation, the value is the plain formulation's
    (:func:`softmax_attend`), bit for bit, so inference is unchanged. Under differentiation the
    forward saves the normalised attention P (the same value to float32 rounding) and the
    backward is written out:
        dS = P * (dO v^T - rowsum(dO * O)),   dq = dS k,   dk^T = q^T dS,   dv^T = dO^T P,
    and the bias gradient, the sum of dS over batches and windows, is a product with a vector
    of ones (XLA:CPU's own reduction over those leading axes ran 50x slower: 285 ms against 6 ms
    for the [4, 180, 12, 64, 64] logits of a 320x576 batch-2 step).

    dk and dv contract over the first axis of a large ``[N, N]`` matrix. Autodiff's products of
    that kind are not taken by YNNPACK on XLA:CPU and ran in XLA's own, slower dot emitter (with
    transposes around them: ~0.7 s of a 4.3 s train step at 320x576). Here they are products of
    the small transposed ``[d, N]`` operands, behind optimization barriers so that XLA does not
    fold the transposes back. The 320x576 batch-2 train step takes 0.87 of its time with
    autodiff's attention, the README's 64x128 step 0.955 (docs/performance.md, "Twelfth round").
    """
    return softmax_attend(_window_logits(q, k, bias, mask, precision), v, precision)


def _window_attention_fwd(q, k, v, bias, mask, precision):
    logits = _window_logits(q, k, bias, mask, precision)
    e = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    p = e / jnp.sum(e, axis=-1, keepdims=True)
    out = jnp.einsum("bwhnm,bwhmd->bwhnd", p.astype(v.dtype), v, precision=precision)
    return out, (q, k, v, p, out, mask)


def _window_attention_bwd(precision, res, g):
    q, k, v, p, out, mask = res
    mm = functools.partial(jnp.einsum, precision=precision)
    delta = jnp.sum(g.astype(jnp.float32) * out.astype(jnp.float32), axis=-1, keepdims=True)
    ds = p * (mm("bwhnd,bwhmd->bwhnm", g, v).astype(jnp.float32) - delta)
    dq = mm("bwhnm,bwhmd->bwhnd", ds.astype(k.dtype), k)
    q_t, g_t = jax.lax.optimization_barrier((jnp.swapaxes(q, -1, -2), jnp.swapaxes(g, -1, -2)))
    dk_t = mm("bwhdn,bwhnm->bwhdm", q_t, ds.astype(q.dtype))
    dv_t = mm("bwhdn,bwhnm->bwhdm", g_t, p.astype(g.dtype))
    dk_t, dv_t = jax.lax.optimization_barrier((dk_t, dv_t))
    lead = int(np.prod(ds.shape[:-3]))
    dbias = jnp.matmul(jnp.ones((1, lead), ds.dtype), ds.reshape(lead, -1), precision=precision).reshape(ds.shape[-3:])
    return (dq.astype(q.dtype), jnp.swapaxes(dk_t, -1, -2).astype(k.dtype),
            jnp.swapaxes(dv_t, -1, -2).astype(v.dtype), dbias,
            None if mask is None else jnp.zeros_like(mask))


window_attention.defvjp(_window_attention_fwd, _window_attention_bwd)


def window_partition(x: jax.Array, ws: int) -> jax.Array:
    """``[B, H, W, C] -> [B, nW, ws*ws, C]`` (windows and pixels row-major)."""
    b, h, w, c = x.shape
    x = x.reshape(b, h // ws, ws, w // ws, ws, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, (h // ws) * (w // ws), ws * ws, c)


def window_merge(x: jax.Array, ws: int, h: int, w: int) -> jax.Array:
    """Inverse of :func:`window_partition`."""
    b, _, _, c = x.shape
    x = x.reshape(b, h // ws, w // ws, ws, ws, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, h, w, c)


class QKVProjection(nn.Module):
    """[q | k | v] = x W + b (a ``Dense(3C)``: params ``kernel [C, 3C]``, ``bias [3C]``) with the
    attention scale d^-1/2 folded into the q columns of W and b.

    Same result as scaling q afterwards; folding it into the small weight avoids XLA:CPU
    materialising a broadcast scale tensor of the size of q on every call.
    """

    dim: int
    q_scale: float
    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = self.dim
        kernel = self.param("kernel", kaiming_normal, (c, 3 * c), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (3 * c,), jnp.float32)
        col = jnp.concatenate([jnp.full((c,), self.q_scale, jnp.float32), jnp.ones((2 * c,), jnp.float32)])
        w = (kernel * col).astype(self.dtype)
        return jnp.matmul(x.astype(self.dtype), w, precision=self.precision) + (bias * col).astype(self.dtype)


class WindowAttention(nn.Module):
    """Multi-head self-attention inside windows ``[B, nW, N, C]`` with relative-position bias."""

    dim: int
    num_heads: int
    window: int
    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array, mask: np.ndarray | None) -> jax.Array:
        b, nw, n, c = x.shape
        hd = c // self.num_heads
        table = self.param("rel_pos_bias", nn.initializers.normal(0.02),
                           ((2 * self.window - 1) ** 2, self.num_heads), jnp.float32)
        idx = relative_position_index(self.window)
        bias = table[idx.reshape(-1)].reshape(n, n, self.num_heads).transpose(2, 0, 1)
        qkv = QKVProjection(c, hd ** -0.5, self.dtype, self.precision, name="qkv")(x)
        qkv = qkv.reshape(b, nw, n, 3, self.num_heads, hd)
        # Head-major layout [3, B, nW, heads, N, d]: the two attention matmuls then need no
        # further transposes (several times faster on CPU than contracting in token-major layout).
        q, k, v = qkv.transpose(3, 0, 1, 4, 2, 5)
        if mask is not None:
            # XLA:CPU materialises a *constant* operand broadcast to the full [B, nW, heads, N, N]
            # logits on every call; tying the mask to a runtime value (exactly +0) keeps it a
            # small [nW, N, N] operand that is broadcast inside the fused attention kernel.
            mask = jnp.asarray(mask) + 0.0 * table[0, 0]
        out = window_attention(q, k, v, bias, mask, self.precision)
        out = out.transpose(0, 1, 3, 2, 4).reshape(b, nw, n, c)
        return dense(c, dtype=self.dtype, precision=self.precision, name="proj")(out)


class SwinBlock(nn.Module):
    """Pre-LN (shifted-)window attention block + MLP, both residual."""

    dim: int
    num_heads: int
    window: int = 8
    shift: int = 0
    mlp_ratio: float = 3.0
    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        _, h, w, c = x.shape
        ws, shift = window_config(h, w, self.window, self.shift)
        if h % ws or w % ws:
            raise ValueError(f"SwinBlock: token map {h}x{w} is not divisible by window {ws}")
        y = layer_norm(self.dtype, name="ln1")(x)
        if shift:
            y = jnp.roll(y, (-shift, -shift), axis=(1, 2))
        mask = shifted_window_mask(h, w, ws, shift) if shift else None
        attn = WindowAttention(c, self.num_heads, ws, self.dtype, self.precision, name="attn")
        y = attn(window_partition(y, ws), mask)
        y = window_merge(y, ws, h, w)
        if shift:
            y = jnp.roll(y, (shift, shift), axis=(1, 2))
        x = x + y
        hidden = int(c * self.mlp_ratio)
        return x + Mlp(hidden, c, self.dtype, self.precision, name="mlp")(layer_norm(self.dtype, name="ln2")(x))


class ConvDownsample(nn.Module):
    """C -> 2C at half resolution: [conv3x3 (stride 2, then 1), no bias -> BN -> LeakyReLU(0.01)] x 2."""

    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        c = x.shape[-1]
        x = conv3x3(2 * c, c, stride=2, use_bias=False, dtype=self.dtype, precision=self.precision, name="conv_0")(x)
        x = nn.leaky_relu(batch_norm(train, self.dtype, name="bn_0")(x), 0.01)
        x = conv3x3(2 * c, 2 * c, use_bias=False, dtype=self.dtype, precision=self.precision, name="conv_1")(x)
        return nn.leaky_relu(batch_norm(train, self.dtype, name="bn_1")(x), 0.01)


class SwinEncoder(nn.Module):
    """``num_stages`` stages of ``depth`` Swin blocks (odd blocks shifted by window/2), a conv
    downsample between stages, so a ``[B, H, W, C]`` map ends at ``[B, H/2^(s-1), W/2^(s-1), C 2^(s-1)]``.
    """

    depth: int
    num_stages: int
    num_heads: int
    window: int = 8
    mlp_ratio: float = 3.0
    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        for s in range(self.num_stages):
            c = x.shape[-1]
            for j in range(self.depth):
                x = SwinBlock(c, self.num_heads, self.window, 0 if j % 2 == 0 else self.window // 2,
                              self.mlp_ratio, self.dtype, self.precision, name=f"stage_{s}_block_{j}")(x)
            if s < self.num_stages - 1:
                x = ConvDownsample(self.dtype, self.precision, name=f"stage_{s}_down")(x, train)
        return x
