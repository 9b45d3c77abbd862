"""The one count of usable cores (camflow_jax.io.cpus): the process's affinity, lowered to a
cgroup v2 CPU quota; the thread and worker counts that follow it."""

import os

import pytest

from camflow_jax.io import cpus


def _affinity():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@pytest.mark.parametrize("text, cap", [("max 100000\n", None), ("100000 100000\n", 1), ("150000 100000\n", 2),
                                       ("1000 100000\n", 1), ("not numbers\n", None), ("", None)])
def test_a_quota_lowers_the_affinity_rounded_up(tmp_path, text, cap):
    f = tmp_path / "cpu.max"
    f.write_text(text)
    want = _affinity() if cap is None else min(_affinity(), cap)
    assert cpus.usable_cpus(str(f)) == want


def test_no_cgroup_file_leaves_the_affinity(tmp_path):
    assert cpus.usable_cpus(str(tmp_path / "absent")) == _affinity()


def test_the_counts_that_follow_it(monkeypatch):
    """The data workers, the stabilizer's measuring threads, the refiner's and the Predictor's threads read the
    one count (a container's quota reaches all of them)."""
    from camflow_jax import predictor
    from camflow_jax.data import pipeline
    from camflow_jax.refine import pairs
    from camflow_jax.stabilization import estimators

    for module in (pipeline, estimators, pairs, predictor):
        assert module.usable_cpus is cpus.usable_cpus
    monkeypatch.setattr(estimators, "usable_cpus", lambda: 1)
    assert estimators.default_workers() == 1
    monkeypatch.setattr(estimators, "usable_cpus", lambda: 64)
    assert estimators.default_workers() == estimators.MAX_WORKERS
