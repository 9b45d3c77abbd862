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

The training tests (test_train, test_train_reliability) also share one 4-step reference run
for the whole session, so that the reference is trained once, whichever modules run.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def pytest_configure(config):
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


@pytest.fixture(scope="session")
def cache():
    """The session's JAX persistent compilation cache (the training subprocesses' too: test_train._env)."""
    return Path(os.environ["JAX_COMPILATION_CACHE_DIR"])


@pytest.fixture(scope="session")
def four_steps_one_device(tmp_path_factory, cache):
    """Workdir of an uninterrupted 4-step run on one device (checkpoints 2 and 4, evaluation at
    step 4, its stdout beside it): the reference that resumed and multi-device runs must match.
    Tests copy it before changing anything."""
    from test_train import EVAL, _train

    wd = tmp_path_factory.mktemp("ref")
    proc = _train(wd, "--config.num_steps=4", EVAL, cache=cache)
    (wd.parent / f"{wd.name}.stdout").write_text(proc.stdout)
    return wd
