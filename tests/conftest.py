"""Session-wide test setup.

One JAX persistent compilation cache serves the whole session: this process and every
subprocess a test starts (they inherit ``JAX_COMPILATION_CACHE_DIR``). A program that several
tests compile is then compiled once: the training program of every training subprocess, and
the shipped model's forward pass that the README, the notebook and the estimate CLI (one
Predictor, hence one set of jitted functions, per call) run at the same input size. A cache hit
loads the executable XLA wrote, so the tests run the same code either way. The cache starts
empty (a fresh temporary folder, removed at the end) unless ``JAX_COMPILATION_CACHE_DIR`` is
already set, in which case that cache is used. Every program is stored (threshold 0, unless
``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` is set), also inherited by the subprocesses.

The package's own caches (camflow_jax.compilation: the Predictor's exported programs, the static
bases) go to a fresh temporary folder too, ``CAMFLOW_JAX_CACHE_DIR``, also inherited by every
subprocess: a test run never reads or writes the per-user cache folder (~/.cache/camflow_jax).

The training tests (training/test_train.py, training/test_recovery.py) also share one 4-step
reference run for the whole session, so that the reference is trained once, whichever modules run.

The suite runs in worker processes (pytest-xdist, ``-n auto --dist loadfile`` in
pyproject.toml: one worker per core, at most 4, each test file on one worker; ``-n 0`` runs it
in this process). The workers share the caches and the reference run of the process that
started them, and the files that take longest are handed out first (:data:`LONGEST_FIRST`),
so that no worker is left with a long file at the end while the others idle.

The test files mirror the package (``tests/<folder>/test_<module>.py``, docs/architecture.md,
"Tests"); pytest imports them with ``--import-mode=importlib`` (two folders may hold files of
the same name) and puts the repository root and ``tests/`` on ``sys.path`` (``pythonpath`` in
pyproject.toml): the test files import :mod:`helpers` and the measurement package ``tools.bench``
(not installed) whichever directory pytest was started from.
"""

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from helpers import EVAL_FLAG, run_train, with_fast_compile

#: The folder of the test files.
TESTS = Path(__file__).resolve().parent

#: Test files handed to the workers first, longest first, by path under tests/ (seconds of each
#: file's tests in the default tier on 2 cores, 28 Nov 2026, `--durations=0`: training/test_train
#: 231, refine/test_refine 131, training/test_recovery 69, models/test_models 54,
#: test_batched_inference 53, tools/test_benchmark 51, tools/test_accel 48, training/test_losses
#: 47, of 1136 in all); every other file follows in its usual order.
LONGEST_FIRST = ("training/test_train.py", "refine/test_refine.py", "training/test_recovery.py",
                 "models/test_models.py", "test_batched_inference.py", "tools/test_benchmark.py",
                 "tools/test_accel.py", "training/test_losses.py")

MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"

def _xdist_worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def pytest_configure(config):
    missing = [name for name in LONGEST_FIRST if not (TESTS / name).is_file()]
    if missing:  # a test file moved or renamed: the ordering would silently lose it
        raise pytest.UsageError(f"conftest.LONGEST_FIRST names files that are not there: {missing}")
    os.environ["XLA_FLAGS"] = with_fast_compile(os.environ.get("XLA_FLAGS"))  # before any backend starts
    if _xdist_worker() and os.environ.get("CAMFLOW_JAX_CACHE_DIR"):
        # A worker: the caches of the process that started it (its environment, set below
        # before the workers were started), which removes them at the end.
        import jax

        jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ[MIN_TIME_ENV]))
        return
    root = tempfile.mkdtemp(prefix="camflow-jax-cache-")
    config.add_cleanup(lambda: shutil.rmtree(root, ignore_errors=True))
    os.environ["CAMFLOW_JAX_CACHE_DIR"] = root  # inherited by every subprocess
    path = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if not path:
        path = os.path.join(root, "jax")
        os.makedirs(path)
        os.environ["JAX_COMPILATION_CACHE_DIR"] = path  # inherited by every subprocess
    # Every program stored, not only those that took over JAX's default 1 s to compile: the
    # command-line subprocesses then read back the many small programs (eager ops, the
    # refinement's pieces) that each fresh process would otherwise compile again (about 8 % of
    # the CPU time of the CLI hardening tests on 2 cores).
    os.environ.setdefault(MIN_TIME_ENV, "0")
    import jax

    jax.config.update("jax_compilation_cache_dir", path)  # in case jax was imported already
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ[MIN_TIME_ENV]))


def pytest_collection_modifyitems(session, config, items):
    order = {TESTS / name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: order.get(item.path.resolve(), len(order)))  # stable: each file keeps its order


@pytest.fixture(scope="session")
def cache():
    """The session's JAX persistent compilation cache (the training subprocesses' too: helpers.train_env)."""
    return Path(os.environ["JAX_COMPILATION_CACHE_DIR"])


@pytest.fixture(scope="session")
def four_steps_one_device(tmp_path_factory, cache):
    """Workdir of an uninterrupted 4-step run on one device (checkpoints 2 and 4, evaluation at
    step 4, its stdout beside it): the reference that resumed and multi-device runs must match.
    Tests copy it before changing anything. Trained once per run: the first worker that needs
    it trains it, under a lock, in the folder the workers share; the others wait and read it."""
    root = tmp_path_factory.getbasetemp()
    if _xdist_worker():
        root = root.parent  # the run's folder, above each worker's own
    wd = root / "ref4"
    with open(root / "ref4.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "ref4.done").exists():
            shutil.rmtree(wd, ignore_errors=True)
            proc = run_train(wd, "--config.num_steps=4", EVAL_FLAG, cache=cache)
            (root / "ref4.stdout").write_text(proc.stdout)
            (root / "ref4.done").touch()
    return wd
