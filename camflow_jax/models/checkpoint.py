"""Inference checkpoints: one directory holding a model's config, variables and static bases.

Layouts:

    DIR/model.json        {"format": ..., "model_config": {...}, "sha256": {...}}   (save_model)
    DIR/arrays/           Orbax checkpoint of {"params", "batch_stats"[, "bases"]}

    DIR/model.json        {"format": "camflow_jax.npz/1", ...}                    (save_compact)
    DIR/weights.npz       16-bit arrays with a float32 scale each (the shipped weights' format)

:func:`load_model` reads either, or a training workdir (``model.json`` +
``checkpoints/<step>/``: the newest intact step's parameters are used). Arrays are checked
against the SHA-256 sums recorded at save time (a training step keeps its sums in
``checkpoints/<step>/checksums/``); a damaged file is an error naming it, and in a workdir a
damaged step is skipped (with a warning) for the newest intact one.
:func:`pretrained_path` is the model shipped inside the package (``Predictor.from_pretrained``).

``model_config`` holds the fields of :class:`camflow_jax.models.ModelConfig` (the
architecture) plus ``height``/``width`` (the network input size) and a ``bases`` section
describing the static bases (used when the checkpoint does not store them, e.g. for trained
models whose stochastic bases are regenerated from their seed). :func:`write_model_json`
writes it; :func:`read_model_config` reads it back (files of every earlier version load).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

import jax
import numpy as np

from camflow_jax.io.atomic import write_text_atomic  # a kill mid-write leaves the old file
from camflow_jax.models import basis_set
from camflow_jax.models.camflow import build_model, resolve_config

FORMAT = "camflow_jax.inference/1"
NPZ_FORMAT = "camflow_jax.npz/1"
NPZ_FILE = "weights.npz"

__all__ = ["FORMAT", "NPZ_FORMAT", "save_model", "save_compact", "load_model", "read_model_config",
           "write_model_json", "latest_step", "steps", "flatten", "PRETRAINED", "WEIGHTS_DIR", "pretrained_path",
           "tree_checksums", "verify_tree", "read_step_checksums", "CHECKSUMS_ITEM"]


#: The model shipped in the package (docs/model_card.md).
PRETRAINED = "camflow_plus_synthetic"
#: The folder of the models shipped in the package, one subfolder each.
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


def pretrained_path(name: str = PRETRAINED) -> Path:
    """Folder of a model shipped inside the package (``camflow_jax/models/weights/<name>``)."""
    root = WEIGHTS_DIR
    path = root / name
    if not (path / "model.json").is_file():
        have = sorted(p.name for p in root.iterdir() if (p / "model.json").is_file()) if root.is_dir() else []
        raise FileNotFoundError(f"no shipped model {name!r} in {root} (available: {have or 'none'})")
    return path


def _ocp():
    import orbax.checkpoint as ocp  # lazily: importing orbax is slow and not always needed
    return ocp


def write_model_json(directory, model_config: Mapping[str, Any], fmt: str = FORMAT, **fields) -> dict:
    """Writes ``directory/model.json``: ``{"format", "model_config", **fields}``, the model config
    validated and completed through :class:`camflow_jax.models.ModelConfig` (its other keys,
    ``height``, ``width``, ``bases``, kept). Returns the model config as written."""

    cfg = resolve_config(model_config)

    write_text_atomic(Path(directory) / "model.json", json.dumps({"format": fmt, "model_config": cfg, **fields}, indent=2))
    return cfg


def save_model(directory, model_config: Mapping[str, Any], variables: Mapping[str, Any],
               bases=None, *, overwrite: bool = False) -> Path:
    """Writes an inference checkpoint (see module docstring). Returns the directory."""

    directory = Path(directory).absolute()
    cfg = resolve_config(model_config)
    for key in ("height", "width"):
        if key not in cfg:
            raise ValueError(f"save_model: model_config needs {key!r} (the network input size)")
    if (directory / "model.json").exists() and not overwrite:
        raise FileExistsError(f"{directory} already holds a checkpoint; pass overwrite=True to replace it")
    if "params" not in variables:
        raise ValueError("save_model: variables must contain 'params' (and usually 'batch_stats')")
    directory.mkdir(parents=True, exist_ok=True)
    tree = {"params": variables["params"], "batch_stats": variables.get("batch_stats", {})}
    if bases is not None:
        tree["bases"] = np.asarray(bases, np.float32)
    tree = jax.tree.map(np.asarray, tree)
    ocp = _ocp()
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(directory / "arrays", tree, force=True)
    write_model_json(directory, cfg, FORMAT, has_bases=bases is not None,
                     sha256={k: _sha256(v) for k, v in flatten(tree).items()})
    return directory


# ----------------------------------------------------------------------------------------------
# Compact weights (one .npz, 16-bit): the format of the weights shipped inside the package
# ----------------------------------------------------------------------------------------------

def flatten(tree, prefix: str = "") -> dict[str, np.ndarray]:
    """``{"a/b/c": array}`` of a nested dict of arrays (parameter paths as the trainer names them)."""
    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "/"))
        else:
            out[key] = np.asarray(v)
    return out


def _unflat(flat: Mapping[str, np.ndarray]) -> dict:
    tree: dict = {}
    for key, v in flat.items():
        node = tree
        parts = key.split("/")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return tree


def _sha256(a: np.ndarray) -> str:

    a = np.ascontiguousarray(a)
    return hashlib.sha256(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes()).hexdigest()


def _verify(flat: Mapping[str, np.ndarray], sums: Mapping[str, str], where) -> None:
    """Every array's SHA-256 against the one recorded at save time (flipped bits, truncated or
    swapped files are named instead of loading as wrong weights)."""
    missing = sorted(set(sums) - set(flat))
    if missing:
        raise ValueError(f"{where}: arrays missing from the checkpoint: {missing[:5]}")
    bad = [k for k, h in sums.items() if _sha256(flat[k]) != h]
    if bad:
        raise ValueError(f"{where}: checksum mismatch in {len(bad)} array(s) ({', '.join(bad[:3])}): "
                         "the file is damaged or was modified after saving")


#: The item of a training checkpoint (``checkpoints/<step>/checksums/``) holding the SHA-256 of
#: every array of the train state, written with the state (orbax finalizes them together).
CHECKSUMS_ITEM = "checksums"


def _key_name(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def tree_arrays(tree) -> dict[str, Any]:
    """``{"params/met/.../kernel": leaf}`` of any pytree (dicts, optax states, lists): the same
    names whether a tree is the live train state or restored from its saved metadata."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {"/".join(_key_name(k) for k in path): leaf for path, leaf in leaves}


def _host(x) -> np.ndarray:
    """A leaf on the host; a replicated array of a multi-process run from this process's copy."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(x.addressable_data(0))
    return np.asarray(x)


def tree_checksums(tree) -> dict[str, str]:
    """SHA-256 (dtype, shape and bytes) of every array of ``tree`` by :func:`tree_arrays` name."""
    return {k: _sha256(_host(v)) for k, v in tree_arrays(tree).items()}


def verify_tree(tree, sums: Mapping[str, str], where, required: tuple[str, ...] = ("",)) -> None:
    """ValueError unless every array of ``tree`` named in ``sums`` has its recorded SHA-256.
    Every name of ``sums`` starting with one of ``required`` must be in ``tree`` (a restore of
    part of a state, e.g. the weights only, passes ``("params/", "batch_stats/", "step")``)."""
    flat = {k: _host(v) for k, v in tree_arrays(tree).items()}
    needed = {k: h for k, h in sums.items() if k.startswith(required)}
    _verify(flat, {**needed, **{k: h for k, h in sums.items() if k in flat}}, where)


def read_step_checksums(step_dir) -> dict[str, str] | None:
    """The sums saved with a training checkpoint step; None for steps written before they were
    recorded. A damaged sums file is a ValueError (the step cannot be trusted)."""
    item = Path(step_dir) / CHECKSUMS_ITEM
    if not item.is_dir():
        return None
    ocp = _ocp()
    try:
        with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as ckptr:
            sums = ckptr.restore(item)["sha256"]
        if not isinstance(sums, dict):
            raise TypeError(f"sha256 is a {type(sums).__name__}")
        return sums
    except Exception as e:  # noqa: BLE001 (a missing, truncated or edited file)
        raise ValueError(f"{item}: unreadable checksums ({_first_line(e)})") from e


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200]}" if text else type(e).__name__


def save_compact(directory, model_config: Mapping[str, Any], variables: Mapping[str, Any], bases=None,
                 *, info: Mapping[str, Any] | None = None, overwrite: bool = False) -> Path:
    """Writes ``DIR/model.json`` + ``DIR/weights.npz``: every array as float16 scaled by its
    largest magnitude (a float32 scale per array: no float16 overflow, and small parameters
    such as LayerScale factors keep full float16 precision), half the size of float32.
    ``info`` (data, recipe, measured accuracy) is stored in model.json as is."""

    directory = Path(directory).absolute()
    if (directory / "model.json").exists() and not overwrite:
        raise FileExistsError(f"{directory} already holds a checkpoint; pass overwrite=True to replace it")
    cfg = resolve_config(model_config)  # refused before anything is written
    tree = {"params": variables["params"], "batch_stats": variables.get("batch_stats", {})}
    if bases is not None:
        tree["bases"] = np.asarray(bases, np.float32)
    arrays = {}
    for key, a in flatten(jax.tree.map(np.asarray, tree)).items():
        a = np.asarray(a, np.float32)
        if not np.all(np.isfinite(a)):
            raise ValueError(f"save_compact: {key} has non-finite values")
        scale = np.float32(np.max(np.abs(a))) if a.size else np.float32(0)
        scale = scale if scale > 0 else np.float32(1)
        arrays[key] = (a / scale).astype(np.float16)
        arrays[key + "@scale"] = np.asarray(scale, np.float32)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (NPZ_FILE + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(directory / NPZ_FILE)
    write_model_json(directory, cfg, NPZ_FORMAT, has_bases=bases is not None,
                     sha256={k: _sha256(v) for k, v in arrays.items()}, info=dict(info or {}))
    return directory


def _load_compact(path: Path, meta: Mapping[str, Any]) -> tuple[dict, Any]:
    try:
        with np.load(path / NPZ_FILE, allow_pickle=False) as z:
            raw = {k: z[k] for k in z.files}
    except Exception as e:  # zipfile/numpy raise several types for damaged files
        raise ValueError(f"could not read {path / NPZ_FILE}: {type(e).__name__}: {e}") from e
    _verify(raw, meta.get("sha256") or {}, path / NPZ_FILE)
    flat = {k: raw[k].astype(np.float32) * raw[k + "@scale"] for k in raw if not k.endswith("@scale")}
    tree = _unflat(flat)
    return tree, tree.get("bases")


def steps(checkpoint_dir) -> list[int]:
    """Integer-named step folders under ``checkpoint_dir``, newest first (orbax's unfinished
    ``<step>.orbax-checkpoint-tmp*`` folders and moved-aside ``damaged_*`` ones are not steps)."""
    checkpoint_dir = Path(checkpoint_dir)
    if not checkpoint_dir.is_dir():
        return []
    return sorted((int(p.name) for p in checkpoint_dir.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)


def latest_step(checkpoint_dir) -> int | None:
    """Largest integer-named step folder under ``checkpoint_dir`` (None if there is none)."""
    found = steps(checkpoint_dir)
    return found[0] if found else None


def saved_tree(path: Path, single_device: bool = False):
    """The saved pytree of an Orbax item folder as metadata (shape and dtype per leaf), or as
    ``jax.ShapeDtypeStruct`` leaves on this host's first device with ``single_device=True``."""
    ocp = _ocp()
    with _quiet_orbax(), ocp.StandardCheckpointer() as ckptr:
        meta = ckptr.metadata(path)
    tree = getattr(meta, "item_metadata", meta)
    tree = getattr(tree, "tree", tree)
    if single_device:
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        tree = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), tree)
    return tree


def _restore_raw(path: Path) -> dict:
    """Restores a saved pytree onto this host's first device, whatever mesh wrote it (a model
    trained on 8 GPUs must load on a laptop)."""
    ocp = _ocp()
    try:
        target = saved_tree(path, single_device=True)
        with _quiet_orbax(), ocp.StandardCheckpointer() as ckptr:
            return ckptr.restore(path, target)
    except Exception as e:  # orbax raises a variety of errors for damaged folders
        raise ValueError(f"could not read the checkpoint arrays in {path}: {_first_line(e)}") from e


@contextlib.contextmanager
def _quiet_orbax():
    """A training workdir's item folders (checkpoints/<step>/state) keep their step metadata one
    level up; orbax warns about it on every read, which is noise for estimate/stabilize users."""
    absl_logger = logging.getLogger("absl")
    quiet = _DropMessage("Metadata file does not exist")
    absl_logger.addFilter(quiet)
    try:
        yield
    finally:
        absl_logger.removeFilter(quiet)


class _DropMessage(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def read_model_config(path) -> dict:
    """The ``model_config`` recorded in ``path/model.json`` (checkpoint directory or workdir)."""
    meta_file = Path(path) / "model.json"
    try:
        return dict(json.loads(meta_file.read_text())["model_config"])
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{meta_file} is malformed: {e}") from e


def load_model(path) -> tuple[Any, dict, np.ndarray, dict]:
    """Loads ``(model, variables, static_bases, model_config)`` from an inference checkpoint
    directory or a training workdir (latest step)."""

    path = Path(os.path.expanduser(str(path))).absolute()
    meta_file = path / "model.json"
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if not meta_file.is_file():
        raise FileNotFoundError(
            f"{path} is not a camflow_jax checkpoint (no model.json). Train one with "
            "`python -m camflow_jax.train --config=configs/synthetic.py --workdir=DIR`, or convert the "
            "released weights with `python tools/import_official_checkpoint.py ckpt.pth -o DIR`.")
    model_config = read_model_config(path)
    meta = json.loads(meta_file.read_text())
    if meta.get("format") == NPZ_FORMAT:
        tree, bases = _load_compact(path, meta)
        params, batch_stats = tree["params"], tree.get("batch_stats", {})
    elif (path / "arrays").is_dir():
        tree = _restore_raw(path / "arrays")
        if meta.get("sha256"):
            _verify({k: np.asarray(v) for k, v in flatten(tree).items()}, meta["sha256"], path / "arrays")
        params, batch_stats = tree["params"], tree.get("batch_stats", {})
        bases = tree.get("bases")
    else:
        state = _restore_intact_step(path / "checkpoints")
        params, batch_stats, bases = state["params"], state.get("batch_stats", {}), None
        if (path / "static_bases.npy").is_file():  # written by the trainer (e.g. released bases)
            bases = np.load(path / "static_bases.npy")
    if bases is None:
        bases = basis_set.static_bases(model_config)
    variables = {"params": params, "batch_stats": batch_stats or {}}
    model_config, variables = migrate_legacy_groups(model_config, variables)
    model = build_model(model_config)
    return model, variables, np.asarray(bases, np.float32), model_config


def _restore_intact_step(checkpoint_dir: Path) -> dict:
    """The train state of the newest step of a workdir that restores and matches its checksums.

    A damaged newer step is skipped with a warning naming it (it is left where it is: a reader
    does not rearrange a workdir a trainer may be using; the trainer moves it aside when it
    resumes). No intact step: a ValueError naming the newest one's problem."""
    found = steps(checkpoint_dir)
    if not found:
        raise FileNotFoundError(f"{checkpoint_dir.parent} has model.json but neither arrays/ nor checkpoints/<step>/")
    failed = []
    for step in found:
        step_dir = checkpoint_dir / str(step)
        try:
            state = _restore_raw(step_dir / "state")
            sums = read_step_checksums(step_dir)
            if sums is not None:
                verify_tree(state, sums, step_dir, required=("params/", "batch_stats/"))
        except ValueError as e:
            failed.append((step, str(e)))
            continue
        for bad, why in failed:
            logging.getLogger(__name__).warning(
                "checkpoint step %d is damaged (%s); using step %d instead", bad, why, step)
        return state
    step, why = failed[0]
    raise ValueError(f"no intact checkpoint in {checkpoint_dir}: step {step}: {why}"
                     + (f" (and {len(failed) - 1} older step(s) damaged too)" if len(failed) > 1 else ""))


#: Group names written by earlier trainer versions -> the model's names.
_LEGACY_GROUP_NAMES = {"physical": "homography"}


def migrate_legacy_groups(model_config: Mapping[str, Any], variables: Mapping[str, Any]):
    """Renames basis groups that earlier trainer versions named differently (``physical`` for
    ``homography``) in a model config and its parameter tree; other input is returned as is."""
    names = list(model_config.get("group_names") or [])
    renames = {old: new for old, new in _LEGACY_GROUP_NAMES.items() if old in names}
    if not renames:
        return dict(model_config), variables

    def rename_key(key: str) -> str:
        for old, new in renames.items():
            for pre, post in ((f"tokens_{old}", f"tokens_{new}"), (f"norm_{old}", f"norm_{new}"),
                              (f"head_{old}", f"head_{new}"), (f"ca_{old}_level_", f"ca_{new}_level_")):
                if key == pre or (pre.endswith("_") and key.startswith(pre)):
                    return post + key[len(pre):]
        return key

    def walk(tree):
        return {rename_key(k): walk(v) if isinstance(v, Mapping) else v for k, v in tree.items()}

    cfg = dict(model_config, group_names=[renames.get(n, n) for n in names])
    return cfg, {k: walk(v) if isinstance(v, Mapping) else v for k, v in variables.items()}
