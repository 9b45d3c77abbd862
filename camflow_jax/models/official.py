"""Import of the released PyTorch CamFlow weights (conference version, 24 bases).

The released state dict (names ``fea_extra.*``, ``h_net.*``, ``mask_generator.*``) is mapped
onto our parameter tree; conv weights go OIHW -> HWIO, linear weights (out, in) -> (in, out),
query tokens (1, n, D) -> (n, D), BatchNorm running statistics into ``batch_stats``.
Released modules the network never uses (``patch_embed``, class-attention ``info_flatten``,
PatchMerging ``reduction``/``norm``) and derived buffers (``attn_mask``,
``relative_position_index``, ``num_batches_tracked``) are skipped; every parameter of our
model must be found with the right shape, otherwise a ``ValueError`` names what is wrong.

Level correspondence (determined by the release's forward pass and confirmed by parity):
our level l = 0, 1, 2 (coarse to fine) uses ``encoder_layers.{2-l}`` and
``blocks_token_*.{2-l}``.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from camflow_jax.models.camflow import CamFlow, build_model, group_layout, resolve_config
from camflow_jax.models.config import HOMOGRAPHY_GROUP, NETWORK_FIELDS, STOCHASTIC_GROUP, ModelConfig
from camflow_jax.models.precision import EXACT

# The released CamFlow: the default architecture with 12 homography + 12 stochastic bases, at
# the 'exact' precision policy (float32, dots and convolutions at HIGHEST) whatever the
# library's default: parity with the release holds on every backend (a GPU's TF32 does not
# reproduce it: docs/performance.md, "Precision policy"), and imported checkpoints say so.
_RELEASED_SIZES, _RELEASED_NAMES = group_layout(12, 12, 0)
RELEASED_CONFIG: dict[str, Any] = ModelConfig(group_sizes=_RELEASED_SIZES, group_names=_RELEASED_NAMES,
                                              precision=EXACT).to_dict()
RELEASED_SIZE = (320, 576)

# Released names we know and deliberately do not use.
_UNUSED = [
    re.compile(r"^h_net\.patch_embed\."),
    re.compile(r"\.info_flatten\."),
    re.compile(r"^h_net\.encoder_layers\.\d+\.layer\.\d+\.(reduction|norm)\.(weight|bias)$"),
    re.compile(r"\.(attn_mask|relative_position_index|num_batches_tracked)$"),
    re.compile(r"^h_net\.basis$"),
]


def _conv(w: np.ndarray) -> np.ndarray:
    return np.transpose(w, (2, 3, 1, 0))  # OIHW -> HWIO


def _linear(w: np.ndarray) -> np.ndarray:
    return np.transpose(w, (1, 0))  # (out, in) -> (in, out)


def _same(w: np.ndarray) -> np.ndarray:
    return w


def _tokens(w: np.ndarray) -> np.ndarray:
    return w.reshape(w.shape[-2], w.shape[-1])


def _mapping(cfg: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...], str, Callable]]:
    """(collection, our path, released key, transform) for every variable of our model."""
    out: list[tuple[str, tuple[str, ...], str, Callable]] = []

    def linear(ours, theirs):
        out.append(("params", ours + ("kernel",), theirs + ".weight", _linear))
        out.append(("params", ours + ("bias",), theirs + ".bias", _same))

    def conv(ours, theirs, bias=True):
        out.append(("params", ours + ("kernel",), theirs + ".weight", _conv))
        if bias:
            out.append(("params", ours + ("bias",), theirs + ".bias", _same))

    def norm(ours, theirs):
        out.append(("params", ours + ("scale",), theirs + ".weight", _same))
        out.append(("params", ours + ("bias",), theirs + ".bias", _same))

    def bn(ours, theirs):
        norm(ours, theirs)
        out.append(("batch_stats", ours + ("mean",), theirs + ".running_mean", _same))
        out.append(("batch_stats", ours + ("var",), theirs + ".running_var", _same))

    for i, k in enumerate((0, 3, 6)):  # fea_extra = Sequential(conv, bn, relu) x 3
        conv(("features", f"conv_{i}"), f"fea_extra.{k}", bias=False)
        bn(("features", f"bn_{i}"), f"fea_extra.{k + 1}")

    levels = len(cfg["depths"])
    for i in range(levels):
        conv(("met", "pyramid", f"stage_{i}_down"), f"h_net.feature_pyramid_extractor.convs.{i}.0")
        conv(("met", "pyramid", f"stage_{i}_conv"), f"h_net.feature_pyramid_extractor.convs.{i}.2")

    for i in range(levels):  # encoder index i (0 = finest) -> our level L-1-i
        enc = ("met", f"encoder_level_{levels - 1 - i}")
        k = 0
        for s in range(cfg["layer_depth"][i]):
            for j in range(cfg["depths"][i]):
                ours, theirs = enc + (f"stage_{s}_block_{j}",), f"h_net.encoder_layers.{i}.layer.{k}"
                norm(ours + ("ln1",), theirs + ".norm1")
                out.append(("params", ours + ("attn", "rel_pos_bias"),
                            theirs + ".attn.relative_position_bias_table", _same))
                linear(ours + ("attn", "qkv"), theirs + ".attn.qkv")
                linear(ours + ("attn", "proj"), theirs + ".attn.proj")
                norm(ours + ("ln2",), theirs + ".norm2")
                linear(ours + ("mlp", "fc1"), theirs + ".mlp.fc1")
                linear(ours + ("mlp", "fc2"), theirs + ".mlp.fc2")
                k += 1
            if s < cfg["layer_depth"][i] - 1:
                ours, theirs = enc + (f"stage_{s}_down",), f"h_net.encoder_layers.{i}.layer.{k}"
                conv(ours + ("conv_0",), theirs + ".conv1", bias=False)
                bn(ours + ("bn_0",), theirs + ".norm1")
                conv(ours + ("conv_1",), theirs + ".conv2", bias=False)
                bn(ours + ("bn_1",), theirs + ".norm2")
                k += 1

    released_group = {HOMOGRAPHY_GROUP: ("blocks_token_only", "query_token", ""),
                      STOCHASTIC_GROUP: ("blocks_token_noise", "query_token_noise", "_noise")}
    for name in cfg["group_names"]:
        blocks, token, suffix = released_group[name]
        out.append(("params", ("met", f"tokens_{name}"), f"h_net.{token}", _tokens))
        for i in range(levels):
            ours, theirs = ("met", f"ca_{name}_level_{levels - 1 - i}"), f"h_net.{blocks}.{i}"
            out.append(("params", ours + ("gamma_1",), theirs + ".gamma_1", _same))
            out.append(("params", ours + ("gamma_2",), theirs + ".gamma_2", _same))
            for n in ("1", "2", "3"):
                norm(ours + (f"ln{n}",), theirs + f".norm{n}")
            for p in ("q", "k", "v", "proj"):
                linear(ours + ("attn", p), theirs + f".attn.{p}")
            for mlp in ("mlp1", "mlp2"):
                linear(ours + (mlp, "fc1"), theirs + f".{mlp}.fc1")
                linear(ours + (mlp, "fc2"), theirs + f".{mlp}.fc2")
        norm(("met", f"norm_{name}"), f"h_net.norm{suffix}")
        linear(("met", f"head_{name}", "hidden"), f"h_net.head1{suffix}")
        linear(("met", f"head_{name}", "out"), f"h_net.head2{suffix}")

    for i in range(5):
        conv(("mask_net", f"conv_{i}"), f"mask_generator.conv{i + 1}.0")
    conv(("mask_net", "conv_out"), "mask_generator.conv_last.0")
    return out


def _set(tree: dict, path: tuple[str, ...], value: np.ndarray) -> None:
    for p in path[:-1]:
        tree = tree.setdefault(p, {})
    tree[path[-1]] = value


def _strip_prefix(sd: Mapping[str, Any]) -> dict[str, Any]:
    """Removes wrapper prefixes (``module.`` from DataParallel/accelerate, ``model.``)."""
    keys = list(sd)
    for prefix in ("module.", "model."):
        if keys and all(k.startswith(prefix) for k in keys):
            sd = {k[len(prefix):]: v for k, v in sd.items()}
            keys = list(sd)
    return dict(sd)


def convert_state_dict(state_dict: Mapping[str, Any], model_config: Mapping[str, Any] | None = None,
                       ) -> dict[str, Any]:
    """Released state dict (numpy arrays, released names) -> ``{'params', 'batch_stats'}``.

    Raises a one-line ValueError naming the state-dict key of the first weight that is
    missing, not an array of real numbers, non-finite, or of another shape than the model's
    (and how many more are wrong). Only 'homography' and 'stochastic' groups exist in the
    release.
    """
    cfg = resolve_config(model_config or RELEASED_CONFIG)
    unknown = [n for n in cfg["group_names"] if n not in (HOMOGRAPHY_GROUP, STOCHASTIC_GROUP)]
    if unknown:
        raise ValueError(f"the released weights have no basis group(s) {unknown}")
    sd = _strip_prefix(state_dict)
    expected = _expected_shapes(cfg)
    variables: dict[str, Any] = {"params": {}, "batch_stats": {}}
    missing = []
    for coll, path, key, fn in _mapping(cfg):
        if key not in sd:
            missing.append(key)
            continue
        arr = _weight(key, sd[key])
        want = expected.get((coll,) + path)
        try:
            value = fn(arr)
        except (ValueError, IndexError):  # a transpose or reshape that does not fit
            value = None
        if value is None or (want is not None and tuple(value.shape) != want):
            raise ValueError(f"released weight {key} has shape {list(arr.shape)}: it does not fit the "
                             f"model's {coll}/{'/'.join(path)} ({_released_shape(fn, want)} expected)")
        _set(variables[coll], path, value)
    if missing:
        raise ValueError(f"released state dict lacks {len(missing)} required key(s), e.g. {missing[:5]}")
    _check_shapes(variables, cfg)
    return variables


def _real_numbers(what: str, value) -> np.ndarray:
    """``value`` as a float32 array, or a ValueError naming ``what`` (strings, objects, complex
    numbers, ragged lists); NaN and inf are left to the callers' checks."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what} is not an array ({e})") from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{what} does not hold real numbers (dtype {arr.dtype})")
    return arr.astype(np.float32)


def _weight(key: str, value) -> np.ndarray:
    """A released weight as float32, or a ValueError naming its state-dict key."""
    arr = _real_numbers(f"released weight {key}", value)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"released weight {key} contains NaN or infinite values")
    return arr


def _released_shape(fn: Callable, want: tuple[int, ...] | None) -> str:
    """The release's layout of a variable of our shape ``want`` (the inverse of ``fn``)."""
    if want is None:
        return "another shape"
    if fn is _conv and len(want) == 4:
        return str([want[3], want[2], want[0], want[1]])
    if fn is _linear and len(want) == 2:
        return str([want[1], want[0]])
    if fn is _tokens and len(want) == 2:
        return str([1, want[0], want[1]])
    return str(list(want))


def _expected_shapes(cfg: Mapping[str, Any]) -> dict[tuple[str, ...], tuple[int, ...]]:
    """``(collection,) + path`` -> the shape our model gives that variable (no compute; kept
    per configuration)."""
    return dict(_shapes_of(json.dumps(cfg, sort_keys=True, default=str)))


@functools.lru_cache(maxsize=4)
def _shapes_of(cfg_json: str) -> tuple:
    import jax
    import jax.numpy as jnp

    model = build_model(json.loads(cfg_json))
    s = model.size_multiple
    ref = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, s, s, 1)), jnp.zeros((1, s, s, 1)),
                                            jnp.zeros((model.num_bases, s, s, 2))))
    return tuple(((coll,) + tuple(getattr(k, "key", k) for k in p), tuple(v.shape))
                 for coll in ("params", "batch_stats")
                 for p, v in jax.tree_util.tree_flatten_with_path(ref[coll])[0])


def _check_shapes(variables: Mapping[str, Any], cfg: Mapping[str, Any]) -> None:
    """Compares converted arrays with the shapes our model expects (no compute); one line."""
    import jax

    source = {(coll,) + path: key for coll, path, key, _ in _mapping(cfg)}
    flat_ref = _expected_shapes(cfg)
    flat_got = {(coll,) + tuple(getattr(k, "key", k) for k in p): tuple(v.shape)
                for coll in ("params", "batch_stats")
                for p, v in jax.tree_util.tree_flatten_with_path(dict(variables[coll]))[0]}
    bad = []
    for path, want in flat_ref.items():
        got = flat_got.get(path)
        if got is None:
            bad.append(f"{'/'.join(path)} is not produced by the converter")
        elif got != want:
            bad.append(f"released weight {source.get(path, '?')} converts to shape {got}, the model's "
                       f"{'/'.join(path)} is {want}")
    for path in sorted(set(flat_got) - set(flat_ref)):
        bad.append(f"{'/'.join(path)} is unexpected")
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        raise ValueError("released weights do not fit the model: " + "; ".join(bad[:3]) + more)


def unused_keys(state_dict: Mapping[str, Any], model_config: Mapping[str, Any] | None = None) -> list[str]:
    """Released keys the converter does not consume (known-unused ones excluded)."""
    cfg = resolve_config(model_config or RELEASED_CONFIG)
    used = {key for _, _, key, _ in _mapping(cfg)}
    return sorted(k for k in _strip_prefix(state_dict)
                  if k not in used and not any(p.search(k) for p in _UNUSED))


def released_bases(state_dict: Mapping[str, Any], height: int, width: int) -> np.ndarray:
    """``h_net.basis`` (1, N, 2*H*W: u plane then v plane, row-major; or N, 2*H*W) ->
    ``[N, H, W, 2]``. Another rank or layout is a ValueError naming the key, its shape and the
    expected one."""
    sd = _strip_prefix(state_dict)
    if "h_net.basis" not in sd:
        raise ValueError("released state dict has no 'h_net.basis'")
    b = _real_numbers("released weight h_net.basis", sd["h_net.basis"])
    if b.ndim not in (2, 3) or (b.ndim == 3 and b.shape[0] != 1) or 0 in b.shape:
        raise ValueError(f"released weight h_net.basis has shape {list(b.shape)}; expected [1, N, 2*H*W] (N basis "
                         f"fields, each the u plane then the v plane of the H x W network grid; here "
                         f"[1, N, {2 * height * width}] for {height}x{width})")
    n = b.shape[-2]
    if b.shape[-1] != 2 * height * width:
        raise ValueError(f"h_net.basis has {b.shape[-1]} values per basis, expected 2*{height}*{width}; "
                         "pass the network size the checkpoint was trained at (size=(H, W), tool: --size H,W)")
    return b.reshape(n, 2, height, width).transpose(0, 2, 3, 1).copy()


def _read_torch(path: Path) -> dict[str, np.ndarray]:
    try:
        import torch  # optional extra, imported only for .pth files
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"reading {path} needs PyTorch (pip install torch); "
                          "or convert it to .npz with keys 'sd/<name>' elsewhere") from e
    obj = torch.load(str(path), map_location="cpu", weights_only=True)
    for key in ("state_dict", "model", "model_state_dict", "net"):
        if isinstance(obj, Mapping) and key in obj and isinstance(obj[key], Mapping):
            obj = obj[key]
            break
    if not isinstance(obj, Mapping):
        raise ValueError(f"{path}: expected a state dict, got {type(obj).__name__}")
    return {k: v.detach().cpu().float().numpy() if hasattr(v, "detach") else np.asarray(v)
            for k, v in obj.items()}


def read_state_dict(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Reads a released ``ckpt.pth`` (via torch) or an ``.npz`` with keys ``sd/<name>``.

    Returns (state dict, extras): for .npz files extras may hold 'basis' ``[N, 2, H, W]`` and
    'config' (the parsed ``config_json``).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"released checkpoint not found: {path}")
    extras: dict[str, Any] = {}
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as data:
                files = list(data.files)
                sd = {k[3:]: data[k] for k in files if k.startswith("sd/")}
                if "basis" in files:
                    extras["basis"] = data["basis"]  # checked by load_released
                if "config_json" in files:
                    extras["config"] = json.loads(str(data["config_json"]))
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a readable .npz ({e})") from e
        if not sd:
            raise ValueError(f"{path}: no 'sd/<name>' arrays found")
        return sd, extras
    return _read_torch(path), extras


def _config_from_release(extra_cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    cfg = dict(RELEASED_CONFIG)
    if extra_cfg:
        n = int(extra_cfg.get("num_basis", 24))
        if n != 24:
            raise ValueError(f"only the 24-basis release is supported, got num_basis={n}")
        for k in NETWORK_FIELDS:
            if k != "precision" and k in extra_cfg:
                cfg[k] = extra_cfg[k]
    return resolve_config(cfg)


def load_released(path: str | os.PathLike, size: tuple[int, int] | None = None,
                  ) -> tuple[CamFlow, dict[str, Any], np.ndarray]:
    """Released CamFlow weights -> (model, variables, bases).

    Args:
      path: ``ckpt.pth`` (needs torch; the state dict may be wrapped under 'state_dict' or
        'model') or ``.npz`` with keys 'sd/<name>' (as in the parity files).
      size: (H, W) of the stored basis; default: from the file (.npz 'basis' or
        'config_json' crop_size), else the release's 320x576.
    Returns:
      the :class:`CamFlow` (precision policy 'exact'), ``{'params', 'batch_stats'}`` (numpy float32 arrays),
      and the released bases ``[24, H, W, 2]`` float32.
    """
    sd, extras = read_state_dict(path)
    cfg = _config_from_release(extras.get("config"))
    variables = convert_state_dict(sd, cfg)
    if "basis" in extras:
        basis = _real_numbers(f"{path}: the array 'basis'", extras["basis"])
        if basis.ndim != 4 or basis.shape[1] != 2 or 0 in basis.shape:
            raise ValueError(f"{path}: the array 'basis' has shape {list(basis.shape)}; expected [N, 2, H, W] (N basis "
                             "fields, each its u and v planes on the H x W network grid)")
        bases = basis.transpose(0, 2, 3, 1).copy()
        if size is not None and tuple(bases.shape[1:3]) != tuple(size):
            raise ValueError(f"{path}: stored basis is {bases.shape[1:3]}, size {size} requested")
    else:
        if size is None:
            crop = (extras.get("config") or {}).get("crop_size")
            size = tuple(crop) if crop else RELEASED_SIZE
        try:
            bases = released_bases(sd, int(size[0]), int(size[1]))
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    if bases.shape[0] != sum(cfg["group_sizes"]):
        raise ValueError(f"{path}: basis has {bases.shape[0]} fields, the model needs {sum(cfg['group_sizes'])}")
    return build_model(cfg), variables, bases
