"""The train state and its checkpoints: initialization, ``init_from``, restore and save.

The state is one pytree ``{'step', 'params', 'batch_stats', 'opt_state'}``. Orbax saves it
with the grain iterator state and the SHA-256 of every state array under
``workdir/checkpoints/<step>/{state,data,checksums}`` (docs/training.md, "Guarded runs"); a
step folder appears only once all three are complete (orbax writes into
``<step>.orbax-checkpoint-tmp`` and renames it). A restore takes the newest step that reads
back and matches its checksums and moves damaged newer ones aside (``damaged_<step>_<time>``,
never deleted). Checkpoints written before the checksums or before the state lost its unused
``rng`` entry still restore (without a check; the entry is read and dropped).
"""

from __future__ import annotations

import errno
import os
import re
import time
from pathlib import Path

import grain
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from camflow_jax import models
from camflow_jax.models import checkpoint
from camflow_jax.training.steps import path_str

#: Entries of checkpoints written by earlier versions that the state no longer has.
LEGACY_STATE_KEYS = ("rng",)


def init_train_state(config, model, tx, key, sharding) -> dict:
    """The freshly initialized train state, placed with ``sharding``."""
    def init_state(variables):
        return {"step": jnp.zeros((), jnp.int32), "params": variables["params"],
                "batch_stats": variables.get("batch_stats", {}), "opt_state": tx.init(variables["params"])}

    # Drawn on the host (numpy, seeded by the key): identical on every process, no init compile.
    variables = jax.tree.map(jnp.asarray, models.init_variables(
        model, key, config.model.height, config.model.width, identity_motion=config.identity_init))
    return jax.jit(init_state, out_shardings=sharding)(variables)


_GROUP_PARAM = re.compile(r"^(?:tokens|norm|head)_(\w+)$|^ca_(\w+)_level_\d+$")


def _group_of(path: str) -> str | None:
    """The basis group a parameter path belongs to (``met/head_depth/out/kernel`` -> 'depth')."""
    for part in path.split("/"):
        m = _GROUP_PARAM.match(part)
        if m:
            return m.group(1) or m.group(2)
    return None


def init_from_checkpoint(fresh: dict, loaded: dict, new_groups) -> tuple[dict, dict]:
    """``fresh`` (``{'params', 'batch_stats'}``) with every array of ``loaded`` copied in by path.

    Strict both ways, so a renamed or reshaped group cannot silently keep its random init:
    every loaded array must land on a same-path, same-shape array, and every array left fresh
    must belong to a basis group in ``new_groups`` (the depth group when starting CamFlow+
    from CamFlow). Returns ``(variables, report)``; ``report`` counts arrays and scalars.
    """
    new_groups = set(new_groups)
    out, loaded_n, fresh_n, loaded_p, fresh_p = {}, 0, 0, 0, 0
    problems = []
    for coll in ("params", "batch_stats"):
        target, source = checkpoint.flatten(fresh.get(coll, {})), checkpoint.flatten(loaded.get(coll, {}))
        for path, x in source.items():
            if path not in target:
                problems.append(f"{coll}/{path} has no counterpart in the model")
            elif np.shape(x) != target[path].shape:
                problems.append(f"{coll}/{path} is {tuple(np.shape(x))} in the checkpoint, "
                                f"{tuple(target[path].shape)} in the model")
        for path, x in target.items():
            if path in source and np.shape(source[path]) == x.shape:
                loaded_n, loaded_p = loaded_n + 1, loaded_p + x.size
            elif path not in source and _group_of(path) in new_groups:
                fresh_n, fresh_p = fresh_n + 1, fresh_p + x.size
            elif path not in source:
                problems.append(f"{coll}/{path} is missing from the checkpoint")

        def pick(p, x, source=source):
            y = source.get(path_str(p))
            return x if y is None or np.shape(y) != x.shape else jnp.asarray(y, x.dtype)

        out[coll] = jax.tree_util.tree_map_with_path(pick, fresh.get(coll, {}))
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ValueError(f"config.init_from does not fit this model: {'; '.join(problems[:5])}{more}")
    return out, {"loaded_arrays": loaded_n, "loaded_values": int(loaded_p), "fresh_arrays": fresh_n,
                 "fresh_values": int(fresh_p), "fresh_groups": sorted(new_groups)}


def start_from(source, state: dict, tx, group_names, static: np.ndarray, sharding, log) -> tuple[dict, np.ndarray]:
    """``state`` with the weights of the model at ``source`` (``config.init_from``) and a fresh
    optimizer state; the source's static bases replace ``static`` when their shape matches (a
    released model is only meaningful with its own bases)."""
    _, loaded, loaded_bases, loaded_config = checkpoint.load_model(source)
    new_groups = set(group_names) - set(loaded_config.get("group_names") or [])
    fresh = {"params": state["params"], "batch_stats": state["batch_stats"]}
    variables, report = init_from_checkpoint(fresh, loaded, new_groups)
    state = jax.device_put(dict(state, **variables, opt_state=tx.init(variables["params"])), sharding)
    log(f"init_from {source}: {report['loaded_arrays']} arrays ({report['loaded_values']:,} values) loaded; "
        f"{report['fresh_arrays']} arrays ({report['fresh_values']:,} values) of new group(s) "
        f"{report['fresh_groups']} start from the initialization")
    return state, (loaded_bases if loaded_bases.shape == static.shape else static)


def checkpoint_manager(workdir: Path, keep: int) -> ocp.CheckpointManager:
    # cleanup_tmp_directories: the unfinished step a killed or failed save left behind is
    # removed when the next run opens the folder (it was never a checkpoint).
    return ocp.CheckpointManager(workdir / "checkpoints", item_names=("state", "data", checkpoint.CHECKSUMS_ITEM),
                                 options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                                                      cleanup_tmp_directories=True))


def save(mngr: ocp.CheckpointManager, step: int, state: dict, data_iter) -> None:
    """Starts saving ``step`` (orbax finishes writing in the background: :func:`wait` for it).
    A failed write, of this save or of the previous one, raises an OSError naming the folder
    (:func:`storage_error`)."""
    sums = checkpoint.tree_checksums(state)
    with storage_errors(mngr.directory):
        mngr.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), data=grain.checkpoint.CheckpointSave(data_iter),
            **{checkpoint.CHECKSUMS_ITEM: ocp.args.JsonSave({"format": "sha256/1", "sha256": sums})}))


def wait(mngr: ocp.CheckpointManager) -> None:
    """Blocks until the saves in flight are on disk (their failure as in :func:`save`)."""
    with storage_errors(mngr.directory):
        mngr.wait_until_finished()


_OS_ERROR_CODE = re.compile(r"os_error_code='?(\d+)")
_ERRNO_TEXT = {os.strerror(code): code for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES,
                                                    errno.EPERM, errno.EIO, errno.EFBIG)}


def storage_error(e: BaseException, path) -> OSError | None:
    """The OSError behind a failed checkpoint write, naming ``path`` (orbax's threads raise the
    OSError itself, or tensorstore's ValueError such as ``RESOURCE_EXHAUSTED: ... No space left
    on device [os_error_code='28']``); None for failures that are not the storage's."""
    if isinstance(e, OSError) and e.errno is not None:
        return OSError(e.errno, e.strerror or os.strerror(e.errno), e.filename or str(path))
    text = str(e)
    m = _OS_ERROR_CODE.search(text)
    code = int(m.group(1)) if m else next((c for t, c in _ERRNO_TEXT.items() if t in text), None)
    return None if code is None else OSError(code, os.strerror(code), str(path))


class storage_errors:
    """Context manager: a storage failure inside becomes :func:`storage_error`'s OSError."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if e is not None and isinstance(e, Exception):
            os_error = storage_error(e, self.path)
            if os_error is not None and os_error is not e:
                raise os_error from e
        return False


def _restore_step(mngr, step: int, state: dict, data_iter) -> dict:
    """One step's state (legacy entries read and dropped) into ``state``'s shapes and shardings;
    ``data_iter`` is set to the saved data position."""
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
    saved = checkpoint.saved_tree(Path(mngr.directory) / str(step) / "state", single_device=True)
    legacy = [k for k in LEGACY_STATE_KEYS if k in saved and k not in state]
    for k in legacy:
        abstract[k] = saved[k]
    restored = mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), data=grain.checkpoint.CheckpointRestore(data_iter)))
    step_dir = Path(mngr.directory) / str(step)
    sums = checkpoint.read_step_checksums(step_dir)
    if sums is not None:
        checkpoint.verify_tree(restored["state"], sums, step_dir)
    return {k: v for k, v in restored["state"].items() if k not in legacy}


def restore_latest(mngr: ocp.CheckpointManager, state: dict, dataset, log) -> tuple[dict, object, int]:
    """``(state, data iterator, step)`` of the newest intact checkpoint, or the given state, a
    fresh iterator and step 0 when there is none.

    Unreadable newer checkpoints, or ones whose arrays no longer match their checksums (a
    disk error, a changed byte), are moved aside, never deleted, once an older one has restored; if none restores, nothing is moved (the code
    or config likely changed) and a ValueError says so.
    """
    root = Path(mngr.directory)
    failed = []
    for step in sorted(mngr.all_steps(), reverse=True):
        data_iter = iter(dataset)
        try:
            state = _restore_step(mngr, step, state, data_iter)
        except Exception as e:  # orbax/tensorstore raise many types for damaged folders
            failed.append((step, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"))
            continue
        for bad, why in failed:
            aside = root / f"damaged_{bad}_{int(time.time())}"
            log(f"checkpoint step {bad} is unreadable ({why}); moved to {aside.name}")
            if jax.process_index() == 0:
                (root / str(bad)).rename(aside)
        if failed:
            mngr.reload()
        log(f"resumed from {root / str(step)} at step {step}")
        return state, data_iter, step
    if failed:
        raise ValueError(f"no checkpoint in {root} could be restored (step {failed[0][0]}: {failed[0][1]}); "
                         "nothing was moved. If they were written by another version of the code or config, "
                         "resume with that version, or train into a new workdir")
    return state, iter(dataset), 0
