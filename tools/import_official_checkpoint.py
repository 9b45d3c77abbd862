"""Converts the released PyTorch CamFlow weights into a camflow_jax inference checkpoint.

    python tools/import_official_checkpoint.py ckpt.pth -o checkpoints/camflow_released
    python tools/import_official_checkpoint.py parity.npz -o /tmp/ck   # keys 'sd/<name>'

Reading a ``.pth`` needs PyTorch (optional extra: ``pip install torch``); ``.npz`` files with
the same names do not. The output directory holds model.json + arrays (the released 24 bases
included) and loads with ``camflow_jax.checkpoint.load_model``.
"""

from __future__ import annotations

import argparse
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Convert released CamFlow weights to camflow_jax format.")
    p.add_argument("input", help="released ckpt.pth (needs torch) or .npz with 'sd/<name>' keys")
    p.add_argument("-o", "--output", required=True, help="output checkpoint directory")
    p.add_argument("--size", default=None,
                   help="H,W of the stored basis when the file does not say (default 320,576)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing checkpoint")
    return p.parse_args(argv)


def convert(input_path: str, output: str, size=None, overwrite: bool = False):
    from camflow_jax import checkpoint
    from camflow_jax.models import count_params, official

    model, variables, bases = official.load_released(input_path, size=size)
    cfg = official.resolve_config(official.RELEASED_CONFIG)
    cfg.update(height=int(bases.shape[1]), width=int(bases.shape[2]),
               source={"released_checkpoint": str(input_path)})
    out = checkpoint.save_model(output, cfg, variables, bases=bases, overwrite=overwrite)
    return out, count_params(variables["params"]), bases.shape


def main(argv=None) -> int:
    args = parse_args(argv)
    size = tuple(int(v) for v in args.size.split(",")) if args.size else None
    try:
        out, n, shape = convert(args.input, args.output, size, args.overwrite)
    except (FileNotFoundError, FileExistsError, ValueError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out}: {n:,} parameters, bases {tuple(shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
