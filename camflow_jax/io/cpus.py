"""The CPU cores this process may use: the one count behind every "how many threads or worker
processes" choice (the training data's workers, the refiner's and the Predictor's threads, the
stabilizer's measuring threads). Plain Python, no JAX: input-pipeline workers import it too."""

from __future__ import annotations

import functools
import math
import os

#: Where cgroup v2 states a container's CPU quota (``docker run --cpus``): "<quota> <period>" or
#: "max <period>".
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"
#: cgroup v1's folder of the same quota: ``cpu.cfs_quota_us`` (-1: none) and ``cpu.cfs_period_us``.
CGROUP_V1_CPU = "/sys/fs/cgroup/cpu"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


@functools.lru_cache(maxsize=8)
def cpu_quota(cpu_max: str = CGROUP_CPU_MAX, v1_dir: str = CGROUP_V1_CPU) -> float | None:
    """The cgroup's CPU quota in cores (1.5 for ``--cpus=1.5``), or None where none is set or
    the files cannot be read: cgroup v2's ``cpu.max`` first, else v1's CFS quota and period.
    Read once per process (the refiner asks for every pair: ~45 us of file reads each time)."""
    try:
        text = _read(cpu_max)
        if text is not None:
            quota, period = text.split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        quota = _read(os.path.join(v1_dir, "cpu.cfs_quota_us"))
        period = _read(os.path.join(v1_dir, "cpu.cfs_period_us"))
        if quota is None or period is None or int(quota) <= 0:
            return None
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):  # a file this reader does not understand
        return None


def usable_cpus(cpu_max: str = CGROUP_CPU_MAX, v1_dir: str = CGROUP_V1_CPU) -> int:
    """The cores this process may run on: its CPU affinity (all cores where the platform has
    none), lowered to the cgroup's CPU quota where one is set (:func:`cpu_quota`), rounded up (a
    quota of 1.5 cores counts 2). At least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        n = os.cpu_count() or 1
    quota = cpu_quota(cpu_max, v1_dir)
    if quota is not None and quota > 0:
        n = min(n, max(1, math.ceil(quota)))
    return max(n, 1)
