"""Converts the released PyTorch CamFlow weights into a camflow_jax inference checkpoint.

    python tools/import_official_checkpoint.py ckpt.pth -o checkpoints/camflow_released
    python tools/import_official_checkpoint.py parity.npz -o /tmp/ck   # keys 'sd/<name>'

Reading a ``.pth`` needs PyTorch (optional extra: ``pip install torch``); ``.npz`` files with
the same names do not. The output directory holds model.json + arrays (the released 24 bases
included) and loads with ``camflow_jax.checkpoint.load_model``.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Convert released CamFlow weights to camflow_jax format.")
    p.add_argument("input", help="released ckpt.pth (needs torch) or .npz with 'sd/<name>' keys")
    p.add_argument("-o", "--output", required=True, help="output checkpoint directory")
    p.add_argument("--size", default=None,
                   help="H,W of the stored basis when the file does not say (default 320,576)")
    p.add_argument("-y", "--overwrite", action="store_true", help="replace an existing checkpoint")
    return p.parse_args(argv)


#: What a checkpoint folder written here holds (replaced only with -y; other files are kept).
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


def convert(input_path: str, output: str, size=None, overwrite: bool = False):
    from camflow_jax import checkpoint, cli_utils
    from camflow_jax.models import count_params, official

    if os.path.exists(os.path.join(output, "model.json")) and not overwrite:
        raise FileExistsError(f"{output} already holds a checkpoint; pass -y/--overwrite to replace it")
    cli_utils.check_output_dir(output, CHECKPOINT_ENTRIES, overwrite, inputs=[input_path])
    model, variables, bases = official.load_released(input_path, size=size)
    bases = check_bases(bases)
    cfg = official.resolve_config(official.RELEASED_CONFIG)
    cfg.update(height=int(bases.shape[1]), width=int(bases.shape[2]),
               source={"released_checkpoint": str(input_path)})
    # Written next to OUTPUT and moved into place when complete (an interrupted run leaves
    # no half checkpoint and keeps the previous one).
    with cli_utils.atomic_dir(output, CHECKPOINT_ENTRIES) as tmp:
        checkpoint.save_model(tmp, cfg, variables, bases=bases, overwrite=True)
    return os.path.abspath(output), count_params(variables["params"]), bases.shape


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        size = tuple(int(v) for v in args.size.split(",")) if args.size else None
        if size is not None and (len(size) != 2 or min(size) < 1):
            raise ValueError(f"--size must be H,W, got {args.size!r}")
        out, n, shape = convert(args.input, args.output, size, args.overwrite)
    except (OSError, ValueError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2  # bad input, as for every camflow_jax tool
    print(f"wrote {out}: {n:,} parameters, bases {tuple(shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
