"""CamFlow / CamFlow+ network (docs/design.md, "Network"): both directions in one batched pass.

    F_1, F_2        = ShallowFeatures(I_1), ShallowFeatures(I_2)            (one call, batch 2B)
    w_ab, w_ba      = MET([F_1; F_2] -> [F_2; F_1], bases)                   (batch 2B)
    m_ab            = sum_k w_ab,k b_a,k,     m_ba = sum_k w_ba,k b_b,k
    s_ab            = MaskNet([F_1, warp(F_2, m_ab)]),  s_ba = MaskNet([F_2, warp(F_1, m_ba)])
    t_ab, t_ba      = the depth-group part of m_ab, m_ba (zeros without a depth group)

Bases are inputs: static bases shared by the batch ``[N, H, W, 2]`` or per-sample bases
``[B, N, H, W, 2]``; ``bases_b`` (backward direction, e.g. depth bases from image 2's depth)
defaults to ``bases``. The basis order must match ``group_sizes`` (homography | stochastic |
depth for CamFlow+).
"""

from __future__ import annotations

from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax.geometry import device
from camflow_jax.models.config import DEPTH_GROUP, GROUP_NAMES, ModelConfig
from camflow_jax.models.features import ShallowFeatures
from camflow_jax.models.layers import onnx_form_active
from camflow_jax.models.mask import MaskNet
from camflow_jax.models.met import MotionEstimationTransformer, combine_directional

#: The most a pair's contrast is stretched by :func:`apply_contrast_floor` (a near-uniform pair
#: would otherwise have its noise amplified without bound).
MAX_CONTRAST_GAIN = 10.0

# Per-channel statistics of the release, applied to its stored (OpenCV, BGR) channel order.
IMAGE_MEAN_BGR = (118.93, 113.97, 102.60)
IMAGE_STD_BGR = (69.85, 68.81, 72.45)


class CamFlow(nn.Module):
    """The CamFlow (2 groups, 24 bases) / CamFlow+ (3 groups, 36 bases) network.

    ``apply(variables, gray1, gray2, bases, bases_b=None, train=False, confidence=True)`` with
    normalized gray images ``[B, H, W, 1]`` (H, W multiples of ``size_multiple``); returns a
    dict with flow_f, flow_b ``[B, H, W, 2]``; logvar_f, logvar_b ``[B, H, W, 1]``; coeffs_f,
    coeffs_b ``[B, N]``; trans_f, trans_b ``[B, H, W, 2]``; feat1, feat2 ``[B, H, W, 1]``.
    In training mode (``train=True``) BatchNorm uses batch statistics over both images and
    both directions and ``batch_stats`` must be mutable.

    ``confidence=False`` is the flows-only path: the full-resolution mask net (about a third of
    the forward's time at 320x576) is skipped and logvar_f / logvar_b are left out of the dict.
    Nothing else depends on the mask net, so the other outputs are the same. The mask net's
    parameters must still exist in ``variables`` (``init`` with the default ``confidence=True``).

    ``config.precision`` is the precision policy (:mod:`camflow_jax.models.precision`): 'exact'
    (float32, every dot and convolution at HIGHEST), 'default' (float32 at the backend's default
    precision: TF32 on recent NVIDIA GPUs) or 'bfloat16' (matmuls, convolutions and norms in
    bfloat16). Parameters stay float32 (cast where used), and the bases, the flows (their sum at
    HIGHEST), the warps and every output are float32.
    """

    config: ModelConfig = ModelConfig()

    @property
    def group_sizes(self) -> tuple[int, ...]:
        return self.config.group_sizes

    @property
    def group_names(self) -> tuple[str, ...]:
        return self.config.group_names

    @property
    def num_bases(self) -> int:
        return self.config.num_bases

    @property
    def size_multiple(self) -> int:
        """H and W must be multiples of this (2^levels * window)."""
        return self.config.size_multiple

    def group_slice(self, name: str) -> slice | None:
        """Slice of the basis axis holding group ``name`` (None if absent)."""
        start = 0
        for gname, n in zip(self.group_names, self.group_sizes):
            if gname == name:
                return slice(start, start + n)
            start += n
        return None

    def _check_inputs(self, gray1, gray2, bases, bases_b):
        if gray1.ndim != 4 or gray1.shape[-1] != 1:
            raise ValueError(f"CamFlow: gray1 must be [B, H, W, 1], got shape {gray1.shape}")
        if gray2.shape != gray1.shape:
            raise ValueError(f"CamFlow: gray2 shape {gray2.shape} differs from gray1 {gray1.shape}")
        b, h, w, _ = gray1.shape
        m = self.size_multiple
        if h % m or w % m:
            raise ValueError(f"CamFlow: H and W must be multiples of {m}, got {h}x{w} "
                             f"(resize with camflow_jax.models.preprocess)")
        for name, bs in (("bases", bases), ("bases_b", bases_b)):
            if bs is None:
                continue
            if bs.ndim not in (4, 5) or bs.shape[-3:] != (h, w, 2):
                raise ValueError(f"CamFlow: {name} must be [N, {h}, {w}, 2] or [B, N, {h}, {w}, 2], "
                                 f"got shape {bs.shape}")
            if bs.shape[-4] != self.num_bases:
                raise ValueError(f"CamFlow: {name} has {bs.shape[-4]} bases but the model's "
                                 f"group_sizes {tuple(self.group_sizes)} need {self.num_bases}")
            if bs.ndim == 5 and bs.shape[0] != b:
                raise ValueError(f"CamFlow: per-sample {name} has batch {bs.shape[0]}, images have {b}")

    @staticmethod
    def _directional_bases(bases, bases_b, b):
        """[1, N, H, W, 2] when both directions share one static set, else [2B, N, H, W, 2]."""
        if bases_b is None:
            if bases.ndim == 4:
                return bases[None]
            return jnp.concatenate([bases, bases], axis=0)

        def per_sample(x):
            return x if x.ndim == 5 else jnp.broadcast_to(x[None], (b,) + x.shape)

        return jnp.concatenate([per_sample(bases), per_sample(bases_b)], axis=0)

    @nn.compact
    def __call__(self, gray1: jax.Array, gray2: jax.Array, bases: jax.Array,
                 bases_b: jax.Array | None = None, train: bool = False,
                 confidence: bool = True, forward_only: bool = False) -> dict[str, jax.Array]:
        """``forward_only``: the image-1 -> image-2 direction alone (no ``*_b`` outputs; ``bases_b``
        must be None): the shallow features of both images, then the motion transformer (and
        the mask net) on the B forward rows instead of 2B, about half the network's work. The
        same parameters and the same forward outputs as the two-direction pass."""
        self._check_inputs(gray1, gray2, bases, bases_b)
        if self.config.contrast_floor > 0:
            gray1, gray2 = apply_contrast_floor(gray1, gray2, self.config.contrast_floor)
        if forward_only and bases_b is not None:
            raise ValueError("CamFlow: forward_only takes the forward bases alone (bases_b=None)")
        b = gray1.shape[0]
        dtype, prec = self.config.jnp_dtype, self.config.dot_precision
        gray = jnp.concatenate([gray1, gray2], axis=0).astype(dtype)
        feats = ShallowFeatures(dtype=dtype, precision=prec, name="features")(gray, train)  # [F1; F2]
        met = MotionEstimationTransformer(self.config, name="met")
        if forward_only:
            dir_bases = bases if bases.ndim == 5 else bases[None]
            coeffs = met(feats[:b], dir_bases, train, f_b=feats[b:])
        else:
            if onnx_form_active() and bases_b is not None and bases.ndim == bases_b.ndim == 5:
                # The export's form (layers.onnx_form): each direction's sum over its own bases,
                # without first copying both sets into one [2B, N, H, W, 2] array.
                dir_bases = (bases, bases_b)
            else:
                dir_bases = self._directional_bases(bases, bases_b, b)
            coeffs = met(feats, dir_bases, train)
        flow = combine_directional(coeffs, dir_bases)

        feats32 = feats.astype(jnp.float32)
        if confidence:
            if forward_only:  # [F1] and [warp(F2, m_ab)]
                refs, warped = feats32[:b], device.warp(feats32[b:], flow)
            else:  # [F1; F2] and [warp(F2, m_ab); warp(F1, m_ba)]
                refs, warped = feats32, device.warp(jnp.roll(feats32, b, axis=0), flow)
            logvar = MaskNet(dtype=dtype, precision=prec, name="mask_net")(jnp.concatenate([refs, warped], axis=-1))

        sl = self.group_slice(DEPTH_GROUP)
        if sl is None:
            trans = jnp.zeros_like(flow)
        else:
            sliced = tuple(x[:, sl] for x in dir_bases) if isinstance(dir_bases, tuple) else dir_bases[:, sl]
            trans = combine_directional(coeffs[:, sl], sliced)

        out = {
            "flow_f": flow[:b], "coeffs_f": coeffs[:b], "trans_f": trans[:b],
            "feat1": feats32[:b], "feat2": feats32[b:],
        }
        if confidence:
            out["logvar_f"] = logvar[:b]
        if not forward_only:
            out.update(flow_b=flow[b:], coeffs_b=coeffs[b:], trans_b=trans[b:])
            if confidence:
                out["logvar_b"] = logvar[b:]
        return out


def group_layout(num_homography: int, num_stochastic: int, num_depth: int) -> tuple[list[int], list[str]]:
    """``(group_sizes, group_names)`` of a [homography | stochastic | depth] basis set; groups
    of size 0 are left out (e.g. ``(8, 0, 0)`` -> ``([8], ['homography'])``)."""
    counts = (int(num_homography), int(num_stochastic), int(num_depth))
    if any(n < 0 for n in counts):
        raise ValueError(f"basis counts must be >= 0, got {counts}")
    pairs = [(n, name) for n, name in zip(counts, GROUP_NAMES) if n]
    if not pairs:
        raise ValueError("the model needs at least one basis group")
    return [n for n, _ in pairs], [name for _, name in pairs]


def resolve_config(model_config: Mapping[str, Any] | Any) -> dict[str, Any]:
    """A model config mapping validated and completed through :class:`ModelConfig`; returns a
    plain JSON-friendly dict. Keys that are not architecture fields (``height``, ``width``,
    ``bases``) are kept untouched and ignored by the network; an older ``dtype`` key is read into
    ``precision`` (:meth:`ModelConfig.from_dict`) and dropped."""
    cfg = ModelConfig.from_dict(model_config)
    extra = model_config.to_dict() if hasattr(model_config, "to_dict") else dict(model_config)
    extra.pop("dtype", None)
    return {**extra, **cfg.to_dict()}


def build_model(model_config: ModelConfig | Mapping[str, Any] | Any) -> CamFlow:
    """:class:`CamFlow` from a :class:`ModelConfig` or a config mapping (``model.json``'s)."""
    if not isinstance(model_config, ModelConfig):
        model_config = ModelConfig.from_dict(model_config)
    return CamFlow(model_config)


def init_variables(model: CamFlow, key: jax.Array, height: int | None = None, width: int | None = None,
                   batch: int = 1, identity_motion: bool = False) -> dict[str, Any]:
    """``{'params', 'batch_stats'}`` for ``model``, drawn with the release's initialization.

    Same distributions as ``model.init`` (docs/design.md, "Initialization": Kaiming-normal
    fan-in weights, zero linear biases, PyTorch-default uniform conv biases, unit norms,
    LayerScale 1e-6 (1e-5 for dims <= 24), N(0, 0.02) query tokens and position-bias tables;
    BatchNorm running mean 0, var 1), but sampled with numpy from a Generator seeded by
    ``key``'s data: no XLA compile (flax's ``init`` compiles one threefry kernel per
    parameter, a long compile on CPU). The parameter shapes do not depend on the input size;
    ``height``/``width`` are only checked. Deterministic for a given key.

    ``identity_motion=True`` zeroes the output layer of every coefficient head, so the initial
    motion is exactly zero (identity warps at every level). With the release's initialization
    the untrained network predicts 30-70 px flows on a 128-px-wide input, and its coarse-to-fine
    warps start far off; training from scratch converges much faster from identity.
    """
    m = model.size_multiple
    h = m if height is None else int(height)
    w = m if width is None else int(width)
    if h % m or w % m:
        raise ValueError(f"init_variables: {h}x{w} is not a multiple of {m}")
    gray = jax.ShapeDtypeStruct((batch, m, m, 1), jnp.float32)
    bases = jax.ShapeDtypeStruct((model.num_bases, m, m, 2), jnp.float32)
    shapes = jax.eval_shape(lambda k, g, bs: model.init(k, g, g, bs), key, gray, bases)
    raw = key if getattr(key, "dtype", None) == jnp.uint32 else jax.random.key_data(key)  # legacy raw keys too
    seed = np.asarray(raw, np.uint32).ravel().tolist()
    rng = np.random.default_rng(seed)

    def leaf(path, x, parent):
        name = path[-1]
        shape = tuple(x.shape)
        if identity_motion and len(path) >= 3 and path[-3].startswith("head_") and path[-2] == "out":
            return np.zeros(shape)
        if name == "kernel":  # Dense (in, out) or Conv (kh, kw, in, out): fan-in = prod(shape[:-1])
            return rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[:-1]))
        if name == "bias":
            kernel = parent.get("kernel")
            if kernel is not None and len(kernel.shape) == 4:  # conv: U(+-1/sqrt(fan_in))
                bound = 1.0 / np.sqrt(np.prod(kernel.shape[:-1]))
                return rng.uniform(-bound, bound, shape)
            return np.zeros(shape)  # linear, LayerNorm, BatchNorm
        if name == "scale":
            return np.ones(shape)
        if name in ("gamma_1", "gamma_2"):
            return np.full(shape, 1e-5 if shape[0] <= 24 else 1e-6)
        if name.startswith("tokens_") or name == "rel_pos_bias":
            return 0.02 * rng.standard_normal(shape)
        raise ValueError(f"init_variables: no rule for parameter {'/'.join(path)}")

    def walk(tree, path, fn):
        return {k: walk(v, path + (k,), fn) if isinstance(v, Mapping) else
                jnp.asarray(fn(path + (k,), v, tree), jnp.float32) for k, v in tree.items()}

    params = walk(shapes["params"], (), leaf)
    stats = walk(shapes.get("batch_stats", {}), (),
                 lambda p, x, _: np.zeros(x.shape) if p[-1] == "mean" else np.ones(x.shape))
    return {"params": params, "batch_stats": stats}


def apply_contrast_floor(gray1: jax.Array, gray2: jax.Array, floor: float) -> tuple[jax.Array, jax.Array]:
    """Each pair of normalised grey images (:func:`preprocess`; ``[B, H, W, 1]``) with a spread
    below ``floor``, stretched to it: with ``m`` and ``s`` the mean and standard deviation of
    the pair's pixels (both images together) and the gain ``g = clip(floor / s, 1,``
    :data:`MAX_CONTRAST_GAIN` ``)``, ``gray -> (gray - m) g + m / g``.

    The network was trained on images of the release's mean and spread; a dark pair (a night
    scene, an underexposed clip) reaches it as a narrow band far below that mean, and its
    estimate degrades to about no motion at all (docs/network.md, "Dark and flat pairs"). The
    stretch widens the band and moves its mean towards the release's by the same gain. Both
    images get one map, so brightness constancy between them holds; a pair whose spread is at
    least ``floor`` is unchanged (``g = 1``)."""
    both = jnp.concatenate([gray1, gray2], axis=-1).astype(jnp.float32)
    m = jnp.mean(both, axis=(1, 2, 3), keepdims=True)
    s = jnp.sqrt(jnp.mean(jnp.square(both - m), axis=(1, 2, 3), keepdims=True))
    g = jnp.clip(floor / jnp.maximum(s, 1e-6), 1.0, MAX_CONTRAST_GAIN)
    # where(): a pair at or above the floor keeps its values bit for bit
    stretch = lambda x: jnp.where(g > 1.0, (x - m) * g + m / g, x).astype(x.dtype)  # noqa: E731
    return stretch(gray1), stretch(gray2)


def count_params(params: Any) -> int:
    """Number of scalars in a parameter pytree."""
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


def preprocess(images: Any, height: int, width: int, channel_order: str = "rgb") -> jax.Array:
    """Network input from images: normalize per channel, average to gray, resize.

    See docs/design.md, "Input".

    Args:
      images: ``[B, H0, W0, 3]`` (or ``[H0, W0, 3]``) uint8 or float in 0..255.
      height, width: network size (multiples of 64 for :class:`CamFlow`).
      channel_order: 'rgb' (the library's convention) or 'bgr' (OpenCV arrays). The release
        normalized OpenCV-loaded BGR images with mean (118.93, 113.97, 102.60) and std
        (69.85, 68.81, 72.45) in that stored order; we apply each statistic to the same colour.
    Returns:
      float32 ``[B, height, width, 1]`` (``[height, width, 1]`` for a single image):
      gray = mean_c((I_c - mean_c) / std_c), resized bilinearly (half-pixel centres, no
      antialiasing; both steps are affine so their order does not matter).
    """
    if channel_order not in ("rgb", "bgr"):
        raise ValueError(f"preprocess: channel_order must be 'rgb' or 'bgr', got {channel_order!r}")
    if not isinstance(images, jax.Array):  # host data: validate here (jax arrays may be traced)
        arr = np.asarray(images)
        if arr.dtype.kind not in "uif":
            raise ValueError(f"preprocess: images must be numeric, got dtype {arr.dtype}")
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            raise ValueError("preprocess: images contain NaN or infinite values")
        images = arr
    x = jnp.asarray(images)
    if x.ndim not in (3, 4) or x.shape[-1] != 3:
        raise ValueError(f"preprocess: images must be [B, H, W, 3] or [H, W, 3], got shape {x.shape}")
    if int(height) <= 0 or int(width) <= 0:
        raise ValueError(f"preprocess: bad target size {height}x{width}")
    x = x.astype(jnp.float32)
    mean = np.array(IMAGE_MEAN_BGR, np.float32)
    std = np.array(IMAGE_STD_BGR, np.float32)
    if channel_order == "rgb":
        mean, std = mean[::-1], std[::-1]
    if onnx_form_active():
        # The same affine map as one product with a [3, 1] weight (ONNX MatMul): the export's
        # form (layers.onnx_form); six full-size elementwise kernels and three slices otherwise.
        c = x.shape[-1]
        weight = (1.0 / (c * std.astype(np.float64))).astype(np.float32)[:, None]
        offset = np.float32(-np.sum(mean.astype(np.float64) / std.astype(np.float64)) / c)
        gray = jnp.matmul(x, weight) + offset
    else:
        gray = device.channel_mean((x - mean) / std)
    if gray.shape[-3:-1] != (height, width):
        gray = device.resize_image(gray, int(height), int(width))
    return gray
