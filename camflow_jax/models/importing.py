"""Import of the released PyTorch CamFlow weights into a camflow_jax inference checkpoint: the
work behind ``python tools/import_official_checkpoint.py`` (docs/network.md).

:func:`import_released` reads the release (a ``.pth``, which needs PyTorch, or an ``.npz`` with
``sd/<name>`` keys) through :func:`camflow_jax.models.official.load_released` (whose errors name
the state-dict key of a bad weight), refuses a damaged basis (:func:`check_bases`) or one of a
size the network cannot take (:func:`check_size`), and writes model.json + arrays (the released
24 bases included), which :func:`camflow_jax.models.checkpoint.load_model` loads. The folder is
written next to the output and moved into place when complete.
"""

from __future__ import annotations

import os

import numpy as np

from camflow_jax.io import atomic
from camflow_jax.models import checkpoint, count_params, official

__all__ = ["CHECKPOINT_ENTRIES", "check_bases", "check_size", "import_released"]

#: What a checkpoint folder written here holds (replaced only with overwrite; other files are kept).
CHECKPOINT_ENTRIES = ("model.json", "arrays")


def check_bases(bases) -> np.ndarray:
    """The released bases ``[N, H, W, 2]`` as float32, or ValueError when they are not finite
    (the weights are checked by the loader; a NaN basis would make every flow NaN)."""
    b = np.asarray(bases, np.float32)
    if b.ndim != 4 or b.shape[-1] != 2 or b.shape[0] < 1:
        raise ValueError(f"the basis must be [N, H, W, 2], got shape {b.shape}")
    bad = b.size - int(np.count_nonzero(np.isfinite(b)))
    if bad:
        raise ValueError(f"the basis holds {bad} NaN/inf values out of {b.size}: the file is damaged")
    if not np.any(b):
        raise ValueError("the basis is all zeros: the file is damaged")
    return b


def check_size(size, multiple: int) -> None:
    """ValueError unless the basis size ``(H, W)`` (the network size the checkpoint is written
    for) is a multiple of the network's ``multiple``: such a checkpoint would be written, and
    then refused by every tool that loads it."""
    h, w = (int(v) for v in size)
    if h % multiple or w % multiple:
        raise ValueError(f"the basis is {h}x{w} (H x W), but the network's sides must be multiples of "
                         f"{multiple}: estimate would refuse the checkpoint. Pass the size the weights "
                         f"were trained at (--size H,W; the release: {official.RELEASED_SIZE[0]},"
                         f"{official.RELEASED_SIZE[1]})")


def import_released(input_path, output, size: tuple[int, int] | None = None,
                    overwrite: bool = False) -> tuple[str, int, tuple[int, ...]]:
    """Converts the released weights at ``input_path`` into the checkpoint folder ``output``;
    ``size`` (H, W) of the stored basis when the file does not say. An existing checkpoint is
    replaced only with ``overwrite`` (FileExistsError otherwise).

    Returns (absolute output path, number of parameters, basis shape)."""

    input_path, output = str(input_path), str(output)
    if os.path.exists(os.path.join(output, "model.json")) and not overwrite:
        raise FileExistsError(f"{output} already holds a checkpoint; pass -y/--overwrite to replace it")
    atomic.check_output_dir(output, CHECKPOINT_ENTRIES, overwrite, inputs=[input_path])
    model, variables, bases = official.load_released(input_path, size=size)
    bases = check_bases(bases)
    check_size(bases.shape[1:3], model.size_multiple)
    cfg = official.resolve_config(official.RELEASED_CONFIG)
    cfg.update(height=int(bases.shape[1]), width=int(bases.shape[2]),
               source={"released_checkpoint": str(input_path)})
    # Written next to OUTPUT and moved into place when complete (an interrupted run leaves
    # no half checkpoint and keeps the previous one).
    with atomic.atomic_dir(output, CHECKPOINT_ENTRIES) as tmp:
        checkpoint.save_model(tmp, cfg, variables, bases=bases, overwrite=True)
    return os.path.abspath(output), count_params(variables["params"]), bases.shape
