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

from camflow_jax.cli import harness  # noqa: E402
from camflow_jax.models.importing import import_released  # noqa: E402


def _size(text: str) -> tuple[int, int]:
    """argparse ``type=`` of --size: two whole numbers H,W, each at least 1."""
    try:
        size = tuple(int(v) for v in text.split(","))
    except ValueError:
        size = ()
    if len(size) != 2 or min(size) < 1:
        raise argparse.ArgumentTypeError(f"must be H,W (two whole numbers >= 1), got {text!r}")
    return size


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Convert released CamFlow weights to camflow_jax format.")
    p.add_argument("input", type=harness.path_arg,
                   help="released ckpt.pth (needs torch) or .npz with 'sd/<name>' keys")
    p.add_argument("-o", "--output", required=True, type=harness.path_arg, help="output checkpoint directory")
    p.add_argument("--size", default=None, type=_size,
                   help="H,W of the stored basis when the file does not say (default 320,576); "
                        "multiples of the network's size multiple (64)")
    p.add_argument("-y", "--overwrite", action="store_true", help="replace an existing checkpoint")
    harness.add_verbose_flag(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def run() -> int:
        try:
            out, n, shape = import_released(args.input, args.output, args.size, args.overwrite)
        except ImportError as e:  # a .pth without PyTorch
            raise ValueError(str(e)) from e
        print(f"wrote {out}: {n:,} parameters, bases {tuple(shape)}")
        return 0

    # One error path (cli/harness.run_cli): one line 'error: ...', exit 2, as every camflow_jax tool.
    return harness.run_cli(run, verbose=args.verbose)


if __name__ == "__main__":
    harness.exit_process(main())
