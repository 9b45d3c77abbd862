"""The CPU cores this process may use: the one count behind every "how many threads or worker
processes" choice (the training data's workers, the refiner's and the Predictor's threads, the
stabilizer's measuring threads). Plain Python, no JAX: input-pipeline workers import it too."""

from __future__ import annotations

import os

#: Where cgroup v2 states a container's CPU quota (``docker run --cpus``): "<quota> <period>" or
#: "max <period>".
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"


def usable_cpus(cpu_max: str = CGROUP_CPU_MAX) -> int:
    """The cores this process may run on: its CPU affinity (all cores where the platform has
    none), lowered to the cgroup's CPU quota where one is set, rounded up (a quota of 1.5 cores
    counts 2). At least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        n = os.cpu_count() or 1
    try:
        with open(cpu_max) as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):  # no cgroup v2 file, or one this reader does not understand
        pass
    return max(n, 1)
