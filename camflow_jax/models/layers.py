"""Small building blocks shared by the CamFlow modules, with the release's numerics.

Initialization follows docs/design.md, "Initialization" (the released ``init_mode="resnet"``):
- conv and linear weights: Kaiming normal, fan-in, gain sqrt(2): std = sqrt(2 / fan_in)
  (PyTorch ``kaiming_normal_`` draws an untruncated normal);
- linear biases: 0; conv biases keep PyTorch's default U(-1/sqrt(fan_in), 1/sqrt(fan_in));
- LayerNorm / BatchNorm: scale 1, bias 0.

Numerics that differ from Flax defaults and matter for weight compatibility:
- 3x3 convs pad (1, 1) on both sides (``'SAME'`` would pad (0, 1) for stride 2 on even sizes);
- GELU is the exact erf form (``nn.gelu`` defaults to the tanh approximation);
- LayerNorm eps 1e-5; BatchNorm eps 1e-5 with PyTorch momentum 0.1 (= Flax momentum 0.9).

Every dot and convolution takes ``precision`` (None: the backend's default; the model config's
policy decides, :mod:`camflow_jax.models.precision`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from collections.abc import Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

Dtype = Any

kaiming_normal = nn.initializers.variance_scaling(2.0, "fan_in", "normal")
LN_EPS = 1e-5
BN_EPS = 1e-5
BN_MOMENTUM = 0.9  # Flax convention: running = m * running + (1 - m) * batch (PyTorch 0.1)
PAD1 = ((1, 1), (1, 1))


_ONNX_FORM = contextvars.ContextVar("camflow_jax_onnx_form", default=False)


@contextlib.contextmanager
def onnx_form(enabled: bool = True) -> Iterator[None]:
    """While tracing inside this context, the modules write a few steps in the form ONNX Runtime
    runs fastest, with the same math (the ONNX export, :mod:`camflow_jax.export.network`; never
    used for training or by the Predictor):

    * :func:`gelu` divides by sqrt 2 and multiplies by 1/2 last, the pattern ONNX Runtime fuses
      into one ``Gelu`` kernel (it does not fuse the multiply-by-1/sqrt 2 form);
    * :class:`Conv3x3` is one convolution for every channel count (ONNX ``Conv``), not the
      elementwise forms of thin convolutions that suit XLA;
    * :func:`camflow_jax.models.swin.softmax_attend` normalises with ``jax.nn.softmax`` (ONNX
      ``Softmax``) before the product.

    Each differs from the default form by float32 rounding only (tests/export/test_export.py holds the
    exported flows to the JAX network's).
    """
    token = _ONNX_FORM.set(bool(enabled))
    try:
        yield
    finally:
        _ONNX_FORM.reset(token)


def onnx_form_active() -> bool:
    """Whether :func:`onnx_form` is in effect (read at trace time)."""
    return _ONNX_FORM.get()


def gelu(x: jax.Array) -> jax.Array:
    """Exact GELU x * Phi(x) = x/2 * (1 + erf(x / sqrt 2)), the formula of ``torch.nn.GELU()``.

    Written with ``lax.erf`` rather than ``nn.gelu(approximate=False)``, which evaluates
    ``erfc`` through two branches (a polynomial and an exp-rational) on every element: the
    erf form is cheaper on CPU and agrees with it to float32 rounding (at most 1e-6 apart on
    [-10, 10]).
    """
    if onnx_form_active():
        return x * (1.0 + jax.lax.erf(x / jnp.asarray(1.4142135623730951, x.dtype))) * jnp.asarray(0.5, x.dtype)
    return 0.5 * x * (1.0 + jax.lax.erf(x * 0.7071067811865476))


def torch_conv_bias_init(fan_in: int):
    """PyTorch's default conv bias init U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def _conv3x3(x: jax.Array, kernel: jax.Array, stride: int = 1, precision: Any = None) -> jax.Array:
    return jax.lax.conv_general_dilated(x, kernel, (stride, stride), PAD1,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=precision)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def conv3x3_s1(x: jax.Array, kernel: jax.Array, precision: Any = None) -> jax.Array:
    """3x3 convolution, stride 1, zero padding 1: ``x [B, H, W, in]``, ``kernel [3, 3, in, out]``;
    ``precision`` that of all three convolutions (forward and both gradients).

    The forward and the kernel's gradient are XLA's. The input's gradient is written out as the
    forward convolution of the output's gradient with the kernel flipped and its channel axes
    swapped: the same sums, which XLA:CPU runs faster than its own transposed convolution
    (1.1-3x in micro-benchmarks at the mask net's full-resolution shapes; docs/performance.md,
    "Training").
    """
    return _conv3x3(x, kernel, 1, precision)


def _conv3x3_s1_fwd(x, kernel, precision):
    return _conv3x3(x, kernel, 1, precision), (x, kernel)


def _conv3x3_s1_bwd(precision, res, g):
    x, kernel = res
    dx = _conv3x3(g, kernel[::-1, ::-1].transpose(0, 1, 3, 2), 1, precision)
    dk = jax.vjp(lambda k: _conv3x3(x, k, 1, precision), kernel)[1](g)[0]
    return dx, dk


conv3x3_s1.defvjp(_conv3x3_s1_fwd, _conv3x3_s1_bwd)


class Conv3x3(nn.Module):
    """3x3 convolution, zero padding 1 on every side (PyTorch ``padding=1``), stride 1 or 2.

    Parameters are those of ``nn.Conv`` (``kernel`` HWIO ``[3, 3, in, out]``, ``bias``) with
    the release's initialization. Thin convolutions get a cheaper exact formulation, because
    XLA's CPU convolution is slow for them:
      - one input channel: y = sum over the 9 taps of shifted(x) * k_tap (elementwise);
      - one output channel (stride 1): t = x @ K with K ``[in, 9]`` (one column per tap), then
        y = sum over taps of shifted(t_tap).
    """

    features: int
    in_features: int
    stride: int = 1
    use_bias: bool = True
    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cin, cout, s = self.in_features, self.features, self.stride
        if x.shape[-1] != cin:
            raise ValueError(f"Conv3x3: expected {cin} input channels, got {x.shape[-1]}")
        kernel = self.param("kernel", kaiming_normal, (3, 3, cin, cout), jnp.float32).astype(self.dtype)
        x = x.astype(self.dtype)
        b, h, w, _ = x.shape
        ho, wo = (h - 1) // s + 1, (w - 1) // s + 1
        if onnx_form_active():
            y = _conv3x3(x, kernel, s, self.precision)
        elif cin == 1:
            xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
            y = sum(xp[:, i:i + s * (ho - 1) + 1:s, j:j + s * (wo - 1) + 1:s] * kernel[i, j, 0]
                    for i in range(3) for j in range(3))
        elif cout == 1 and s == 1:
            taps = jnp.matmul(x, kernel[..., 0].reshape(9, cin).T, precision=self.precision)  # [B, H, W, 9]
            tp = jnp.pad(taps, ((0, 0), (1, 1), (1, 1), (0, 0)))
            y = sum(tp[:, i:i + h, j:j + w, 3 * i + j:3 * i + j + 1] for i in range(3) for j in range(3))
        elif s == 1:
            y = conv3x3_s1(x, kernel, self.precision)
        else:
            y = _conv3x3(x, kernel, s, self.precision)
        if self.use_bias:
            bias = self.param("bias", torch_conv_bias_init(9 * cin), (cout,), jnp.float32)
            y = y + bias.astype(self.dtype)
        return y


def conv3x3(features: int, in_features: int, *, stride: int = 1, use_bias: bool = True,
            dtype: Dtype = jnp.float32, precision: Any = None, name: str | None = None) -> Conv3x3:
    """3x3 convolution with PyTorch padding=1 semantics and the release's initialization."""
    return Conv3x3(features, in_features, stride, use_bias, dtype, precision, name=name)


def dense(features: int, *, use_bias: bool = True, dtype: Dtype = jnp.float32, precision: Any = None,
          name: str | None = None) -> nn.Dense:
    """Linear layer: Kaiming-normal (fan-in) weight, zero bias."""
    return nn.Dense(features, use_bias=use_bias, dtype=dtype, precision=precision, kernel_init=kaiming_normal,
                    bias_init=nn.initializers.zeros, name=name)


def layer_norm(dtype: Dtype = jnp.float32, name: str | None = None) -> nn.LayerNorm:
    return nn.LayerNorm(epsilon=LN_EPS, dtype=dtype, name=name)


def batch_norm(train: bool, dtype: Dtype = jnp.float32, name: str | None = None) -> nn.BatchNorm:
    return nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPS,
                        dtype=dtype, name=name)


class Mlp(nn.Module):
    """fc1 -> exact GELU -> fc2 (hidden width given)."""

    hidden: int
    out: int
    dtype: Dtype = jnp.float32
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = dense(self.hidden, dtype=self.dtype, precision=self.precision, name="fc1")(x)
        x = gelu(x)
        return dense(self.out, dtype=self.dtype, precision=self.precision, name="fc2")(x)
