"""What is exported: the network's flows-only forward pass at one fixed size, both directions in
one call, and (CamFlow+) the builder of each image's basis set from its depth.

Both are written here as plain JAX functions of arrays, with the weights and the static bases
closed over (they become constants of the exported program), so that every converter sees the
same function the :class:`camflow_jax.predictor.Predictor` runs (its ``_forward_impl``, less the
resizing to and from the input size, the confidence maps and the homography fit):

    flows(img1, img2, bases_f, bases_b) -> flow_f, flow_b, coeffs_f, coeffs_b

* ``img1``, ``img2``: ``[B, h, w, 3]`` float32 RGB in 0..255 at the network size; the
  normalisation and the grey average (:func:`camflow_jax.models.preprocess`) run inside;
* ``bases_f``, ``bases_b``: ``[B, N, h, w, 2]`` float32, each image's full basis set in the
  model's order (homography | stochastic | depth): the static bases followed, for CamFlow+, by the
  depth group built from image 1's depth (forward) and image 2's depth (backward);
* flows ``[B, h, w, 2]`` in network pixels (``warp(img2, flow_f) ~ img1``), coefficients
  ``[B, N]`` (``flow = sum_k coeffs_k bases_k``).

    depth_bases(depth, K) -> bases               (CamFlow+ only)

* ``depth`` ``[B, h, w]`` (any global scale; NaN, inf and values <= 0 are invalid), ``K``
  ``[B, 4]`` (fx, fy, cx, cy) in network pixels; returns ``[B, N, h, w, 2]``: the static bases
  then the depth group (:func:`camflow_jax.models.basis_set.with_depth_bases`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax.models import basis_set
from camflow_jax.models.camflow import preprocess
from camflow_jax.models.layers import onnx_form

__all__ = ["ExportSpec", "export_spec", "parse_size", "static_bases_at", "flows_function",
           "depth_bases_function", "FLOW_INPUTS", "FLOW_OUTPUTS", "BASES_INPUTS", "BASES_OUTPUTS"]

#: Names of the flows function's inputs and outputs, in call order.
FLOW_INPUTS = ("img1", "img2", "bases_f", "bases_b")
FLOW_OUTPUTS = ("flow_f", "flow_b", "coeffs_f", "coeffs_b")
#: Names of the depth-bases function's inputs and output.
BASES_INPUTS = ("depth", "K")
BASES_OUTPUTS = ("bases",)


@dataclasses.dataclass(frozen=True)
class ExportSpec:
    """The fixed shapes of one export and the basis layout they follow.

    Attributes:
      height, width: the size the network runs at (a multiple of ``size_multiple``).
      batch: the fixed batch size of every input.
      groups: ``(name, size)`` of each basis group, in basis order.
      depth_sigmas: the depth pyramid's blurs in pixels at this size (CamFlow+), else None.
      model_size: the model's own network size ``(h, w)``.
      size_multiple: what the sides must be multiples of (2^levels x window).
    """

    height: int
    width: int
    batch: int
    groups: tuple[tuple[str, int], ...]
    depth_sigmas: tuple[float, ...] | None
    model_size: tuple[int, int]
    size_multiple: int

    @property
    def num_bases(self) -> int:
        return sum(n for _, n in self.groups)

    @property
    def num_depth(self) -> int:
        return sum(n for g, n in self.groups if g == "depth")

    @property
    def num_static(self) -> int:
        return self.num_bases - self.num_depth

    def flow_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
        """The flows function's inputs by name (float32, static shapes)."""
        b, h, w, n = self.batch, self.height, self.width, self.num_bases
        img = jax.ShapeDtypeStruct((b, h, w, 3), jnp.float32)
        bases = jax.ShapeDtypeStruct((b, n, h, w, 2), jnp.float32)
        return dict(zip(FLOW_INPUTS, (img, img, bases, bases)))

    def bases_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
        """The depth-bases function's inputs by name."""
        return {"depth": jax.ShapeDtypeStruct((self.batch, self.height, self.width), jnp.float32),
                "K": jax.ShapeDtypeStruct((self.batch, 4), jnp.float32)}


def parse_size(text: str) -> tuple[int, int]:
    """``"HxW"`` (e.g. ``"320x576"``) as ``(H, W)``; ValueError naming the expected form."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
    if not m or int(m.group(1)) <= 0 or int(m.group(2)) <= 0:
        raise ValueError(f"--size must be HxW with two positive whole numbers (e.g. 320x576), got {text!r}")
    return int(m.group(1)), int(m.group(2))


def export_spec(predictor, size: tuple[int, int] | None = None, batch: int = 1) -> ExportSpec:
    """The :class:`ExportSpec` of ``predictor``'s model at ``size`` (default: the model's network
    size) and ``batch``; ValueError for a size that is not a multiple of the model's
    ``size_multiple`` or a batch below 1."""
    model = predictor.model
    mult = int(getattr(model, "size_multiple", 1))
    h, w = (predictor.height, predictor.width) if size is None else (int(size[0]), int(size[1]))
    if h <= 0 or w <= 0 or h % mult or w % mult:
        raise ValueError(f"--size {h}x{w} must be a multiple of {mult} on both sides (this model's "
                         f"size_multiple: 2^levels x window); its own network size is "
                         f"{predictor.height}x{predictor.width}")
    if int(batch) < 1:
        raise ValueError(f"--batch must be at least 1, got {batch}")
    groups = tuple((str(g), int(n)) for g, n in zip(model.group_names, model.group_sizes))
    num_depth = sum(n for g, n in groups if g == "depth")
    sigmas = None
    if num_depth:
        cfg = dict(predictor.model_config or {})
        given = cfg.get("depth_sigmas") or dict(cfg.get("bases") or {}).get("depth_sigmas")
        sigmas = basis_set.depth_sigmas(given, w)  # the Predictor's rule, at this width
    return ExportSpec(h, w, int(batch), groups, sigmas, (predictor.height, predictor.width), mult)


def static_bases_at(predictor, spec: ExportSpec) -> np.ndarray:
    """The static bases ``[N_static, h, w, 2]`` at the export size: the predictor's own at its
    size; at another size, regenerated from the model config (ValueError when the checkpoint
    carries static bases of its own that the config does not describe, e.g. imported ones)."""
    own = np.asarray(predictor.static_bases, np.float32)
    if (spec.height, spec.width) == spec.model_size:
        return own
    cfg = dict(predictor.model_config or {})
    if not np.array_equal(basis_set.static_bases(cfg), own):
        raise ValueError(f"this checkpoint carries its own static bases at {spec.model_size[0]}x"
                         f"{spec.model_size[1]}, which its config cannot regenerate at another size: "
                         "export it at its own size (leave out --size)")
    return basis_set.static_bases({**cfg, "height": spec.height, "width": spec.width})


def flows_function(predictor, spec: ExportSpec, onnx: bool = False) -> Callable[..., tuple[jax.Array, ...]]:
    """``flows(img1, img2, bases_f, bases_b) -> (flow_f, flow_b, coeffs_f, coeffs_b)`` (module
    doc): the network in inference mode (BatchNorm's running statistics), flows only, at the
    model's precision policy, weights closed over.

    ``onnx=True``: the same math traced under :func:`camflow_jax.models.layers.onnx_form`, the
    form ONNX Runtime runs fastest (a convolution for every 3x3 conv, a fusable GELU, ``Softmax``);
    what the ONNX export converts. Its values differ from the default form's by float32 rounding
    (docs/export.md, "Speed")."""
    model, variables = predictor.model, predictor.variables
    h, w = spec.height, spec.width

    def flows(img1, img2, bases_f, bases_b):
        with onnx_form(onnx):
            g1 = preprocess(img1, h, w, "rgb")
            g2 = preprocess(img2, h, w, "rgb")
            out = model.apply(variables, g1, g2, bases_f, bases_b, train=False, confidence=False)
        return tuple(out[k].astype(jnp.float32) for k in FLOW_OUTPUTS)

    return flows


def depth_bases_function(predictor, spec: ExportSpec, static: Any = None) -> Callable[..., jax.Array]:
    """``depth_bases(depth, K) -> bases`` (module doc) for a CamFlow+ model: per sample, the
    static bases then the depth group of :func:`camflow_jax.models.basis_set.with_depth_bases`."""
    if not spec.num_depth:
        raise ValueError("the model has no depth basis group: its bases are the static ones alone")
    static = jnp.asarray(static_bases_at(predictor, spec) if static is None else static, jnp.float32)
    sigmas = spec.depth_sigmas

    def depth_bases(depth, K):
        return jax.vmap(lambda d, k: basis_set.with_depth_bases(static, d, k, sigmas))(depth, K)

    return depth_bases
