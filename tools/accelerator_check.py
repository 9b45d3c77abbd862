"""The accelerator check (docs/performance.md, "The accelerator check"): tests, benchmarks and a
slice of configs/pretrained.py on this machine's accelerator, within 8 minutes, into one JSON and
one log. Run from the repository root, no network needed:

    python tools/accelerator_check.py --out accel_check [--budget 480] [--train-slice 180]
        [--steps tests,train_device,...] [--size 320x576] [--batch 16] [--release-code PATH]

grain, ml-collections and tensorboardX must be importable (``pip install -e .`` installs them;
on a machine without network, install their wheels first). The JSON lists each step's status,
time, last lines and benchmark results; the log holds every step's full output.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # camflow_jax and tools.bench from this checkout, installed or not
    sys.path.insert(0, str(ROOT))

from tools.bench.accelerator_check import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
