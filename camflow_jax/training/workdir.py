"""A training workdir's metadata and logs: the lock, ``config.json``, ``model.json``,
``static_bases.npy``, and the metrics (``metrics.jsonl`` and TensorBoard event files).

Layout (docs/training.md, "Outputs"): ``config.json``, ``model.json`` (loadable by
:func:`camflow_jax.models.checkpoint.load_model`), ``static_bases.npy``, ``checkpoints/<step>/``
(:mod:`camflow_jax.training.state`), ``metrics.jsonl`` (one JSON object per logged step),
``events.out.tfevents.*`` (the same scalars and the evaluations, for ``tensorboard --logdir``),
``eval_<step>.json``, ``summary.json``, ``.lock``; ``config_until_step_<N>.json`` when a run
resumed with changed settings.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
from pathlib import Path
from typing import Any, Mapping

import jax
import numpy as np

from camflow_jax.io import atomic
from camflow_jax.models import checkpoint


def prepare(workdir: Path) -> None:
    """Creates ``workdir`` if needed and checks, before anything is built or trained, that files
    can be created in it and in its ``checkpoints/`` (a probe file is created and removed): a
    file given as workdir, a path below a file, a read-only or immutable folder fail here as an
    OSError naming the path, not after the first steps."""
    if os.path.lexists(workdir) and not workdir.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "workdir exists and is not a folder", str(workdir))
    for folder in (workdir, workdir / "checkpoints"):
        if folder == workdir or folder.is_dir():
            atomic.check_writable(str(folder))


@contextlib.contextmanager
def naming(path):
    """An OSError inside without a file name (``write()`` on a full disk) gets ``path``."""
    try:
        yield
    except OSError as e:
        if e.filename or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror or os.strerror(e.errno), str(path)) from e


def write_text(path: Path, text: str) -> None:
    """``path`` replaced atomically (a kill or a full disk mid-write leaves the old file)."""
    with naming(path):
        atomic.write_text_atomic(path, text)


@contextlib.contextmanager
def locked(workdir: Path, enabled: bool = True):
    """An exclusive lock on ``workdir/.lock`` for the block (released by the OS when the process
    ends, however it ends): two trainers in one workdir would overwrite each other's
    checkpoints. A held lock is a ValueError naming its holder."""
    if not enabled:
        yield
        return
    import fcntl

    f = open(workdir / ".lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise ValueError(f"{workdir} is in use by another trainer ({holder}); wait for it or use another workdir")
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    f.flush()
    try:
        yield
    finally:
        f.close()


def check_resumable(workdir: Path, model_config: Mapping[str, Any]) -> None:
    """Refuses a workdir whose checkpoints belong to another model, before anything is built
    (orbax would otherwise fail deep inside the restore with a shape mismatch)."""
    if checkpoint.latest_step(workdir / "checkpoints") is None or not (workdir / "model.json").exists():
        return
    saved = checkpoint.read_model_config(workdir)
    wanted = json.loads(json.dumps(dict(model_config)))
    # The precision policy (or a model.json's older 'dtype') may change between runs: the same
    # weights, computed another way.
    differ = sorted(k for k in set(saved) | set(wanted)
                    if k not in ("precision", "dtype") and saved.get(k) != wanted.get(k))
    if differ:
        details = ", ".join(f"{k}: {saved.get(k)} -> {wanted.get(k)}" for k in differ)
        raise ValueError(f"{workdir} holds checkpoints of a different model ({details}); train into a new "
                         "workdir, or use config.init_from to start from those weights")


def saved_static_bases(workdir: Path) -> np.ndarray | None:
    """The static bases a resumed run used (e.g. a released model's own), None for a new run."""
    if checkpoint.latest_step(workdir / "checkpoints") is not None and (workdir / "static_bases.npy").is_file():
        return np.load(workdir / "static_bases.npy")
    return None


def log(msg: str) -> None:
    """Prints ``msg`` on process 0 only (the training run's log lines)."""
    if jax.process_index() == 0:
        print(msg, flush=True)


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def config_changes(old_json: str, new_json: str) -> list[str]:
    """``key: old -> new`` for every setting (dotted path) that differs between two
    ``config.json`` texts; settings only one side has count as changed (``-`` for absent)."""
    try:
        old, new = _flat(json.loads(old_json)), _flat(json.loads(new_json))
    except ValueError:
        return ["config.json: unreadable -> new"]
    return [f"{k}: {old.get(k, '-')} -> {new.get(k, '-')}" for k in sorted(set(old) | set(new))
            if old.get(k, "-") != new.get(k, "-")]


def keep_earlier_config(workdir: Path, config_json: str) -> None:
    """Before a resumed run replaces ``config.json``: when its settings differ from the ones
    that trained the checkpoints, says which (one note line) and keeps the earlier file as
    ``config_until_step_<latest checkpoint>.json``. A workdir with no checkpoint (nothing was
    trained with the old file) is just written over."""
    path, latest = workdir / "config.json", checkpoint.latest_step(workdir / "checkpoints")
    if latest is None or not path.is_file():
        return
    old = path.read_text()
    changes = config_changes(old, config_json)
    if not changes:
        return
    kept = workdir / f"config_until_step_{latest}.json"
    if not kept.exists():
        write_text(kept, old)
    log(f"note: resuming with {len(changes)} changed setting(s) ({'; '.join(changes)}); the settings of the "
        f"checkpoints up to step {latest} are kept in {kept.name}")


def write_metadata(workdir: Path, config_json: str, model_config: Mapping[str, Any], bases: np.ndarray) -> None:
    """``config.json`` (the training config as JSON text; a resumed run's changed settings are
    noted and the earlier file kept: :func:`keep_earlier_config`), ``model.json`` and
    ``static_bases.npy`` (process 0 only)."""
    keep_earlier_config(workdir, config_json)
    write_text(workdir / "config.json", config_json)
    with naming(workdir / "model.json"):
        checkpoint.write_model_json(workdir, model_config)
    with naming(workdir / "static_bases.npy"), atomic.atomic_file(workdir / "static_bases.npy") as tmp:
        np.save(tmp, bases)


class MetricWriter:
    """Scalars to ``metrics.jsonl`` and to TensorBoard event files in the workdir (process 0
    writes, others do nothing). Resuming at ``start`` drops the file's lines of later steps (they
    are run again) and tells TensorBoard to hide its events of those steps (``purge_step``)."""

    def __init__(self, workdir: Path, start: int, enabled: bool = True):
        self.file = self.tb = None
        if not enabled:
            return
        self.path = path = workdir / "metrics.jsonl"
        if path.is_file():
            lines = path.read_text().splitlines(keepends=True)
            keep = [ln for ln in lines if _step_of(ln) is not None and _step_of(ln) <= start]
            if len(keep) != len(lines):
                write_text(path, "".join(keep))
        self.file = open(path, "a")
        from tensorboardX import SummaryWriter  # lazily: only a training process needs it

        self.tb = SummaryWriter(str(workdir), purge_step=start + 1 if start else None)

    def write_scalars(self, step: int, scalars: Mapping[str, float], prefix: str = "train") -> None:
        if self.file is None:
            return
        with naming(self.path):
            self.file.write(json.dumps({"step": step, **scalars}) + "\n")
            self.file.flush()
        with naming(self.tb.file_writer.get_logdir()):
            for k, v in scalars.items():
                self.tb.add_scalar(f"{prefix}/{k}", v, step)
            self.tb.flush()

    def write_eval(self, step: int, table: Mapping[str, Mapping[str, Mapping[str, float]]]) -> None:
        """``{method: {category: {metric: value}}}`` as ``eval/<metric>/<category>/<method>``."""
        if self.tb is None:
            return
        for method, cats in table.items():
            for cat, vals in cats.items():
                for metric, v in vals.items():
                    self.tb.add_scalar(f"eval/{metric}/{cat}/{method}", v, step)
        self.tb.flush()

    def close(self) -> None:
        if self.file is not None:
            with naming(self.path):
                self.file.close()
            self.tb.close()


def _step_of(line: str) -> int | None:
    """The step of a ``metrics.jsonl`` line; None for a blank or cut line (a run killed while
    writing it: the step is run again and logged anew)."""
    try:
        return int(json.loads(line).get("step", 0))
    except (ValueError, AttributeError, TypeError):
        return None
