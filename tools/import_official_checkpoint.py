"""Converts the released PyTorch CamFlow weights into a camflow_jax inference checkpoint.

    python tools/import_official_checkpoint.py ckpt.pth -o checkpoints/camflow_released
    python tools/import_official_checkpoint.py parity.npz -o /tmp/ck   # keys 'sd/<name>'

Reading a ``.pth`` needs PyTorch (optional extra: ``pip install torch``); ``.npz`` files with
the same names do not. The output directory holds model.json + arrays (the released 24 bases
included) and loads with ``camflow_jax.models.checkpoint.load_model``. This script parses the
arguments and prints; the import is :func:`camflow_jax.models.importing.import_released`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # camflow_jax from this checkout, installed or not
    sys.path.insert(0, str(ROOT))

from camflow_jax.models.importing import import_released  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Convert released CamFlow weights to camflow_jax format.")
    p.add_argument("input", help="released ckpt.pth (needs torch) or .npz with 'sd/<name>' keys")
    p.add_argument("-o", "--output", required=True, help="output checkpoint directory")
    p.add_argument("--size", default=None,
                   help="H,W of the stored basis when the file does not say (default 320,576)")
    p.add_argument("-y", "--overwrite", action="store_true", help="replace an existing checkpoint")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        size = tuple(int(v) for v in args.size.split(",")) if args.size else None
        if size is not None and (len(size) != 2 or min(size) < 1):
            raise ValueError(f"--size must be H,W, got {args.size!r}")
        out, n, shape = import_released(args.input, args.output, size, args.overwrite)
    except (OSError, ValueError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2  # bad input, as for every camflow_jax tool
    print(f"wrote {out}: {n:,} parameters, bases {tuple(shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
