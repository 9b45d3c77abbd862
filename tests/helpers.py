"""Helpers the test files share: a test file imports these, never another test file.

* The XLA flags of the suite and of its subprocesses (:func:`with_fast_compile`,
  :func:`with_devices`; ``conftest.py`` sets the first for the session).
* The training CLI's smoke run (:data:`TRAIN_FLAGS`, :func:`run_train`) and what a run leaves
  in its workdir (:func:`logged_metrics`, :func:`trained_params`), used by test_train.py, the
  training recovery tests, the worker tests and the architecture test (and by conftest's
  session-wide 4-step reference run).
* :func:`assert_one_line_error`: a command line refused bad input the way every CLI does.
* :func:`digest`: one hash of a file or folder, to check that a refused run changed nothing.

Imports nothing of JAX at import time: ``conftest.py`` imports this module before any backend starts.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

#: The repository root (the test files are one or two folders below it: import this, never count
#: ``Path(__file__).parents``).
ROOT = Path(__file__).resolve().parents[1]
#: The committed test data (``tests/fixtures``: the released model's parity fixture).
FIXTURES = ROOT / "tests" / "fixtures"

#: XLA's lowest backend (LLVM) optimization level, for this process and every subprocess: most
#: of the suite's CPU time is compiling programs that then run once or a few times, and this
#: compiles them about a quarter faster (a train-step gradient: 17 s against 23 s) for slower
#: execution (1.5 s against 1.2 s). The programs compute the same operations; only the machine
#: code differs (summation order within a vectorized reduction, at float32 rounding level).
FAST_COMPILE_FLAG = "--xla_backend_optimization_level=0"

# One pyramid level, one Swin block (the fewest ModelConfig allows: the three basis groups and
# their heads, the mask net and the depth bases stay); 8 training pairs at batch 4: 2 steps per
# epoch, so a 4-step run also crosses an epoch (the data order and the lr decay of epoch 2);
# 64x64 input. No held-out evaluation (runs compared by their losses and weights); the reference
# run (conftest.four_steps_one_device) evaluates 2 pairs: EVAL_FLAG.
TRAIN_FLAGS = ["--config=configs/smoke.py", "--config.batch_size=4", "--config.checkpoint_every=2",
               "--config.data.num_eval=0", "--config.data.num_train=8", "--config.model.depths=(1,)",
               "--config.model.layer_depth=(1,)", "--config.model.num_heads=(2,)", "--config.model.width=64"]
EVAL_FLAG = "--config.data.num_eval=2"


def with_fast_compile(flags: str | None) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with :data:`FAST_COMPILE_FLAG` added unless it sets a level."""
    flags = flags or ""
    return flags if "xla_backend_optimization_level" in flags else f"{flags} {FAST_COMPILE_FLAG}".strip()


def with_devices(count: int, flags: str | None = None) -> str:
    """An ``XLA_FLAGS`` value for a subprocess with ``count`` forced host (CPU) devices: the
    suite's flags (``flags``, default this process's, e.g. the fast-compile level) plus the
    device count."""
    flags = os.environ.get("XLA_FLAGS", "") if flags is None else flags
    return f"{flags} --xla_force_host_platform_device_count={int(count)}".strip()


def train_env(tmp_cache, devices=1):
    """The environment of a training subprocess: CPU, ``devices`` forced devices, the suite's
    flags and the compilation cache ``tmp_cache``."""
    env = dict(os.environ)
    # The suite's flags (conftest: the fast-compile level) and the device count.
    env["XLA_FLAGS"] = with_devices(devices)
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_cache)
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    return env


def run_train(workdir, *args, devices=1, cache, extra_env=None, check=True):
    """``python -m camflow_jax.train`` with :data:`TRAIN_FLAGS` and ``args`` into ``workdir``
    (a subprocess; with ``check`` a failure raises, naming the run's output)."""
    env = train_env(cache, devices)
    env.update(extra_env or {})
    proc = subprocess.run([sys.executable, "-m", "camflow_jax.train", f"--workdir={workdir}", *TRAIN_FLAGS, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"training failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def trained_params(workdir):
    """Every array of the workdir's latest model (parameters and BatchNorm statistics), by path."""
    import jax

    from camflow_jax.models import checkpoint
    _, variables, _, _ = checkpoint.load_model(workdir)
    return {"/".join(str(getattr(k, "key", k)) for k in p): np.asarray(v)
            for p, v in jax.tree_util.tree_flatten_with_path(variables)[0]}


def logged_metrics(workdir):
    """The workdir's ``metrics.jsonl``, one dict a logged step."""
    return [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]


def assert_one_line_error(proc, *needles):
    """Bad input: exit code 2 and one 'error: ...' line naming the problem, no traceback."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    for n in needles:
        assert n in lines[0], lines[0]


def digest(path) -> str:
    """Hash of a file, or of every file under a folder (names and bytes)."""
    path = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
        h.update(f.read_bytes())
    return h.hexdigest()
