"""Inference on image pairs of any size and orientation: :class:`Predictor`.

    pred = Predictor.from_checkpoint("checkpoints/camflow")
    out = pred(img1, img2)                       # uint8 RGB [H0, W0, 3] each
    out["flow_f"]                                # [H0, W0, 2]: warp(img2, flow_f) ~ img1
    out["homography"]                            # [3, 3], image-1 pixels -> image-2 pixels
    out["plausibility"]["plausible"]             # False: do not trust it ("reasons" say why)

Pipeline for one pair (docs/design.md, "Inference"):

1. Portrait input (H0 > W0): both images (and depths) are rotated 90° counter-clockwise
   (``np.rot90``) to landscape. A pixel (x, y) lands at (x', y') = (y, W0 - 1 - x), so the
   intrinsics become (fx', fy', cx', cy') = (fy, fx, cy, W0 - 1 - cx).
2. Images are normalized, averaged to gray and resized to the network size (``height`` x
   ``width`` from the model config, default 320 x 576) by :func:`camflow_jax.models.preprocess`.
3. CamFlow+ (a ``depth`` basis group): each depth map is resized (bilinear, half-pixel centres,
   invalid values filled with the median first) to the network size, K is rescaled with the same
   convention (:func:`camflow_jax.geometry.device.resize_intrinsics`: fx' = fx s_x, cx' = (cx + 0.5) s_x
   - 0.5), and depth-translational bases built from image 1's depth (forward) and image 2's
   depth (backward) are appended to the static bases. Without depth a constant depth is used
   (its bases fall in the homography span: CamFlow), built once per size and K, as any constant depth.
4. The network runs once for both directions; flows are resized back to the (rotated) input
   size with :func:`camflow_jax.geometry.device.resize_flow` (align-corners bilinear, u scaled by
   W0/w and v by H0/h — the release's convention), log-variances likewise (unscaled).
5. Portrait: fields are rotated back (``np.rot90(k=-1)``) and each vector (u', v') measured in
   the rotated frame becomes (u, v) = (-v', u') in the original frame; the homography is
   conjugated with the rotation. (The reference code got this sign wrong.)
6. The homography is a least-squares fit (:func:`camflow_jax.geometry.device.fit_homography_strided`)
   of flow_f, at every pixel of a stride that keeps at least the network's own number of points
   (:func:`camflow_jax.geometry.device.homography_stride`; exact for a homography flow).

Steps 2–4 are one ``jax.jit`` function, compiled once per input shape. Across processes, the traced
program is kept as a ``jax.export`` artifact and the compiled one in JAX's persistent compilation
cache, in a per-user folder (:mod:`camflow_jax.compilation`; ``CAMFLOW_JAX_NO_CACHE=1`` turns that
off): a fresh process running a model at a size it ran before neither traces nor compiles.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import os
import warnings
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax import refine as refine_lib
from camflow_jax.compilation import cache
from camflow_jax.compilation.exported import ExportedJit
from camflow_jax.compilation.memo import BoundedMemo
from camflow_jax.geometry import device, host, photometric, plausibility
from camflow_jax.geometry.checks import check_depth, intrinsics_problem
from camflow_jax.io.cpus import usable_cpus
from camflow_jax.models import basis_set, checkpoint
from camflow_jax.models import precision as precision_lib
from camflow_jax.models.camflow import DEPTH_GROUP, preprocess
from camflow_jax.refine.pairs import PairRefiner

__all__ = ["Predictor", "default_intrinsics", "rotate_to_landscape", "flow_from_rotated", "homography_from_rotated"]

DEFAULT_SIZE = (320, 576)
#: Pairs per call of :meth:`Predictor.predict_batch` by default.
BATCH_SIZE = 8


# ----------------------------------------------------------------------------- rotation maths
def default_intrinsics(height: int, width: int) -> np.ndarray:
    """The intrinsics ``[fx, fy, cx, cy]`` a depth model assumes for a ``height x width`` image
    given none: a focal length of the longer side (a 53 degree field of view across it) and the
    principal point at the centre."""
    f = max(height, width)
    return np.array([f, f, (width - 1) / 2.0, (height - 1) / 2.0], np.float32)


def rotate_to_landscape(x: np.ndarray) -> np.ndarray:
    """``np.rot90`` (counter-clockwise) of ``[H, W, ...]``: pixel (x, y) -> (y, W - 1 - x)."""
    return np.ascontiguousarray(np.rot90(np.asarray(x), k=1, axes=(0, 1)))


def flow_from_rotated(flow_rot: np.ndarray) -> np.ndarray:
    """A flow estimated on :func:`rotate_to_landscape`-d images, expressed on the original grid.

    Positions rotate back (``rot90(k=-1)``) and vectors transform with the inverse rotation:
    original (u, v) = (-v', u').
    """
    f = np.rot90(np.asarray(flow_rot), k=-1, axes=(0, 1))
    return np.ascontiguousarray(np.stack([-f[..., 1], f[..., 0]], axis=-1))


def _rotation_matrix(width: int) -> np.ndarray:
    """R with R (x, y, 1) = (y, W - 1 - x, 1): original -> rotated pixel coordinates."""
    return np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, width - 1.0], [0.0, 0.0, 1.0]])


def homography_from_rotated(H_rot: np.ndarray, width: int) -> np.ndarray:
    """Homography in original pixel coords from one estimated on rotated images:
    ``R^-1 H_rot R`` (``width`` = the original image's width)."""
    R = _rotation_matrix(width)
    H = np.linalg.inv(R) @ np.asarray(H_rot, np.float64) @ R
    return H / H[2, 2]


def _rotate_intrinsics(K, width: int) -> np.ndarray:
    fx, fy, cx, cy = (float(v) for v in K)
    return np.array([fy, fx, cy, width - 1.0 - cx], np.float32)


#: Largest factor by which an input (turned landscape) may be wider than the network's aspect
#: ratio (:meth:`Predictor.check_aspect`); the shipped model's network is 2:1, so up to 4:1.
#: Measured on central crops of 4 synthetic RE pairs (seed 7, 576 wide, docs/estimation.md):
#: mean refined EPE 1.6 px at 2:1, 3.9 at 4:1, 6.5 at 6:1, 9.0 at 8:1.
MAX_SQUASH = 2.0


# ----------------------------------------------------------------------------- input checks
#: Float images may leave 0..255 by this much (resampling overshoot, e.g. bicubic resizing).
FLOAT_SLACK = 1.0


def _check_image(img, name: str) -> np.ndarray:
    """``img`` as ``[H, W, 3]`` after the checks of :meth:`Predictor.__call__` (ValueError
    naming ``name``): uint8, unsigned or non-negative signed integers up to 255, or float in
    0..255 (within :data:`FLOAT_SLACK`). A float image whose values all lie in [0, 1] (and not
    all 0) is refused: read as 0..255 it would be almost black; scale it by 255 first."""
    a = np.asarray(img)
    if a.dtype.kind not in "uif":
        raise ValueError(f"{name} must be a numeric image, got dtype {a.dtype}")
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    if a.ndim == 2:
        a = np.repeat(a[..., None], 3, axis=-1)
    if a.ndim != 3 or a.shape[-1] != 3:
        raise ValueError(f"{name} must be [H, W, 3] (or gray [H, W]), got shape {np.shape(img)}")
    if a.shape[0] < 2 or a.shape[1] < 2:
        raise ValueError(f"{name} is too small: {a.shape[:2]}")
    if a.dtype == np.uint8:  # 0..255 by construction
        return a
    if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or infinite values")
    lo, hi = a.min(), a.max()
    if a.dtype.kind == "i" and lo < 0:
        raise ValueError(f"{name} is a signed {a.dtype} image with negative values (min {lo}); "
                         "images are 0..255: give uint8, or float in 0..255")
    if a.dtype.kind in "ui" and a.dtype.itemsize > 1 and hi > 255:
        raise ValueError(f"{name} looks like a {a.dtype} image with values above 255; "
                         "convert it to 8-bit (0..255) first")
    if a.dtype.kind == "f":
        if 0 < hi <= 1.0 and lo >= 0:
            raise ValueError(f"{name} is a float image with values in [0, 1] (max {float(hi):g}); "
                             "float images are read as 0..255: multiply it by 255 first")
        if lo < -FLOAT_SLACK or hi > 255 + FLOAT_SLACK:
            raise ValueError(f"{name} is a float image with values in [{float(lo):g}, "
                             f"{float(hi):g}]; float images must be in 0..255: scale it first")
    return a


def _check_depth(depth, hw, name: str) -> np.ndarray:
    """Depth aligned with its image, some of it valid; invalid pixels get the median."""
    d = check_depth(depth, name, hw, min_valid_fraction=1e-12)
    ok = np.isfinite(d) & (d > 0)
    return d if ok.all() else np.where(ok, d, np.median(d[ok])).astype(np.float32)


def _check_intrinsics(K, hw=None) -> np.ndarray:
    """Finite (fx, fy, cx, cy), fx, fy > 0 and, given the image size ``hw``, not absurd for it (:func:`intrinsics_problem`
    with its loose bounds: datasets may pass intrinsics of another resolution; the CLIs check theirs strictly)."""
    why = intrinsics_problem(K, *(hw if hw is not None else (None, None)), loose=True)
    if why:
        raise ValueError(f"intrinsics (fx, fy, cx, cy) {K!r}: {why}")
    return np.asarray(K, np.float32).reshape(-1)


def _check_finite_tree(tree, what: str) -> None:
    """ValueError naming the first array of ``tree`` holding NaN / inf (damaged weights)."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        a = np.asarray(leaf)
        if a.dtype.kind in "fc" and not np.all(np.isfinite(a)):
            bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
            raise ValueError(f"{what}{jax.tree_util.keystr(path)} holds {bad} NaN/inf values out of "
                             f"{a.size}: the checkpoint is damaged")


def _static_bases_from_config(cfg: Mapping[str, Any], h: int, w: int):
    """Regenerates the static (homography | stochastic) bases a checkpoint config describes."""
    return basis_set.static_bases({**dict(cfg), "height": h, "width": w})


def _with_precision(model, precision: str | None, dtype: str | None):
    """``model`` with the precision policy ``precision`` (or the one the older ``dtype`` names);
    unchanged when neither is given or it already has that policy."""
    if precision is None and dtype is None:
        return model
    config = getattr(model, "config", None)
    if not dataclasses.is_dataclass(config) or not hasattr(config, "precision"):
        raise ValueError(f"precision={precision!r} / dtype={dtype!r} needs a CamFlow model (with a ModelConfig)")
    if dtype is not None:
        named = precision_lib.from_legacy_dtype(dtype, precision or config.precision)  # validates dtype
        if precision is not None and named != precision:
            raise ValueError(f"dtype={dtype!r} contradicts precision={precision!r}")
        precision = named
    if precision == config.precision:
        return model
    return model.clone(config=dataclasses.replace(config, precision=precision))  # validates precision


def _with_contrast_floor(model, floor: float | None):
    """``model`` with the contrast floor ``floor`` (:class:`camflow_jax.models.ModelConfig`);
    unchanged when it is None or already that."""
    if floor is None:
        return model
    config = getattr(model, "config", None)
    if not dataclasses.is_dataclass(config) or not hasattr(config, "contrast_floor"):
        raise ValueError(f"contrast_floor={floor!r} needs a CamFlow model (with a ModelConfig)")
    if floor == config.contrast_floor:
        return model
    return model.clone(config=dataclasses.replace(config, contrast_floor=floor))  # validates it


# ----------------------------------------------------------------------------- predictor
class Predictor:
    """Runs a CamFlow / CamFlow+ model on image pairs of any size and orientation.

    Args:
      model: a :class:`camflow_jax.models.CamFlow` (or anything with its ``apply``,
        ``num_bases``, ``group_slice`` interface).
      variables: ``{'params', 'batch_stats'}``.
      static_bases: ``[N_static, h, w, 2]`` homography + stochastic bases at network size, or
        None to rebuild them from ``model_config``.
      model_config: the model's config (:mod:`camflow_jax.models.checkpoint` layout): ``height`` /
        ``width`` give the network size (default 320 x 576), ``bases`` describes the static
        bases (used when ``static_bases`` is None) and ``bases.depth_sigmas`` the
        depth-pyramid blurs (default :func:`camflow_jax.bases.default_depth_sigmas`).
      channel_order: colour order of the images passed in ('rgb' or 'bgr').
      refine: test-time refinement by default (True, False or a RefineConfig).
      confidence: compute the confidence maps (logvar_f, logvar_b) by default. False (the
        default) runs the flows-only network path, which skips the full-resolution mask net;
        ``pred(..., confidence=True)`` asks for them on one call.
      precision: the network's precision policy (:mod:`camflow_jax.models.precision`; None: the
        model config's, 'exact' for a ``model.json`` without one): 'exact' (float32, dots and
        convolutions at HIGHEST: the same numbers on a GPU or TPU as on the CPU), 'default'
        (float32 at the backend's default precision: TF32 on recent NVIDIA GPUs) or 'bfloat16'.
        The weights stay float32; preprocessing, bases, flows, the homography fit and the
        refinement are float32 at HIGHEST whatever the network's policy (docs/performance.md,
        "Precision policy").
      dtype: the older spelling: 'bfloat16' is ``precision='bfloat16'``; 'float32' keeps the
        model config's policy if it computes in float32, else 'exact'.
      contrast_floor: the network's contrast floor for dark pairs
        (:func:`camflow_jax.models.camflow.apply_contrast_floor`; None: the model config's, 0: off).
    """

    confidence = False  # the default of __call__'s confidence (set by __init__)
    #: predict_batch refines a batch as one vmapped program (True), a pair at a time (False), or
    #: by device (None: batched on accelerators; docs/performance.md, "Batched inference")
    batched_refinement: bool | None = None

    def __init__(self, model, variables, static_bases, model_config: Mapping[str, Any] | None = None,
                 *, channel_order: str = "rgb", refine: "bool | refine_lib.RefineConfig" = True,
                 confidence: bool = False, precision: str | None = None, dtype: str | None = None,
                 contrast_floor: float | None = None):
        cache.enable()  # before anything compiles (the user's JAX settings win)
        if hasattr(model_config, "to_dict"):  # ml_collections.ConfigDict
            model_config = model_config.to_dict()
        cfg = dict(model_config or {})
        model = _with_contrast_floor(_with_precision(model, precision, dtype), contrast_floor)
        self.model = model
        self.precision = getattr(getattr(model, "config", None), "precision", None)  # the policy in use
        if cfg and self.precision is not None:  # the config says what runs
            cfg.pop("dtype", None)
            cfg["precision"] = self.precision
        self.confidence = bool(confidence)
        self.model_config = cfg
        self.height = int(cfg.get("height") or DEFAULT_SIZE[0])
        self.width = int(cfg.get("width") or DEFAULT_SIZE[1])
        mult = int(getattr(model, "size_multiple", 1))
        if self.height % mult or self.width % mult:
            raise ValueError(f"network size {self.height}x{self.width} must be a multiple of {mult}")
        if channel_order not in ("rgb", "bgr"):
            raise ValueError(f"channel_order must be 'rgb' or 'bgr', got {channel_order!r}")
        self.channel_order = channel_order
        num_bases = int(model.num_bases)
        sl = model.group_slice(DEPTH_GROUP) if hasattr(model, "group_slice") else None
        self.num_depth = 0 if sl is None else sl.stop - sl.start
        # the basis layout the refinement's per-group schedule (RefineConfig.active) refers to
        self.basis_groups = (tuple((str(g), int(k)) for g, k in zip(model.group_names, model.group_sizes))
                             if hasattr(model, "group_names") else None)
        if self.num_depth and sl.stop != num_bases:
            raise ValueError("the depth basis group must come last (homography | stochastic | depth)")
        num_static = num_bases - self.num_depth
        if static_bases is None:
            static_bases = _static_bases_from_config(cfg, self.height, self.width)
        static_bases = jnp.asarray(static_bases, jnp.float32)
        if static_bases.shape != (num_static, self.height, self.width, 2):
            raise ValueError(f"static bases have shape {static_bases.shape}; the model needs "
                             f"{(num_static, self.height, self.width, 2)}")
        _check_finite_tree(static_bases, "static bases")
        _check_finite_tree(variables, "model weights ")
        self.static_bases = static_bases
        sigmas = cfg.get("depth_sigmas") or dict(cfg.get("bases") or {}).get("depth_sigmas")
        if self.num_depth:
            sigmas = basis_set.depth_sigmas(sigmas, self.width)
            if basis_set.num_depth_bases(sigmas) != self.num_depth:
                raise ValueError(f"depth group has {self.num_depth} bases but {len(sigmas)} depth "
                                 f"sigmas give {3 * len(sigmas)}")
        self.depth_sigmas = sigmas
        self.variables = jax.device_put(variables)
        self._forward = self._jit_forward()
        # a depth model's basis set for a constant depth (no depth given), per input size and K
        self._basis_set = ExportedJit(self._basis_set_impl, name="Predictor.basis_set",
                                      key=(self.height, self.width, self.depth_sigmas), static_argnames=("input_hw",))
        self._constant_depth_cache = BoundedMemo(4)
        self.refiner = PairRefiner(static_bases, self.num_depth, sigmas, self.basis_groups)
        self.refine_config = self._refine_setting(refine, refine_lib.RefineConfig())
        self._warned_no_depth = False
        self.description = "CamFlow+" if self.num_depth else "CamFlow"  # set by the loaders
        self._pool = None  # predict_batch's host threads (_host_pool)

    def _jit_forward(self):
        """The jitted forward; its traced program is kept on disk (:class:`ExportedJit`) for the
        package's own models, keyed by all it reads besides its arguments (the weights and
        bases are arguments: a checkpoint of the same architecture shares the artifacts)."""
        kind = type(self.model)
        if not kind.__module__.startswith("camflow_jax."):
            return jax.jit(self._forward_impl, static_argnames=("confidence", "forward_only", "full_bases"))
        key = (f"{kind.__module__}.{kind.__qualname__}", repr(self.model), self.channel_order, self.height,
               self.width, self.num_depth, self.depth_sigmas)
        return ExportedJit(self._forward_impl, name="Predictor.forward", key=key,
                           static_argnames=("confidence", "forward_only", "full_bases"))

    @classmethod
    def from_pretrained(cls, name: str | None = None, **kwargs) -> "Predictor":
        """The model shipped inside the package (CamFlow+, 36 bases; docs/model_card.md says
        what it is and how well it does): no download, no checkpoint to find."""
        name = name or checkpoint.PRETRAINED
        pred = cls.from_checkpoint(checkpoint.pretrained_path(name), **kwargs)
        pred.description = f"the shipped model {name!r} ({pred.height}x{pred.width}; docs/model_card.md)"
        return pred

    @classmethod
    def load(cls, checkpoint: str | None = None, **kwargs) -> "Predictor":
        """``from_checkpoint(checkpoint)``, or :meth:`from_pretrained` when ``checkpoint`` is
        None: what the command-line tools run. ``predictor.description`` says which."""
        return cls.from_pretrained(**kwargs) if checkpoint is None else cls.from_checkpoint(checkpoint, **kwargs)

    @classmethod
    def from_checkpoint(cls, path, **kwargs) -> "Predictor":
        """Loads ``path`` (inference checkpoint or training workdir) via
        :func:`camflow_jax.models.checkpoint.load_model`."""
        path = os.fspath(path)
        cache.enable()  # the loader may compute (and compile) the static bases
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"checkpoint not found: {path}. Train one (python -m camflow_jax.train "
                "--config=configs/synthetic.py) or convert the released CamFlow weights "
                "(python tools/import_official_checkpoint.py ckpt.pth -o DIR).")
        model, variables, static_bases, model_config = checkpoint.load_model(path)
        pred = cls(model, variables, static_bases, model_config, **kwargs)
        pred.description = f"{pred.description} from {path} ({pred.height}x{pred.width})"
        return pred

    # --------------------------------------------------------------------------- jitted core
    def _basis_set_impl(self, static_bases, depth, K, *, input_hw):
        """One image's full basis set at the network size ``[N, h, w, 2]``: the static bases and
        the depth group built from its depth ``[H0, W0]`` and intrinsics ``[4]`` at the input
        size ``input_hw``."""
        h, w = self.height, self.width
        d = device.resize_image(depth[..., None], h, w)[..., 0]
        k = device.resize_intrinsics(K, tuple(input_hw), (h, w))
        return basis_set.with_depth_bases(static_bases, d, k, self.depth_sigmas)

    def _forward_impl(self, variables, static_bases, img1, img2, depth1, depth2, K1, K2, confidence=True,
                      forward_only=False, full_bases=False):
        """The network on a batch of B landscape pairs of one size: ``img1``, ``img2`` ``[B, H0,
        W0, C]``, depths ``[B, H0, W0]`` and intrinsics ``[B, 4]`` (placeholders without a depth
        group). Outputs with a leading axis B, at the input size; ``forward_only``: no ``*_b``.
        ``full_bases``: ``static_bases`` is already a depth model's full set ``[N, h, w, 2]``,
        shared by both images of every pair (a constant depth's, :meth:`constant_depth_bases`),
        and the depths and intrinsics are placeholders."""
        h, w = self.height, self.width
        H0, W0 = img1.shape[1:3]
        g1 = preprocess(img1, h, w, self.channel_order)
        g2 = preprocess(img2, h, w, self.channel_order)
        if self.num_depth and not full_bases:
            per_image = functools.partial(self._basis_set_impl, static_bases, input_hw=(H0, W0))
            bases_f = jax.vmap(per_image)(depth1, K1)
            bases_b = None if forward_only else jax.vmap(per_image)(depth2, K2)
        else:
            bases_f, bases_b = static_bases, None
        out = self.model.apply(variables, g1, g2, bases_f, bases_b, train=False, confidence=confidence,
                               forward_only=forward_only)
        resize = jax.vmap(lambda f: device.resize_flow(f.astype(jnp.float32), H0, W0))
        flow_f = resize(out["flow_f"])
        res = {
            "flow_f": flow_f,
            "coeffs_f": out["coeffs_f"].astype(jnp.float32),
            # fitted at the network's own density (device.homography_stride), not at every pixel
            "homography": jax.vmap(functools.partial(device.fit_homography_strided,
                                                     stride=device.homography_stride((H0, W0), (h, w))))(flow_f),
        }
        if not forward_only:
            res["flow_b"] = resize(out["flow_b"])
            res["coeffs_b"] = out["coeffs_b"].astype(jnp.float32)
        if confidence:
            resize_map = jax.vmap(lambda m: device.resize_bilinear_align_corners(m.astype(jnp.float32), H0, W0))
            for k in ("logvar_f",) if forward_only else ("logvar_f", "logvar_b"):
                res[k] = resize_map(out[k])
        return res

    @staticmethod
    def _refine_setting(value, default):
        """A RefineConfig (refine) or None (network alone) from True (``default``) / False / a
        config."""
        if isinstance(value, refine_lib.RefineConfig):
            return value
        if isinstance(value, (bool, np.bool_)):
            return default if value else None
        raise ValueError(f"refine must be True, False or a camflow_jax.refine.RefineConfig, got {value!r}")

    def check_aspect(self, h: int, w: int) -> None:
        """ValueError unless a landscape ``h x w`` input is within :data:`MAX_SQUASH` of the
        network's aspect ratio: the network sees the input resized to its own size, and an image
        squashed further than that gives it motion it was never trained on (an 80:1 strip once
        got a 228 px translation for a true 6 px)."""
        squash = (w / h) / (self.width / self.height)
        if squash > MAX_SQUASH:
            raise ValueError(f"the image is {w}x{h} ({w / h:.1f}:1), more than {MAX_SQUASH:g}x wider than "
                             f"the network's {self.width}x{self.height} aspect ratio: crop it into parts "
                             f"of at most {MAX_SQUASH * self.width / self.height:.1f}:1")

    def _network_inputs(self, img1, img2, depth1, depth2, K) -> tuple:
        """The forward's arguments for a landscape pair (numpy, no batch axis): depth and
        intrinsics filled in for a depth model without them, placeholders without a depth group
        (they keep one jitted signature)."""
        H0, W0 = img1.shape[:2]
        if self.num_depth:
            if depth1 is None:
                depth1 = depth2 = np.ones((H0, W0), np.float32)
            if K is None:
                K = default_intrinsics(H0, W0)
        else:
            depth1 = depth2 = np.zeros((1, 1), np.float32)
            K = np.zeros(4, np.float32)
        f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
        # 8-bit images go to the device as they are (a quarter of float32's bytes; the
        # forward converts them, to the same values)
        img = (lambda x: x) if img1.dtype == img2.dtype == np.uint8 else f32
        return img(img1), img(img2), f32(depth1), f32(depth2), f32(K), f32(K)

    def constant_depth_bases(self, input_hw, K=None, value: float = 1.0):
        """The full basis set ``[N, h, w, 2]`` (a device array) the network uses for a pair of size
        ``input_hw = (H0, W0)`` whose depth holds ``value`` everywhere: the set of a pair given
        no depth (1 everywhere), the same for every pair of an input size and intrinsics ``K``
        (None: :func:`default_intrinsics`, what a pair given no intrinsics gets). Built once and
        kept (a few at a time): the network then skips building the depth group for each image
        (~6 ms a pair at 360x480 on a 2-core CPU; docs/performance.md, "Preprocessing, and the
        constant depth"). A model without a depth group: its static bases."""
        if not self.num_depth:
            return self.static_bases
        hw = tuple(int(v) for v in input_hw)
        K = default_intrinsics(*hw) if K is None else np.asarray(K, np.float32)
        return self._constant_depth_cache.get((hw, K.tobytes(), value), lambda: self._basis_set(
            self.static_bases, np.full(hw, value, np.float32), K, input_hw=hw))

    def _forward_bases(self, args, constant):
        """(bases, network arguments) of a pair's :meth:`_network_inputs` ``args``: with depths holding one
        value ``constant`` (:func:`camflow_jax.geometry.host.constant_value`, the refiner's rule too), that depth's kept
        set (:meth:`constant_depth_bases`) and placeholder depths; else the static bases and ``args``."""
        if not self.num_depth or constant is None:
            return self.static_bases, args
        z = np.zeros((1, 1), np.float32)
        return self.constant_depth_bases(args[0].shape[:2], args[4], constant), args[:2] + (z, z, args[4], args[5])

    def _predict_landscape(self, img1, img2, depth1, depth2, K, cfg=None, confidence=True, forward_only=False):
        """Network outputs for a landscape pair at its own resolution (numpy dict)."""
        args = self._network_inputs(img1, img2, depth1, depth2, K)
        bases, net_args = self._forward_bases(args, self.num_depth and host.constant_value(*args[2:4]))
        # Bases and weights are arguments, not closure constants: XLA would otherwise embed them.
        # numpy in: converted on the host, not by eager device ops that each compile a program
        out = self._forward(self.variables, bases, *(x[None] for x in net_args), confidence=bool(confidence),
                            forward_only=bool(forward_only), full_bases=bases is not self.static_bases)
        out = {k: np.asarray(v)[0] for k, v in jax.device_get(out).items()}
        if cfg is None:
            return out
        _, _, depth1, depth2, K, _ = args
        out.update(self._retried(self.refiner(img1, img2, depth1, depth2, K, out, cfg),
                                 img1, img2, depth1, depth2, K, out, cfg))
        return out

    def _retried(self, new, img1, img2, depth1, depth2, K, out, cfg) -> dict:
        """The refined results ``new`` of a landscape pair, or, where its two directions contradict
        each other in part of the image (:func:`plausibility.forward_backward_errors` worse than
        :data:`plausibility.MAX_FB_REGION` of the longer side) and ``cfg.retry_starts`` adds
        starts, the refinement run again with them (from the network's ``out``) when its
        directions agree better. ``refine_info["retry"]`` records a retry: the worst part's error
        before and after, the starts, whether it was kept."""
        extra = tuple(s for s in cfg.retry_starts if s not in cfg.starts)
        if not extra or "flow_b" not in new:
            return new
        limit = plausibility.MAX_FB_REGION * max(img1.shape[:2])
        worst = plausibility.forward_backward_errors(new["flow_f"], new["flow_b"])[1]
        if not worst > limit:
            return new
        again = self.refiner(img1, img2, depth1, depth2, K, out, dataclasses.replace(
            cfg, starts=cfg.starts + extra, retry_starts=()))
        after = plausibility.forward_backward_errors(again["flow_f"], again["flow_b"])[1]
        kept = bool(after < worst)
        res = again if kept else new
        info = res["refine_info"]
        info["retry"] = {"region_error_before": float(worst), "region_error_after": float(after),
                         "starts": list(cfg.starts + extra), "kept": kept}
        said = (f"the directions contradicted each other in part of the image ({worst:.1f} px): refined again "
                f"from the starts {', '.join(cfg.starts + extra)}, " + (f"which agree better ({after:.1f} px)" if kept
                                                                       else f"no better ({after:.1f} px); the first kept"))
        info["note"] = "; ".join(x for x in (info["note"], said) if x)
        return res

    # --------------------------------------------------------------------------- public call
    def __call__(self, img1, img2, depth1=None, depth2=None, intrinsics=None, refine=None,
                 confidence=None, forward_only: bool = False) -> dict:
        """Estimates the camera motion between two images.

        Args:
          img1, img2: ``[H0, W0, 3]`` (or gray ``[H0, W0]``), uint8 or float in 0..255, in
            ``channel_order``; any size, portrait or landscape. Refused (ValueError naming the
            argument): float images whose values all lie in [0, 1] (scale them by 255 first;
            an all-zero image is accepted), float values outside [-1, 256], negative values of
            a signed integer image (int8 included), integers above 255, NaN or infinity.
          depth1, depth2: optional depth maps ``[H0, W0]`` aligned with each image (CamFlow+).
          intrinsics: (fx, fy, cx, cy) of the input images in pixels (default for a depth
            model without them: f = max(H0, W0), principal point at the centre).
          refine: None (the predictor's setting, refinement on by default), True, False (the
            network alone) or a :class:`camflow_jax.refine.RefineConfig`.
          confidence: None (the predictor's setting, off by default), True (also run the mask
            net and return logvar_f, logvar_b) or False (flows-only).
          forward_only: the image-1 -> image-2 direction alone (the stabilizer's use): no
            ``*_b`` results, about half the network's work and half the refinement's.
        Returns:
          numpy dict: flow_f, flow_b ``[H0, W0, 2]``; with confidence, logvar_f, logvar_b
          ``[H0, W0, 1]`` (log-variance s >= 0, confidence exp(-s)); homography ``[3, 3]`` (fit on flow_f);
          coeffs_f, coeffs_b ``[N]`` (``coeffs`` = coeffs_f); rotated (portrait handled);
          refined (bool). When refined, flow_f, flow_b, homography and coeffs are the refined
          ones, the network's are kept as net_flow_f, net_flow_b, net_homography,
          net_coeffs_f, net_coeffs_b, and weights_f, weights_b ``[H0, W0, 1]`` hold the robust
          weights (an inlier map: low on moving objects and occlusions) and refine_info the
          costs before and after, iterations, the winning start, each start's final cost
          (``start_costs``, per direction), ``noisy`` (the pair got the stronger pre-blur of
          :func:`camflow_jax.refine.pair_pyramids`), ``working_size_hw``, ``detail_size_hw``
          (where the detail level ran, :meth:`camflow_jax.refine.pairs.PairRefiner.detail_size`, or None) and a note.
          Always ``plausibility``: :func:`plausibility.report`, the CLIs' checks (image 2 exposure-matched first).
        """
        cfg = self.refine_config if refine is None else self._refine_setting(
            refine, self.refine_config or refine_lib.RefineConfig())
        pair = self._landscape_pair(img1, img2, depth1, depth2, intrinsics)
        conf = self.confidence if confidence is None else bool(confidence)
        return self._upright(self._predict_landscape(*pair[:5], cfg, conf, bool(forward_only)), pair, cfg)

    def predict_batch(self, images1, images2, depths1=None, depths2=None, intrinsics=None, refine=None,
                      confidence=None, batch_size: int | None = None, forward_only: bool = False) -> list[dict]:
        """Estimates the camera motion of several pairs, ``batch_size`` pairs per call of the
        network and of the refinement: what the single-pair call returns, one dict per pair, in
        order.

        Args:
          images1, images2: sequences (lists, or arrays ``[B, H, W, 3]``) of the pairs' images,
            each as :meth:`__call__` takes them. Pairs of different sizes may be mixed: each size
            runs in batches of its own.
          depths1, depths2: None, or sequences of depth maps (a depth model's), one per pair.
          intrinsics: None, one (fx, fy, cx, cy) for every pair, or one per pair (``[B, 4]``).
          refine, confidence, forward_only: as :meth:`__call__`'s, for every pair.
          batch_size: pairs per call (default :data:`BATCH_SIZE`). A size's last batch runs at
            the next power of two (the last pair repeated, its results dropped), so a run
            compiles at most log2(batch_size) + 1 batch sizes per input size.

        Per batch, the images go to the device in one transfer and the results come back in
        one. The refinement of a batch is one jitted program, vmapped over the pairs and their
        directions, where :attr:`batched_refinement` says so (by default on accelerators;
        on a CPU each pair's two directions run in two threads, which measured faster there,
        and with several cores the pairs of a batch run in threads too:
        docs/performance.md, "Batched inference")."""
        cfg = self.refine_config if refine is None else self._refine_setting(
            refine, self.refine_config or refine_lib.RefineConfig())
        conf = self.confidence if confidence is None else bool(confidence)
        if batch_size is not None and (isinstance(batch_size, (bool, np.bool_)) or not float(batch_size).is_integer()
                                       if isinstance(batch_size, (int, float, np.number)) else True):
            raise ValueError(f"batch_size must be a whole number of pairs, got {batch_size!r}")
        bs = BATCH_SIZE if batch_size is None else int(batch_size)
        if bs < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size!r}")
        n = len(images1)
        if len(images2) != n:
            raise ValueError(f"images1 has {n} images and images2 {len(images2)}: give one image 2 per image 1")
        if (depths1 is None) != (depths2 is None):
            raise ValueError("give both depths1 and depths2, or neither")
        if depths1 is not None and not len(depths1) == len(depths2) == n:
            raise ValueError(f"{n} pairs need {n} depths1 and depths2, got {len(depths1)} and {len(depths2)}")
        Ks = [None] * n
        if intrinsics is not None:
            shape = np.shape(intrinsics)
            if shape == (4,):
                Ks = [intrinsics] * n
            elif shape == (n, 4):
                Ks = list(intrinsics)
            else:
                raise ValueError(f"intrinsics must be one (fx, fy, cx, cy) or one per pair ([{n}, 4]), "
                                 f"got shape {shape}")
        pairs = [self._landscape_pair(images1[i], images2[i], None if depths1 is None else depths1[i],
                                      None if depths2 is None else depths2[i], Ks[i],
                                      names=(f"images1[{i}]", f"images2[{i}]", f"depths1[{i}]", f"depths2[{i}]"))
                 for i in range(n)]
        groups: dict = {}
        for i, pair in enumerate(pairs):  # one program per size and image type
            groups.setdefault((pair[0].shape, pair[0].dtype == pair[1].dtype == np.uint8), []).append(i)
        batches = []
        for members in groups.values():
            for lo in range(0, len(members), bs):
                chunk = members[lo:lo + bs]
                size = min(bs, 1 << (len(chunk) - 1).bit_length())  # the next power of two, at most bs
                batches.append((chunk, chunk + [chunk[-1]] * (size - len(chunk))))
        results: list = [None] * n
        pending = None
        for chunk, padded in batches:  # batch k+1 is prepared and sent while batch k computes
            started = self._start_batch([pairs[i] for i in padded], cfg, conf, bool(forward_only))
            if pending is not None:
                self._finish_batch(*pending, pairs, results, cfg)
            pending = (chunk, started)
        if pending is not None:
            self._finish_batch(*pending, pairs, results, cfg)
        return results

    def _host_pool(self):
        """Threads for the host's per-pair work of a batch (cv2 and numpy release the GIL)."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(min(8, usable_cpus()),
                                                               thread_name_prefix="camflow-host")
        return self._pool

    def _start_batch(self, pairs, cfg, confidence, forward_only=False):
        """Prepares landscape pairs of one size on the host, sends them to the device in one
        transfer and starts the network and (with :meth:`uses_batched_refinement`) the
        refinement there, as one program each, without waiting for them."""
        inputs = [self._network_inputs(*p[:5]) for p in pairs]
        # every depth one value (none given: 1) and one K: that constant depth's set, shared by the batch
        values = {self.num_depth and host.constant_value(*x[2:4]) for x in inputs}
        shared = values.pop() if len(values) == 1 and all(np.array_equal(x[4], inputs[0][4]) for x in inputs) else None
        prepared = [self._forward_bases(x, shared) for x in inputs]
        bases = prepared[0][0]
        args = [np.stack(column) for column in zip(*(a for _, a in prepared))]
        batched = cfg is not None and self.uses_batched_refinement()
        hosts = batch = None
        if batched:  # the refinement's host work first, so that everything goes over in one transfer
            hosts = list(self._host_pool().map(
                lambda px: self.refiner.host_inputs(px[0][0], px[0][1], px[1][2], px[1][3], px[1][4], cfg),
                zip(pairs, inputs)))
            batch = self.refiner.stack_host_inputs(hosts)
        args, batch = jax.device_put((args, batch))
        out = self._forward(self.variables, bases, *args, confidence=bool(confidence), forward_only=forward_only,
                            full_bases=bases is not self.static_bases)
        ref = None if not batched else self.refiner.refine_batch(
            batch, out["coeffs_f"], out.get("coeffs_b"), input_hw=pairs[0][0].shape[:2], cfg=cfg)
        return pairs, inputs, out, ref, hosts

    def _finish_batch(self, chunk, started, pairs_in, results, cfg) -> None:
        """Brings a started batch's results back in one transfer and puts each pair's (numpy,
        upright) into ``results`` at the pair's index in ``chunk`` (the padding is dropped)."""
        pairs, inputs, out, ref, hosts = started
        out, ref = jax.device_get((out, ref))
        default_device = jax.config.jax_default_device  # the caller's (a thread-local setting) holds in threads

        def one(j):
            o = {k: np.asarray(v[j]) for k, v in out.items()}
            p, x = pairs[j], inputs[j]
            if cfg is not None and ref is not None:
                new = self.refiner.finish({k: v[j] for k, v in ref.items()}, o, hosts[j], cfg)
                with jax.default_device(default_device):
                    o.update(self._retried(new, p[0], p[1], x[2], x[3], x[4], o, cfg))
            elif cfg is not None:  # a pair on its own: its two directions in two threads on a multi-core CPU
                with jax.default_device(default_device):  # None: JAX's own default
                    o.update(self._retried(self.refiner(p[0], p[1], x[2], x[3], x[4], o, cfg),
                                           p[0], p[1], x[2], x[3], x[4], o, cfg))
            return self._upright(o, pairs_in[chunk[j]], cfg)

        # Pairs in threads: a batch's refined results (host work), or on a multi-core CPU the pairs'
        # refinements, which XLA:CPU runs inline on the calling thread (a forward-only pair on one
        # core; docs/performance.md, "Two pairs at once on a CPU").
        threads = ref is not None or (cfg is not None and len(chunk) > 1 and usable_cpus() >= 2)
        for j, o in enumerate((self._host_pool().map if threads else map)(one, range(len(chunk)))):
            results[chunk[j]] = o

    def preferred_batch_size(self) -> int:
        """Pairs per :meth:`predict_batch` call worth gathering for speed: :data:`BATCH_SIZE` where
        the refinement runs batched (:meth:`uses_batched_refinement`); on a CPU with several
        cores 2 (the network runs both pairs in one call, their refinements run in two threads;
        larger batches measured no faster: docs/performance.md, "Batched inference"); else 1.
        What the stabilizer and the evaluation batch by."""
        if self.uses_batched_refinement():
            return BATCH_SIZE
        return 2 if usable_cpus() >= 2 else 1

    def uses_batched_refinement(self) -> bool:
        """Whether :meth:`predict_batch` refines a batch as one program: :attr:`batched_refinement`,
        or when that is None, whether the default device is not a CPU."""
        if self.batched_refinement is not None:
            return bool(self.batched_refinement)
        return jax.devices()[0].platform != "cpu"

    def _landscape_pair(self, img1, img2, depth1, depth2, intrinsics, names=("img1", "img2", "depth1", "depth2")):
        """A pair checked (ValueError naming the argument) and turned landscape: (img1, img2,
        depth1, depth2, K, portrait, input width, exposure); depth and K None where not given; img2
        exposure-matched to img1 where they differ (:func:`photometric.compensate`, its record)."""
        a = _check_image(img1, names[0])
        b = _check_image(img2, names[1])
        if a.shape != b.shape:
            raise ValueError(f"{names[0]} {a.shape} and {names[1]} {b.shape} must have the same size")
        H0, W0 = a.shape[:2]
        if (depth1 is None) != (depth2 is None):
            raise ValueError(f"give both {names[2]} and {names[3]}, or neither")
        d1 = d2 = K = None
        if depth1 is not None:
            d1 = _check_depth(depth1, (H0, W0), names[2])
            d2 = _check_depth(depth2, (H0, W0), names[3])
        if intrinsics is not None:
            K = _check_intrinsics(intrinsics, (H0, W0))
        if self.num_depth and d1 is None and not self._warned_no_depth:
            warnings.warn("model has depth-translational bases but no depth was given: using a "
                          "constant depth (the model then behaves like CamFlow)", stacklevel=3)
            self._warned_no_depth = True
        portrait = H0 > W0
        if portrait:
            a, b = rotate_to_landscape(a), rotate_to_landscape(b)
            if d1 is not None:
                d1, d2 = rotate_to_landscape(d1), rotate_to_landscape(d2)
            if K is not None:
                K = _rotate_intrinsics(K, W0)
        self.check_aspect(*a.shape[:2])
        b, exposure = photometric.compensate(a, b)
        return a, b, d1, d2, K, portrait, W0, exposure

    @staticmethod
    def _upright(out, pair, cfg) -> dict:
        """A landscape pair's results (numpy) in the input's orientation (``pair``: its
        :meth:`_landscape_pair`), homographies normalized, with ``coeffs``, ``rotated``,
        ``refined``, ``plausibility`` (:func:`plausibility.report`, on the landscape pair)."""
        portrait, W0 = pair[5], pair[6]
        out["plausibility"] = plausibility.report(pair[0], pair[1], out, pair[7])
        flows = [k for k in ("flow_f", "flow_b", "net_flow_f", "net_flow_b") if k in out]
        maps = [k for k in ("logvar_f", "logvar_b", "weights_f", "weights_b") if k in out]
        homs = [k for k in ("homography", "net_homography") if k in out]
        if portrait:
            for k in flows:
                out[k] = flow_from_rotated(out[k])
            for k in maps:
                out[k] = np.ascontiguousarray(np.rot90(out[k], k=-1, axes=(0, 1)))
            for k in homs:
                out[k] = homography_from_rotated(out[k], W0)
        for k in homs:
            out[k] = np.asarray(out[k], np.float64) / np.asarray(out[k], np.float64)[2, 2]
        out["coeffs"] = out["coeffs_f"]
        out["rotated"] = portrait
        out["refined"] = cfg is not None
        return out
