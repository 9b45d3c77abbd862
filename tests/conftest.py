"""Session-wide fixtures of the training tests (test_train, test_train_reliability): one
persistent compilation cache and one 4-step reference run for the whole session, so that the
training program is compiled once and the reference trained once, whichever modules run."""

import pytest


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    """JAX persistent compilation cache of the training subprocesses (test_train._env)."""
    return tmp_path_factory.mktemp("jax_cache")


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
