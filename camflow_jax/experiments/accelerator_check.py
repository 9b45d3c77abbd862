"""One accelerator check: what a person with one GPU (or TPU host) runs, with the project on
``PYTHONPATH`` and no network, to see that training and inference work there and how fast
(issue "training on an accelerator"). ``tools/accelerator_check.py`` runs :func:`plan` with
:func:`run_plan` and writes one JSON report and one log.

The plan, in order, each step a subprocess with its own time limit, all within a total budget
(8 minutes by default; a step that would start with less than its limit left is skipped and
reported as such):

1. the accelerator-relevant tests (parity with the released weights, exports for cuda/tpu, the
   device renderer, worker-safe pipelines, the network);
2. ``tools/benchmark.py``: inference at batch 1 and 16 with the train step at 320x576 batch 16
   (mode ``all``: infer, infer, train, train_data with host rendering), flows-only, the
   refinement, train_data with device rendering, and the released PyTorch model where torch and
   a checkout of the release are given;
3. a slice of ``configs/pretrained.py`` (``stop_after_seconds``), from the README's training
   command with no other flags but the workdir and the slice.

Nothing here imports JAX: the steps run in their own processes, so one crashing step (a backend
that does not start, an out-of-memory) does not stop the others.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["Step", "plan", "run_plan", "TEST_FILES", "DEFAULT_BUDGET_S"]

#: The whole check's time limit: 8 minutes.
DEFAULT_BUDGET_S = 480.0
#: Seconds a training slice keeps for start-up, compilation and its last checkpoint.
SLICE_MARGIN_S = 60.0
#: Tests whose results depend on the backend: numerics (parity, the renderer), lowering and
#: export, and the input pipeline's worker processes.
TEST_FILES = ("tests/test_parity.py", "tests/test_accel.py", "tests/test_synthetic_device.py",
              "tests/test_train_workers.py", "tests/test_models.py")


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


def _bench(name: str, out: Path, limit_s: float, *args: str) -> Step:
    path = out / f"bench_{name}.json"
    return Step(name, (sys.executable, "tools/benchmark.py", *args, "--out", str(path)), limit_s, str(path))


def plan(out, *, train_slice_s: float = 180.0, repeats: int = 10, release_code: str | None = None,
         torch_available: bool = False) -> list[Step]:
    """The check's steps, writing under ``out`` (see the module's doc for what each measures)."""
    out = Path(out)
    py = sys.executable
    steps = [Step("tests", (py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TEST_FILES), 75.0)]
    size = ("--height", "320", "--width", "576")
    steps.append(_bench("all", out, 100.0, "--mode", "all", *size, "--batch", "16", "--train-batch", "16",
                        "--groups", "12,12,12", "--config", "pretrained", "--arch", "config",
                        "--repeats", str(repeats)))
    steps.append(_bench("flows_only", out, 35.0, "--mode", "flows_only", *size, "--batch", "16",
                        "--repeats", str(repeats)))
    steps.append(_bench("refine", out, 45.0, "--mode", "refine", "--repeats", str(repeats)))
    steps.append(_bench("train_device", out, 50.0, "--mode", "train", *size, "--train-batch", "16",
                        "--groups", "12,12,12", "--config", "pretrained", "--arch", "config", "--render", "device",
                        "--repeats", str(repeats)))
    if release_code and torch_available:
        steps.append(_bench("release", out, 90.0, "--mode", "release", *size, "--release-code", release_code,
                            "--repeats", str(repeats)))
    steps.append(Step("train_slice", (py, "-m", "camflow_jax.train", "--config=configs/pretrained.py",
                                      f"--workdir={out / 'workdir'}",
                                      f"--config.stop_after_seconds={train_slice_s:g}"),
                      train_slice_s + SLICE_MARGIN_S, slice_s=train_slice_s))
    return steps


def _tail(text: str, lines: int = 30) -> list[str]:
    return text.splitlines()[-lines:]


def run_plan(steps: list[Step], out, *, budget_s: float = DEFAULT_BUDGET_S, root=None, env=None) -> dict:
    """Runs ``steps`` in order within ``budget_s`` seconds; writes ``out/accelerator_check.json``
    (each step's status, seconds, last lines of output and benchmark results) and
    ``out/accelerator_check.log`` (every step's full output). Returns the report."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(root or Path(__file__).resolve().parents[2])
    env = dict(os.environ if env is None else env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    report = {"machine": {"python": platform.python_version(), "platform": platform.platform(),
                          "cpu_count": os.cpu_count()}, "budget_s": budget_s, "steps": []}
    start = time.monotonic()
    with open(out / "accelerator_check.log", "w") as log:
        for step in steps:
            left = budget_s - (time.monotonic() - start)
            entry = {"name": step.name, "command": shlex.join(step.argv), "limit_s": step.limit_s}
            if left < min(step.limit_s, 30.0):
                entry.update(status="skipped", why=f"{left:.0f} s of the budget left")
                report["steps"].append(entry)
                continue
            limit = min(step.limit_s, left)
            argv = step.argv
            if step.slice_s is not None:  # the slice gets what the budget leaves, up to its length
                seconds = max(min(step.slice_s, left - SLICE_MARGIN_S), 10.0)
                argv = tuple(f"--config.stop_after_seconds={seconds:g}" if a.startswith("--config.stop_after_seconds=")
                             else a for a in argv)
                entry.update(command=shlex.join(argv), slice_s=seconds)
            log.write(f"\n===== {step.name}: {entry['command']} (limit {limit:.0f} s)\n")
            log.flush()
            t0 = time.monotonic()
            try:
                proc = subprocess.run(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, timeout=limit)
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
            report["steps"].append(entry)
    report["seconds"] = round(time.monotonic() - start, 1)
    (out / "accelerator_check.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
