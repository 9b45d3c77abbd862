"""The one count of usable cores (camflow_jax.io.cpus): the process's affinity, lowered to a
cgroup CPU quota (v2's cpu.max, else v1's CFS quota); the thread and worker counts that follow it."""

import os

import pytest

from camflow_jax.io import cpus


def _affinity():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@pytest.mark.parametrize("text, cap", [("max 100000\n", None), ("100000 100000\n", 1), ("150000 100000\n", 2),
                                       ("1000 100000\n", 1), ("not numbers\n", None), ("", None),
                                       ("100000 0\n", None)])
def test_a_v2_quota_lowers_the_affinity_rounded_up(tmp_path, text, cap):
    f = tmp_path / "cpu.max"
    f.write_text(text)
    want = _affinity() if cap is None else min(_affinity(), cap)
    assert cpus.usable_cpus(str(f), str(tmp_path / "no_v1")) == want


@pytest.mark.parametrize("quota, period, cap", [("-1", "100000", None), ("250000", "100000", 3),
                                                ("50000", "100000", 1), ("x", "100000", None)])
def test_a_v1_quota_counts_where_v2_has_none(tmp_path, quota, period, cap):
    (tmp_path / "cpu.cfs_quota_us").write_text(quota + "\n")
    (tmp_path / "cpu.cfs_period_us").write_text(period + "\n")
    want_quota = None if cap is None else int(quota) / int(period)
    assert cpus.cpu_quota(str(tmp_path / "absent"), str(tmp_path)) == want_quota
    want = _affinity() if cap is None else min(_affinity(), cap)
    assert cpus.usable_cpus(str(tmp_path / "absent"), str(tmp_path)) == want


def test_v2_is_read_before_v1(tmp_path):
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu.cfs_period_us").write_text("100000\n")
    assert cpus.cpu_quota(str(tmp_path / "cpu.max"), str(tmp_path)) is None
    (tmp_path / "cpu.max").write_text("100000 100000\n")  # read once per process: not read again
    assert cpus.cpu_quota(str(tmp_path / "cpu.max"), str(tmp_path)) is None


def test_no_cgroup_file_leaves_the_affinity(tmp_path):
    assert cpus.cpu_quota(str(tmp_path / "absent"), str(tmp_path)) is None
    assert cpus.usable_cpus(str(tmp_path / "absent"), str(tmp_path)) == _affinity()


def test_the_counts_that_follow_it(monkeypatch):
    """The data workers, the stabilizer's measuring threads, the refiner's and the Predictor's
    threads read the one count (a container's quota reaches all of them)."""
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
