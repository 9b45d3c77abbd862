"""The accelerator check (docs/performance.md, "The accelerator check"): tests, benchmarks and a
slice of configs/pretrained.py on this machine's accelerator, within 8 minutes, into one JSON and
one log. Run from the repository root, no network needed:

    python tools/accelerator_check.py --out accel_check [--budget 480] [--train-slice 180]
        [--steps tests,train_device,...] [--size 320x576] [--batch 16] [--release-code PATH]

grain, ml-collections and tensorboardX must be importable (``pip install -e .`` installs them;
on a machine without network, install their wheels first). The JSON lists each step's status,
time, last lines and benchmark results; the log holds every step's full output.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # camflow_jax from this checkout, installed or not
    sys.path.insert(0, str(ROOT))

from tools.bench import accelerator_check as check


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for accelerator_check.json, the log and the benchmark JSONs")
    p.add_argument("--budget", type=float, default=check.DEFAULT_BUDGET_S, help="seconds for the whole check")
    p.add_argument("--train-slice", type=float, default=180.0, help="seconds of configs/pretrained.py training")
    p.add_argument("--repeats", type=int, default=10, help="timed calls per benchmark")
    p.add_argument("--steps", default=",".join(check.STEP_NAMES),
                   help="the steps to run, in this order (default: all, in the order shown)")
    p.add_argument("--size", default="320x576", help="HxW of the benchmarks (the slice trains at the config's)")
    p.add_argument("--batch", type=int, default=16, help="batch of the benchmarks")
    p.add_argument("--workdir", default=None, help="the slice's training workdir (default OUT/workdir); "
                   "run again with the same one to resume it")
    p.add_argument("--release-code", help="a checkout of the released CamFlow code (with torch: mode release)")
    p.add_argument("--plan", action="store_true", help="print the commands and stop")
    args = p.parse_args(argv)
    missing = [m for m in ("grain", "ml_collections", "tensorboardX") if importlib.util.find_spec(m) is None]
    if missing and not args.plan:
        print(f"accelerator_check.py: error: {', '.join(missing)} not installed (pip install -e . installs them)",
              file=sys.stderr)
        return 2
    try:
        h, w = (int(v) for v in args.size.lower().split("x"))
        steps = check.plan(args.out, train_slice_s=args.train_slice, repeats=args.repeats,
                           release_code=args.release_code, size=(h, w), batch=args.batch,
                           steps=tuple(n.strip() for n in args.steps.split(",") if n.strip()), workdir=args.workdir,
                           torch_available=importlib.util.find_spec("torch") is not None)
    except ValueError as e:
        p.error(str(e) if "step" in str(e) else f"--size {args.size!r}: expected HxW, e.g. 320x576")
    if args.plan:
        for s in steps:
            print(f"{s.name} (limit {s.limit_s:.0f} s): {' '.join(s.argv)}")
        return 0
    report = check.run_plan(steps, args.out, budget_s=args.budget, root=ROOT)
    for s in report["steps"]:
        print(f"{s['name']}: {s['status']}" + (f" in {s['seconds']} s" if "seconds" in s else ""))
    print(f"report: {Path(args.out) / 'accelerator_check.json'} ({report['seconds']} s)")
    return 0 if all(s["status"] == "ok" for s in report["steps"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
