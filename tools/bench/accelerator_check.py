"""One accelerator check: what a person with one GPU (or TPU host) runs, with the project on
``PYTHONPATH`` and no network, to see that training and inference work there and how fast
(issue "training on an accelerator"). ``tools/accelerator_check.py`` runs :func:`plan` with
:func:`run_plan` and writes one JSON report and one log.

The plan, each step a subprocess with its own time limit, all within a total budget (8 minutes
by default; a step that would start with less than its limit left is skipped and reported as
such). The steps (:data:`STEP_NAMES`, in this default order: what a short lease needs most
first; ``--steps`` picks and orders them):

- ``tests``: the backend-dependent tests (:data:`TEST_FILES`);
- ``train_device``: ``python -m tools.bench benchmark --mode train`` at 320x576 batch 16, configs/pretrained.py's
  network, float32 at the backend's default precision (TF32 on NVIDIA), fed by the device
  renderer: the step's pairs/s on a fixed batch and fed (``pipeline_slowdown``);
- ``train_bf16``, ``train_exact``: the same under the bfloat16 and exact policies;
- ``train_slice``: a slice of ``configs/pretrained.py`` (``stop_after_seconds``), from the README's
  training command with no other flags but the workdir and the slice (``--init-from``: and
  ``init_from``, e.g. the weights an earlier lease brought back; ``--set KEY=VALUE``: a config
  setting; ``--config``: another config, e.g. configs/smoke.py for a rehearsal on the CPU); it takes what the budget leaves, up to its
  length, less the limits of the steps that need it (``export``);
- ``export``: the slice's latest weights as compact 16-bit package weights
  (``tools/export_pretrained.py``) in ``OUT/weights``, with the slice's ``metrics.jsonl`` (the
  loss curve) as ``OUT/train_metrics.jsonl``: what a lease brings back;
- ``train_host``: the train step fed by the host renderer (grain worker processes);
- ``infer`` (batch 16), ``flows_only`` and ``refine`` (batch 1): inference;
- ``refine_batch``: ``Predictor.predict_batch`` at the batch size, the network alone and refined,
  against single-pair calls;
- ``refine_trips``: the batched refinement's slowest-pair effect (iterations per level, and the
  time and accuracy with each level capped at the median direction's count);
- ``release``: the released PyTorch model, where torch and a checkout of the release are given.

Every benchmark runs with ``--compile-cache``: a program an earlier step compiled (the train
step, for the slice) is read from the per-user cache instead of compiled again.

Nothing here imports JAX: the steps run in their own processes, so one crashing step (a backend
that does not start, an out-of-memory) does not stop the others.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tools.bench import timing

#: The repository root: the steps run from there.
ROOT = Path(__file__).resolve().parents[2]

__all__ = ["DEFAULT_BUDGET_S", "SLICE_CONFIG", "STEP_NAMES", "TEST_FILES", "Step", "plan", "run_plan", "main"]

#: The whole check's time limit: 8 minutes.
DEFAULT_BUDGET_S = 480.0
#: Seconds a training slice keeps for start-up, compilation and its last checkpoint.
SLICE_MARGIN_S = 60.0
#: Tests whose results depend on the backend: numerics (parity with the released weights under
#: the exact policy, the device renderer against the numpy one) and the input pipeline's worker
#: processes next to a process that holds the accelerator. (Lowering for cuda/tpu,
#: tests/tools/test_accel.py, runs on any CPU and is left to CI.)
TEST_FILES = ("tests/models/test_parity.py", "tests/data/test_synthetic_device.py",
              "tests/data/test_train_workers.py")
#: The steps :func:`plan` knows, in the default order: what a short lease needs most comes first
#: (a step that does not fit in what the budget leaves is skipped, and the slice takes the rest).
STEP_NAMES = ("tests", "train_device", "train_bf16", "train_slice", "export", "train_exact", "train_host", "infer",
              "flows_only", "refine", "refine_batch", "refine_trips", "release")
#: The training config the slice runs by default: the README's accelerator recipe.
SLICE_CONFIG = "configs/pretrained.py"


@dataclasses.dataclass(frozen=True)
class Step:
    """One command of the check: ``argv`` run from the repository root, at most ``limit_s``
    seconds; ``json`` names the benchmark report it writes, if any."""

    name: str
    argv: tuple[str, ...]
    limit_s: float
    json: str | None = None
    #: a training slice: its ``stop_after_seconds`` shrinks to what the budget leaves (less
    #: :data:`SLICE_MARGIN_S` for start-up, compilation and the final checkpoint)
    slice_s: float | None = None
    #: environment variables of this step alone
    env: tuple[tuple[str, str], ...] = ()
    #: a step that reads the slice's results: a slice before it leaves this step's limit free
    after_slice: bool = False
    #: files copied into the check's folder after the step, ``(source, name in out)``, where present
    collect: tuple[tuple[str, str], ...] = ()


def _bench(name: str, out: Path, limit_s: float, *args: str) -> Step:
    path = out / f"bench_{name}.json"
    # --compile-cache: a step compiled by an earlier step (the train step of train_device,
    # say) is read from the per-user cache, not compiled again
    return Step(name, (sys.executable, "-m", "tools.bench", "benchmark", *args, "--compile-cache", "--out", str(path)),
                limit_s, str(path))


def plan(out, *, train_slice_s: float = 180.0, repeats: int = 10, release_code: str | None = None,
         torch_available: bool = False, size: tuple[int, int] = (320, 576), batch: int = 16,
         steps: tuple[str, ...] | None = None, workdir=None, config: str = SLICE_CONFIG,
         init_from: str | None = None, overrides: tuple[str, ...] = ()) -> list[Step]:
    """The check's steps, writing under ``out`` (see the module's doc for what each measures):
    ``steps`` picks and orders them by name (default :data:`STEP_NAMES`, ``release`` only with
    torch and ``release_code``); ``size`` and ``batch`` are the benchmarks' (the slice trains at
    its config's own); ``workdir`` is the slice's (default ``out/workdir``: keep it outside
    ``out`` where only a few files may come back), ``config`` its config file, ``init_from``
    the weights it starts from (the config's ``init_from``; resuming ``workdir`` comes first)
    and ``overrides`` its config settings, ``KEY=VALUE`` each (``--config.KEY=VALUE``)."""
    out = Path(out)
    py = sys.executable
    wd = Path(workdir) if workdir else out / "workdir"
    unknown = sorted(set(steps or ()) - set(STEP_NAMES))
    if unknown:
        raise ValueError(f"unknown step(s) {', '.join(unknown)}; the steps are {', '.join(STEP_NAMES)}")
    hw = ("--height", str(size[0]), "--width", str(size[1]))
    train = (*hw, "--train-batch", str(batch), "--config", "pretrained", "--arch", "config",
             "--repeats", str(repeats))
    # The train steps compile for 1-2 minutes at 320x576 batch 16 on one GPU (one H200: 87 s and 113 s in
    # float32; the bfloat16 step had not finished compiling after 105 s), hence their longer limits.
    known = {
        "tests": Step("tests", (py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TEST_FILES), 150.0,
                      env=(("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),)),
        "train_device": _bench("train_device", out, 200.0, "--mode", "train", *train,
                                    "--render", "device", "--precision", "default"),
        "train_bf16": _bench("train_bf16", out, 280.0, "--mode", "train", *train, "--render", "device",
                             "--precision", "bfloat16"),
        "train_exact": _bench("train_exact", out, 240.0, "--mode", "train", *train, "--render", "device",
                              "--precision", "exact"),
        "train_host": _bench("train_host", out, 150.0, "--mode", "train", *train,
                                  "--render", "host", "--precision", "default"),
        "infer": _bench("infer", out, 120.0, "--mode", "infer", *hw, "--batch", str(batch),
                        "--repeats", str(repeats)),
        "flows_only": _bench("flows_only", out, 90.0, "--mode", "flows_only", *hw, "--batch", "1",
                             "--repeats", str(repeats)),
        "refine": _bench("refine", out, 90.0, "--mode", "refine", *hw, "--repeats", str(repeats)),
        "refine_batch": _bench("refine_batch", out, 240.0, "--mode", "refine_batch", *hw, "--batch", str(batch),
                               "--repeats", str(repeats)),
        # compiles the network and two refinement programs (on one H200: about 50 s and 25 s each)
        "refine_trips": _bench("refine_trips", out, 180.0, "--mode", "refine_trips", *hw, "--batch", str(batch),
                               "--repeats", str(repeats)),
        "train_slice": Step("train_slice", (py, "-m", "camflow_jax.train", f"--config={config}", f"--workdir={wd}",
                                            *((f"--config.init_from={init_from}",) if init_from else ()),
                                            *(f"--config.{kv}" for kv in overrides),
                                            f"--config.stop_after_seconds={train_slice_s:g}"),
                            train_slice_s + SLICE_MARGIN_S, slice_s=train_slice_s),
        # 16-bit weights (a 3 M-parameter model: about 6 MB) and the loss curve: what comes back
        "export": Step("export", (py, str(ROOT / "tools" / "export_pretrained.py"), str(wd), "--out",
                                  str(out / "weights"), "-y", "--pairs", "4"), 150.0,
                       env=(("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),), after_slice=True,
                       collect=((str(wd / "metrics.jsonl"), "train_metrics.jsonl"),)),
    }
    if release_code and torch_available:
        known["release"] = _bench("release", out, 120.0, "--mode", "release", *hw, "--release-code",
                                  release_code, "--repeats", str(repeats))
    return [known[n] for n in (steps or STEP_NAMES) if n in known]


def _tail(text: str, lines: int = 30) -> list[str]:
    return text.splitlines()[-lines:]


def run_plan(steps: list[Step], out, *, budget_s: float = DEFAULT_BUDGET_S, root=None, env=None) -> dict:
    """Runs ``steps`` in order within ``budget_s`` seconds; writes ``out/accelerator_check.json``
    (each step's status, seconds, last lines of output and benchmark results) and
    ``out/accelerator_check.log`` (every step's full output). Returns the report."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(root or ROOT)
    env = dict(os.environ if env is None else env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    report = {"machine": timing.host_info(), "budget_s": budget_s, "steps": []}
    start = time.monotonic()
    with open(out / "accelerator_check.log", "w") as log:
        for i, step in enumerate(steps):
            left = budget_s - (time.monotonic() - start)
            entry = {"name": step.name, "command": shlex.join(step.argv), "limit_s": step.limit_s}
            if left < min(step.limit_s, 30.0):
                entry.update(status="skipped", why=f"{left:.0f} s of the budget left")
                report["steps"].append(entry)
                continue
            limit = min(step.limit_s, left)
            argv = step.argv
            if step.slice_s is not None:  # the slice gets what the budget leaves, up to its length,
                # less what the steps that read its results need
                keep = sum(s.limit_s for s in steps[i + 1:] if s.after_slice)
                seconds = max(min(step.slice_s, left - SLICE_MARGIN_S - keep), 10.0)
                limit = min(limit, seconds + SLICE_MARGIN_S)
                argv = tuple(f"--config.stop_after_seconds={seconds:g}" if a.startswith("--config.stop_after_seconds=")
                             else a for a in argv)
                entry.update(command=shlex.join(argv), slice_s=seconds)
            log.write(f"\n===== {step.name}: {entry['command']} (limit {limit:.0f} s)\n")
            log.flush()
            t0 = time.monotonic()
            try:
                proc = subprocess.run(argv, cwd=root, env={**env, **dict(step.env)}, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, timeout=limit)
                text, rc = proc.stdout, proc.returncode
                entry["status"] = "ok" if rc == 0 else "failed"
            except subprocess.TimeoutExpired as e:
                text = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
                rc = None
                entry["status"] = "timed out"
            entry.update(rc=rc, seconds=round(time.monotonic() - t0, 1), tail=_tail(text))
            log.write(text)
            log.flush()
            if step.json and Path(step.json).is_file():
                entry["results"] = json.loads(Path(step.json).read_text())
            for src, name in step.collect:
                if Path(src).is_file():
                    shutil.copyfile(src, out / name)
                    entry.setdefault("collected", []).append(name)
            report["steps"].append(entry)
    report["seconds"] = round(time.monotonic() - start, 1)
    (out / "accelerator_check.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv=None) -> int:
    """The command line (``python tools/accelerator_check.py`` or ``python -m tools.bench
    accelerator_check``): the plan, run, and one line per step."""
    p = argparse.ArgumentParser(prog="tools/accelerator_check.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for accelerator_check.json, the log and the benchmark JSONs")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds for the whole check")
    p.add_argument("--train-slice", type=float, default=180.0, help="seconds of configs/pretrained.py training")
    p.add_argument("--repeats", type=int, default=10, help="timed calls per benchmark")
    p.add_argument("--steps", default=",".join(STEP_NAMES),
                   help="the steps to run, in this order (default: all, in the order shown)")
    p.add_argument("--size", default="320x576", help="HxW of the benchmarks (the slice trains at the config's)")
    p.add_argument("--batch", type=int, default=16, help="batch of the benchmarks")
    p.add_argument("--workdir", default=None, help="the slice's training workdir (default OUT/workdir); "
                   "run again with the same one to resume it")
    p.add_argument("--config", default=SLICE_CONFIG, help="the slice's training config (e.g. configs/smoke.py "
                   "to rehearse the check on a CPU)")
    p.add_argument("--init-from", default=None, metavar="DIR",
                   help="the slice starts from these weights (e.g. an earlier lease's OUT/weights)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config setting of the slice (--config.KEY=VALUE), e.g. model.precision=bfloat16; repeatable")
    p.add_argument("--release-code", help="a checkout of the released CamFlow code (with torch: mode release)")
    p.add_argument("--plan", action="store_true", help="print the commands and stop")
    args = p.parse_args(argv)
    missing = [m for m in ("grain", "ml_collections", "tensorboardX") if importlib.util.find_spec(m) is None]
    if missing and not args.plan:
        print(f"accelerator_check.py: error: {', '.join(missing)} not installed (pip install -e . installs them)",
              file=sys.stderr)
        return 2
    bad = [kv for kv in args.set if "=" not in kv or kv.startswith(("=", "stop_after_seconds="))]
    if bad:
        p.error(f"--set {bad[0]!r}: expected KEY=VALUE (a config setting other than stop_after_seconds, "
                "which --train-slice sets)")
    for flag, path in (("--config", args.config), ("--init-from", args.init_from)):
        if path is not None and not (ROOT / path).exists():  # relative paths: from the repository root
            p.error(f"{flag} {path}: no such file or folder")
    try:
        h, w = (int(v) for v in args.size.lower().split("x"))
        steps = plan(args.out, train_slice_s=args.train_slice, repeats=args.repeats,
                     release_code=args.release_code, size=(h, w), batch=args.batch,
                     steps=tuple(n.strip() for n in args.steps.split(",") if n.strip()), workdir=args.workdir,
                     config=args.config, init_from=args.init_from, overrides=tuple(args.set),
                     torch_available=importlib.util.find_spec("torch") is not None)
    except ValueError as e:
        p.error(str(e) if "step" in str(e) else f"--size {args.size!r}: expected HxW, e.g. 320x576")
    if args.plan:
        for s in steps:
            print(f"{s.name} (limit {s.limit_s:.0f} s): {' '.join(s.argv)}")
        return 0
    report = run_plan(steps, args.out, budget_s=args.budget, root=ROOT)
    for s in report["steps"]:
        print(f"{s['name']}: {s['status']}" + (f" in {s['seconds']} s" if "seconds" in s else ""))
    print(f"report: {Path(args.out) / 'accelerator_check.json'} ({report['seconds']} s)")
    return 0 if all(s["status"] == "ok" for s in report["steps"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
