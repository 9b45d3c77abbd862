"""The measurement harness's one timing core: the machine a measurement ran on, its load, and
timed calls (``python -m tools.bench MODE``).

Every mode records the machine (:func:`host_info`; the benchmark's
:func:`tools.bench.benchmarking.common.machine_info` adds the JAX backend's fields) and the load
average around its timed part (:func:`load_average`: timings on a shared machine are only
indicative, the load says how shared it was), and times its calls here: :func:`timed` (one
call), :func:`repeat` (one call, again and again), :func:`interleaved` (several calls in turn,
round after round, so that a change of load hits all of them alike) and :func:`time_command` (a
command line, start to exit); :func:`write_result` ends a run, its load after it recorded;
:func:`as_users_run` runs a mode's ``main`` with the process settings of the package's commands. Nothing here imports JAX: the stabilizer's modes and the
accelerator check run without it.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable

__all__ = ["load_average", "cpu_model", "host_info", "timed", "repeat", "interleaved", "warm_interleaved", "time_command", "write_result",
           "as_users_run"]


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (2 decimals, as the kernel keeps them); NaNs where
    the OS has none."""
    try:
        return [round(float(v), 2) for v in os.getloadavg()]
    except OSError:
        return [float("nan")] * 3


def cpu_model(path: str = "/proc/cpuinfo") -> str | None:
    """The CPU's model name as the kernel reports it (the first ``model name`` line of
    ``/proc/cpuinfo``), or None where there is none (another OS, an unreadable file). Timings
    on two machines of one core count but different CPUs do not compare; the name says which."""
    try:
        with open(path) as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name":
                    return value.strip() or None
    except OSError:
        return None
    return None


def host_info() -> dict:
    """The host a measurement ran on, without JAX: core count, processor and CPU model, Python,
    the OS, the allocator and XLA settings from the environment, and the date (UTC)."""
    return {"cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "cpu_model": cpu_model(), "python": platform.python_version(), "os": platform.platform(),
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES"), "xla_flags": os.environ.get("XLA_FLAGS"),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """``(wall, cpu)``: the wall seconds and this process's CPU seconds of one call ``fn()``
    (a JAX call must block inside ``fn``, e.g. ``jax.block_until_ready``)."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def repeat(fn: Callable[[], object], repeats: int) -> tuple[list[float], list[float]]:
    """``(wall, cpu)`` seconds of ``repeats`` calls of ``fn``, one after the other (:func:`timed`)."""
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = timed(fn)
        wall.append(t)
        cpu.append(c)
    return wall, cpu


def interleaved(calls: dict[str, Callable[[], object]], repeats: int) -> tuple[dict, dict]:
    """``(wall, cpu)``: ``{name: seconds per call}`` of ``repeats`` rounds, each round calling
    every one of ``calls`` once, in their order, so that a change of the machine's load hits all
    alike (:func:`timed`)."""
    wall = {k: [] for k in calls}
    cpu = {k: [] for k in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            t, c = timed(fn)
            wall[name].append(t)
            cpu[name].append(c)
    return wall, cpu


def warm_interleaved(calls: dict[str, Callable[[], object]], repeats: int, warmup: int) -> dict:
    """How the benchmarks compare several calls: each one's first call timed alone (``first``,
    wall seconds rounded to ms: compilation included), ``warmup`` untimed rounds, then
    ``repeats`` :func:`interleaved` rounds. Returns ``{"first", "wall", "cpu", "loadavg_before",
    "loadavg_after"}`` (the load average around the timed rounds)."""
    first = {name: round(timed(fn)[0], 3) for name, fn in calls.items()}
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    before = load_average()
    wall, cpu = interleaved(calls, repeats)
    return {"first": first, "wall": wall, "cpu": cpu, "loadavg_before": before, "loadavg_after": load_average()}


def time_command(cmd: list[str], env: dict | None = None) -> float:
    """Wall seconds of ``cmd`` from start to exit; OSError naming the program and its last
    stderr line if it fails."""
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise OSError(f"{os.path.basename(cmd[0])} {' '.join(cmd[1:3])} ... failed ({res.returncode}): {last}")
    return time.perf_counter() - t0


def write_result(path, result: dict) -> None:
    """Records the load average after the run in ``result["load_after"]`` and writes ``result``
    as JSON to ``path`` (numpy scalars as floats)."""
    result["load_after"] = load_average()
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1, default=float)


def as_users_run(main: Callable[..., int]) -> Callable[..., int]:
    """``main`` run as the package's commands run: with transparent huge pages for glibc's malloc
    (:func:`camflow_jax.cli.runtime.use_huge_pages`, which re-executes the process once), so that
    a mode's times and time budgets are what users get (a mode's ``command``)."""

    def command(argv=None) -> int:
        from camflow_jax.cli import runtime

        runtime.use_huge_pages()
        return main(argv)

    command.__doc__ = f"{main.__module__}.main with transparent huge pages on, as the package's commands run."
    return command
